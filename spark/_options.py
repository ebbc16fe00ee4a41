"""Option parsing for the ``pulsar_txn`` Spark source: Spark's Kafka source options plus ours.

Everything here is pure (no I/O), so the rules are unit-tested without Spark or a broker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kafka_store import KafkaConfig
from pulsar_txn.buffer.snapshot import DEFAULT_SNAPSHOT_TOPIC
from pulsar_txn.errors import ConfigError
from pulsar_txn.naming import DEFAULT_LOG_TOPIC

EARLIEST = -2  # Spark's per-partition JSON uses -2 for earliest and -1 for latest
LATEST = -1

TopicPartition = tuple[str, int]
# "earliest" | "latest" | {(topic, partition): offset or EARLIEST / LATEST}
OffsetSpec = str | dict[TopicPartition, int]


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options; picklable, shipped to executors inside each input partition."""

    # bootstrap.servers + every kafka.* passthrough, without the prefix (SASL passwords too: no repr)
    kafka_conf: dict[str, str] = field(repr=False)
    subscription: tuple[Literal["subscribe", "subscribePattern", "assign"], str]
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    transaction_filter: bool = True
    marker_secret: bytes | None = field(default=None, repr=False)
    snapshot_topic: str | None = DEFAULT_SNAPSHOT_TOPIC
    num_tcs: int | None = None
    """None: the transaction log's partition count, as the TB service folds (``log_topic``)."""
    log_topic: str = DEFAULT_LOG_TOPIC
    fetch_batch: int = 10_000
    poll_timeout_s: float = 30.0

    def kafka_config(self) -> KafkaConfig:
        conf = dict(self.kafka_conf)
        servers = conf.pop("bootstrap.servers")
        client_id = conf.pop("client.id", "pulsar-txn-spark")
        try:
            return KafkaConfig(bootstrap_servers=servers, client_id=client_id, extra=conf)
        except ValueError as exc:
            raise ConfigError(f"kafka.bootstrap.servers / kafka.* options: {exc}") from None


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name}={raw!r}: expected true or false")


MAX_PARTITION = 2**31 - 1  # Kafka's partition number is an int32
_DAY_MS = 86_400_000
_MAX_OFFSET = 2**63 - 1  # an int64


def _positive_int(opts: Mapping[str, str], name: str, maximum: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name}={raw!r}: expected a positive integer") from None
    if value <= 0:
        raise ConfigError(f"option {name}={raw!r}: expected a positive integer")
    if maximum is not None and value > maximum:
        raise ConfigError(f"option {name}={raw!r}: at most {maximum:,}")
    return value


