"""The ``pulsar.meta`` header: a message's producer name, sequence id and event time in one header.

One header rather than three because a Kafka client builds each header of each record it reads as
Python objects, ~1 µs per header in confluent-kafka (docs/benchmarks.md, "Session 9"): on the
read-committed path that was a third of the CPU per record. Readers still accept the separate
``pulsar.producer`` / ``pulsar.seq`` / ``pulsar.event_time`` headers earlier versions wrote.

Layout, version 1 (docs/storage-format.md)::

    version u8 = 1 | flags u8 (bit 0: event time present) | sequence id i64 BE
    | [event time i64 BE, ms] | producer name, UTF-8 (the rest)

Flag bits 1-7 are ignored by this version's readers: a field that older readers must not misread
needs a new version, not a new flag.
"""

from __future__ import annotations

import logging
import struct

from pulsar_txn.errors import PulsarTxnError

log = logging.getLogger(__name__)

META_HEADER = "pulsar.meta"
VERSION = 1
_EVENT_TIME = 0x01
_HEAD = struct.Struct(">BBq")
_HEAD_EVENT = struct.Struct(">BBqq")
_I64 = (-(1 << 63), (1 << 63) - 1)
_malformed_seen = 0


class MetaHeaderError(PulsarTxnError, ValueError):
    """A sequence id or event time that does not fit the header's signed 64-bit fields."""


def fits(value: int) -> bool:
    """Does ``value`` fit the header's signed 64-bit fields?"""
    return _I64[0] <= value <= _I64[1]


def check_event_time(event_time: int | None) -> None:
    """Raise ``MetaHeaderError`` for an event time the header cannot carry (before a send takes a
    sequence id)."""
    if event_time is not None and not fits(event_time):
        raise MetaHeaderError(f"event time {event_time} is outside [{_I64[0]}, {_I64[1]}] ms")


def encode_meta(sequence_id: int, producer_name: bytes, event_time: int | None = None) -> bytes:
    """The header value (``producer_name`` already UTF-8 encoded: producers encode it once)."""
    try:
        if event_time is None:
            return _HEAD.pack(VERSION, 0, sequence_id) + producer_name
        return _HEAD_EVENT.pack(VERSION, _EVENT_TIME, sequence_id, event_time) + producer_name
    except struct.error:
        raise MetaHeaderError(
            f"sequence id {sequence_id} or event time {event_time} is outside [{_I64[0]}, {_I64[1]}]"
        ) from None


def decode_meta(raw: bytes) -> tuple[str, int, int | None] | None:
    """(producer name, sequence id, event time or None); None for a malformed or unknown-version
    header, which is logged (the first time, then every 1000th) and otherwise ignored: the message is
    still delivered, without that metadata, as Pulsar delivers a message whose producer it cannot tell."""
    if len(raw) >= _HEAD.size and raw[0] == VERSION:
        if not raw[1] & _EVENT_TIME:
            _v, _f, seq = _HEAD.unpack_from(raw)
            return raw[_HEAD.size :].decode("utf-8", "replace"), seq, None
        if len(raw) >= _HEAD_EVENT.size:
            _v, _f, seq, event_time = _HEAD_EVENT.unpack_from(raw)
            return raw[_HEAD_EVENT.size :].decode("utf-8", "replace"), seq, event_time
    global _malformed_seen
    if _malformed_seen % 1000 == 0:
        log.warning(
            "malformed or unknown-version %s header (%d bytes, first byte %s) ignored; %d so far",
            META_HEADER,
            len(raw),
            raw[:1].hex() or "none",
            _malformed_seen + 1,
        )
    _malformed_seen += 1
    return None
