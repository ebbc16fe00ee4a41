"""HMAC-SHA256 of records that carry trusted state (TB snapshots, pending acks) when a marker secret
is set: computed over NUL-joined parts, carried in one header."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence


def record_mac(secret: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 (``secret``) over ``parts`` joined by NUL bytes."""
    return hmac.new(secret, b"\x00".join(parts), hashlib.sha256).digest()


def has_valid_mac(headers: Sequence[tuple[str, bytes | None]], name: str, expected: bytes) -> bool:
    """Exactly one header ``name``, equal to ``expected`` (compared in constant time)."""
    macs = [value for key, value in headers if key == name]
    return len(macs) == 1 and macs[0] is not None and hmac.compare_digest(macs[0], expected)


__all__ = ["has_valid_mac", "record_mac"]
