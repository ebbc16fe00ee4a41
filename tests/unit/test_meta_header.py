"""The ``pulsar.meta`` header: round trip, malformed input, range errors, and both header forms read."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_store import StoredRecord
from pulsar_txn._meta_header import META_HEADER, MetaHeaderError, check_event_time, decode_meta, encode_meta
from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.message import Message, producer_name_of

_I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(_I64, st.text(max_size=40), st.none() | _I64)
def test_meta_round_trips(seq: int, name: str, event_time: int | None) -> None:
    raw = encode_meta(seq, name.encode(), event_time)
    assert decode_meta(raw) == (name, seq, event_time)


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x01", b"\x01\x00" + b"\x00" * 7, b"\x02\x00" + b"\x00" * 8 + b"p", b"\x01\x01" + b"\x00" * 8],
    ids=["empty", "version-only", "short-sequence", "unknown-version", "flagged-event-time-missing"],
)
def test_malformed_or_unknown_version_meta_is_ignored_and_logged(
    raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="pulsar_txn._meta_header"):
        assert decode_meta(raw) is None
    rec = StoredRecord("t", 0, 7, None, b"v", ((META_HEADER, raw),), 1)
    msg = Message.from_record(rec)  # still delivered, without that metadata
    assert (msg.data, msg.producer_name, msg.sequence_id, msg.event_timestamp) == (b"v", None, None, None)


def test_out_of_range_sequence_or_event_time_is_a_typed_error() -> None:
    with pytest.raises(MetaHeaderError) as info:
        encode_meta(0, b"p", 2**63)
    assert isinstance(info.value, PulsarTxnError) and not info.value.retriable
    with pytest.raises(MetaHeaderError):
        encode_meta(-(2**63) - 1, b"p")


def test_both_header_forms_give_the_same_message_fields() -> None:
    new = StoredRecord("t", 0, 1, None, b"v", ((META_HEADER, encode_meta(42, b"prod-1", 1700)),), 5)
    old = StoredRecord(
        "t",
        0,
        1,
        None,
        b"v",
        (("pulsar.producer", b"prod-1"), ("pulsar.seq", b"42"), ("pulsar.event_time", b"1700")),
        5,
    )
    assert Message.from_record(new) == Message.from_record(old)
    assert producer_name_of(new) == producer_name_of(old) == "prod-1"


def test_a_damaged_legacy_sequence_header_does_not_break_delivery() -> None:
    rec = StoredRecord("t", 0, 1, None, b"v", (("pulsar.seq", b"not-a-number"),), 5)
    assert Message.from_record(rec).sequence_id is None


def test_an_event_time_the_header_cannot_carry_is_refused_before_a_send_takes_a_sequence_id() -> None:
    check_event_time(None)
    check_event_time(2**63 - 1)
    with pytest.raises(MetaHeaderError):
        check_event_time(2**63)


def test_a_legacy_event_time_too_large_to_send_again_is_left_out() -> None:
    # A dead-letter or pipeline re-send carries the event time in pulsar.meta: a value that does not
    # fit would make that re-send fail every time the message comes round.
    rec = StoredRecord("t", 0, 1, None, b"v", (("pulsar.event_time", b"99999999999999999999"),), 5)
    assert Message.from_record(rec).event_timestamp is None


def test_producer_name_falls_back_to_the_legacy_header_when_the_meta_header_is_damaged() -> None:
    rec = StoredRecord("t", 0, 1, None, b"v", ((META_HEADER, b"\x09"), ("pulsar.producer", b"old")), 5)
    assert producer_name_of(rec) == "old"
