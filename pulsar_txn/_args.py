"""Argument checks at the public API's entry points: a wrong type or value is a ``ConfigError`` saying
which argument and why, never a TypeError, ValueError or AttributeError from deep inside (and a NaN
or infinite timeout never turns a bounded wait into an endless one)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import TypeVar

from pulsar_txn.errors import ConfigError

E = TypeVar("E")
N = TypeVar("N", int, float)

# Longer than any wait an application means (~31 years), short enough for time.monotonic() arithmetic
# and for datetime/time_t conversions not to overflow.
_MAX_SECONDS = 1e9


def number(value: object, what: str, *, minimum: float = 0.0, unit: str = "") -> float:
    """``value`` as a finite float at or above ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what} is a number{unit}, not {type(value).__name__} {value!r}")
    result = float(value)
    if not math.isfinite(result) or result < minimum:
        raise ConfigError(f"{what} must be a finite number >= {minimum:g}{unit}, not {value!r}")
    return result


def seconds(value: object, what: str) -> float:
    """A duration in seconds: finite, positive, at most ~31 years."""
    result = number(value, what, unit=" of seconds")
    if result <= 0:
        raise ConfigError(f"{what} must be positive, not {value!r}")
    return min(result, _MAX_SECONDS)


def millis(value: object, what: str) -> float:
    """A wait in milliseconds: finite and >= 0 (0: only what is ready now), at most ~31 years."""
    return min(number(value, what, unit=" of milliseconds"), _MAX_SECONDS * 1000)


def integer(value: object, what: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} is an int, not {type(value).__name__} {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{what} must be {bound}, not {value}")
    return value


def encoded(value: str, what: str) -> bytes:
    """``value`` as UTF-8 (a str with lone surrogates has none)."""
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise ConfigError(f"{what} is not valid text (it does not encode as UTF-8): {value!r}") from None


def text(value: object, what: str) -> str:
    """A str that encodes as UTF-8."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} is a str, not {type(value).__name__} {value!r}")
    encoded(value, what)
    return value


def cli_number(parse: Callable[[str], N], what: str, low: N, high: N | None = None) -> Callable[[str], N]:
    """An argparse ``type`` for a number in ``low``..``high`` (no upper bound if None): text that is
    not a number, or one out of range (NaN included), is a usage error naming ``what``, never a
    value silently taken as "not given" or a traceback from where it is used."""

    def convert(text: str) -> N:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: not a number: {text!r:.40}") from None
        if not (low <= value and (high is None or value <= high)):
            bound = f"in {low:g}-{high:g}" if high is not None else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{what} {text:.40} is not {bound}")
        return value

    return convert


_GROUP_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")


def group_instance_id(value: object, what: str) -> str:
    """A Kafka ``group.instance.id`` (static membership) as Kafka accepts it: 1-249 of
    ``[A-Za-z0-9._-]``. An empty one would silently turn static membership off."""
    name = text(value, what)
    if not _GROUP_INSTANCE_ID.fullmatch(name) or name in {".", ".."}:
        raise ConfigError(f"{what} {name!r:.60}: 1-249 characters of a-z, A-Z, 0-9, '.', '_' and '-'")
    return name


def instance(value: object, kind: type[E], what: str) -> E:
    if not isinstance(value, kind):
        raise ConfigError(f"{what} is a {kind.__name__}, not {type(value).__name__} {value!r}")
    return value


_MAX_INT64 = (1 << 63) - 1  # Kafka's offsets and timestamps are int64


def publish_time(value: int, what: str) -> int:
    """A publish time to seek to: ms since the epoch, 0 to 2**63-1 (a negative one is one of Kafka's
    special lookups, -1 latest and -2 earliest, not a time)."""
    if not 0 <= value <= _MAX_INT64:
        raise ConfigError(f"{what} must be a publish time in ms since the epoch (0 to 2**63-1), not {value}")
    return value


def position(partition: int, offset: int, what: str) -> None:
    """A message id's partition and offset: not negative, within int64 (a negative offset is one of
    Kafka's special positions, not a message)."""
    if not 0 <= partition <= _MAX_INT64 or not 0 <= offset < _MAX_INT64:
        raise ConfigError(
            f"{what}: partition and offset must be between 0 and 2**63-1, not {partition}:{offset}"
        )


__all__ = [
    "encoded",
    "instance",
    "integer",
    "millis",
    "number",
    "position",
    "publish_time",
    "seconds",
    "text",
]


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bearer token, or None. HTTP refuses control characters in a header
    value (a trailing line break, as a secret file often ends, is the usual one) and servers strip
    spaces at its ends, so such a token could never match. The token itself is never in the answer."""
    if any(ord(c) < 32 or ord(c) == 127 for c in token):
        return "holds a control character (a line break?), which an HTTP header cannot carry"
    if token != token.strip(" \t"):
        return "starts or ends with a space or tab, which HTTP strips from a header value"
    return None


def bearer_token(value: object, what: str) -> str:
    """A bearer token for an HTTP ``Authorization`` header: non-empty text :func:`token_problem`
    finds nothing wrong with (a ``ConfigError`` naming ``what``, never showing the token)."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} is text, not {type(value).__name__}")
    problem = "is empty" if not value else token_problem(value)
    if problem is not None:
        raise ConfigError(f"{what} {problem}")
    return value