def parse_offsets(name: str, raw: str | None, default: str) -> OffsetSpec:
    """``earliest``, ``latest`` or Spark's JSON ``{"topic": {"0": 23, "1": -2}}``."""
    if raw is None:
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        raise ConfigError(
            f'option {name}={raw!r}: expected earliest, latest or JSON like {{"topic":{{"0":23,"1":-2}}}}'
        ) from None
    if not isinstance(parsed, dict):
        raise ConfigError(f"option {name}: JSON must map topic -> {{partition: offset}}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"option {name}: topic {topic!r} must map partition -> offset")
        for part, offset in parts.items():
            try:
                p = int(part)
            except ValueError:
                raise ConfigError(f"option {name}: partition {part!r} of {topic!r} is not a number") from None
            if not 0 <= p <= MAX_PARTITION:
                raise ConfigError(
                    f"option {name}: partition {part!r} of {topic!r} is not a Kafka partition number"
                )
            if (
                not isinstance(offset, int)
                or isinstance(offset, bool)
                or not EARLIEST <= offset <= _MAX_OFFSET
            ):
                raise ConfigError(
                    f"option {name}: offset {offset!r} of {topic}[{p}] must be >= 0, -1 (latest) "
                    "or -2 (earliest)"
                )
            out[(str(topic), p)] = offset
    return out


def _subscription(opts: Mapping[str, str]) -> tuple[Literal["subscribe", "subscribePattern", "assign"], str]:
    given = [(k, opts[k.lower()]) for k in ("subscribe", "subscribePattern", "assign") if k.lower() in opts]
    if len(given) != 1:
        raise ConfigError(
            "exactly one of the options subscribe, subscribePattern, assign is required "
            f"(got {[k for k, _ in given] or 'none'})"
        )
    kind, value = given[0]
    if not value.strip():
        raise ConfigError(f"option {kind} is empty")
    if kind == "subscribe":
        if not any(t.strip() for t in value.split(",")):  # e.g. " , ": read nothing, silently
            raise ConfigError(f"option subscribe={value!r} names no topic")
        return "subscribe", value
    if kind == "subscribePattern":
        return "subscribePattern", value
    return "assign", value


def parse_assign(raw: str) -> list[TopicPartition]:
    """``{"topicA":[0,1],"topicB":[2]}`` -> [(topicA, 0), (topicA, 1), (topicB, 2)]."""
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        raise ConfigError(f'option assign={raw!r}: expected JSON like {{"topic":[0,1]}}') from None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f'option assign={raw!r}: expected JSON like {{"topic":[0,1]}}')
    out: list[TopicPartition] = []
    for topic, parts in parsed.items():
        # Not bool: JSON true is an int in Python (it read partition 1, then failed in Arrow).
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= MAX_PARTITION for p in parts
        ):
            raise ConfigError(f"option assign: {topic!r} must map to a list of partition numbers")
        out.extend((str(topic), p) for p in parts)
    return out


_TIMESTAMP_OPTIONS = (
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
)


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate Spark options (names are case-insensitive, as in Spark) into ``SourceOptions``."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    kafka_conf = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
    if not kafka_conf.get("bootstrap.servers"):
        raise ConfigError("option kafka.bootstrap.servers is required")
    kind, value = _subscription(opts)
    if kind == "assign":
        parse_assign(value)
    timed = sorted(k for k in _TIMESTAMP_OPTIONS if k.lower() in opts)
    if timed:
        # Accepting and ignoring them would read other offsets than the job asked for.
        raise ConfigError(
            f"option {timed[0]} is not supported: give startingOffsets / endingOffsets instead "
            "(pulsar_txn's Consumer.seek(publish time) and kafka_store.offsets_for_time find offsets by time)"
        )
    starting = parse_offsets(
        "startingOffsets", opts.get("startingoffsets"), "earliest" if not streaming else "latest"
    )
    ending = parse_offsets("endingOffsets", opts.get("endingoffsets"), "latest")
    if streaming and "endingoffsets" in opts:
        raise ConfigError("option endingOffsets is for batch reads only (a stream has no end)")
    if not streaming:
        # As Spark's Kafka source: a batch cannot start at "latest" nor end at "earliest".
        if starting == "latest" or (isinstance(starting, dict) and LATEST in starting.values()):
            raise ConfigError("startingOffsets cannot be latest (-1) for a batch read")
        if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
            raise ConfigError("endingOffsets cannot be earliest (-2) for a batch read")
    secret = opts.get("markersecret")
    snapshot = opts.get("snapshottopic", DEFAULT_SNAPSHOT_TOPIC)
    num_tcs = _positive_int(opts, "numTcs")
    return SourceOptions(
        kafka_conf=kafka_conf,
        subscription=(kind, value),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        transaction_filter=_bool(opts, "transactionFilter", True),
        marker_secret=secret.encode() if secret else None,
        snapshot_topic=snapshot if snapshot.strip().lower() not in ("", "none") else None,
        num_tcs=num_tcs,
        log_topic=opts.get("logtopic", DEFAULT_LOG_TOPIC),
        # librdkafka's consume() takes at most 1M records per call
        fetch_batch=_positive_int(opts, "fetchBatch", maximum=1_000_000) or 10_000,
        # A day at most: librdkafka takes the wait as a C int of milliseconds.
        poll_timeout_s=float(_positive_int(opts, "pollTimeoutMs", maximum=_DAY_MS) or 30_000) / 1000,
    )
