"""Authentication of the coordinator's own records (its transaction log and the owner directory)
when a marker secret is set. Without it, anyone able to write those topics with a plain producer
could forge a COMMITTING record (which the coordinator would then carry out with signed markers), a
claim (fencing the owner) or an owner entry (sending clients, and their tokens, elsewhere).

Each record carries an HMAC of (topic, partition, key, value) in one header; a tombstone is signed
too, as distinct from an empty value. Readers that hold the secret skip records without a valid one."""

from __future__ import annotations

from collections.abc import Sequence

from pulsar_txn._record_mac import has_valid_mac, record_mac

LOG_MAC_HEADER = "ptxn-log-mac"

Headers = Sequence[tuple[str, bytes | None]]


def _mac(secret: bytes, topic: str, partition: int, key: bytes | None, value: bytes | None) -> bytes:
    body = b"-" if value is None else b"+" + value  # a tombstone is not an empty value
    return record_mac(secret, b"tc-log", topic.encode(), str(partition).encode(), key or b"", body)


def log_headers(
    secret: bytes | None, topic: str, partition: int, key: bytes | None, value: bytes | None
) -> list[tuple[str, bytes]] | None:
    """The headers a record written by a coordinator carries (None without a secret)."""
    if secret is None:
        return None
    return [(LOG_MAC_HEADER, _mac(secret, topic, partition, key, value))]


def log_record_valid(
    secret: bytes | None,
    topic: str,
    partition: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
) -> bool:
    """Whether a reader may trust the record: always without a secret, else only with its MAC."""
    if secret is None:
        return True
    return has_valid_mac(headers or (), LOG_MAC_HEADER, _mac(secret, topic, partition, key, value))


__all__ = ["LOG_MAC_HEADER", "log_headers", "log_record_valid"]
