"""Message.from_record (the per-message decode path) against the dataclass constructor."""

from __future__ import annotations

import dataclasses

import pytest

from kafka_store import StoredRecord
from pulsar_txn.buffer.marker import TXN_HEADER
from pulsar_txn.message import Message, MessageId, Payload
from pulsar_txn.naming import partition_name
from pulsar_txn.schema import SCHEMA_HEADER, StringSchema
from pulsar_txn.txnid import TxnID


def test_from_record_sets_every_field_as_the_constructor_would() -> None:
    txn = TxnID(2, 77)
    headers = (
        ("pulsar.prop.source", b"in:0:5"),
        (TXN_HEADER, txn.to_bytes()),
        ("pulsar.event_time", b"1700000000123"),
        ("pulsar.producer", b"prod-1"),
        (SCHEMA_HEADER, b"string"),
        ("pulsar.seq", b"42"),
        ("unrelated", b"x"),
    )
    rec = StoredRecord("orders", 3, 1234, b"key-\xc3\xa9", b"payload", headers, 1_700_000_000_000)
    schema = StringSchema()
    got = Message.from_record(rec, 2, schema)
    want = Message(
        MessageId("orders", 3, 1234),
        Payload(b"payload"),
        "key-é",
        {"source": "in:0:5"},
        1_700_000_000_123,
        1_700_000_000_000,
        "prod-1",
        42,
        txn,
        2,
        partition_name("orders", 3),
        b"string",
        schema,
    )
    assert got == want
    assert got.schema is schema and isinstance(got.data, Payload)
    assert [getattr(got, f.name) for f in dataclasses.fields(Message)] == [
        getattr(want, f.name) for f in dataclasses.fields(Message)
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.data = Payload(b"other")  # type: ignore[misc]


def test_from_record_without_headers_key_or_value_and_with_a_short_txn_header() -> None:
    rec = StoredRecord("t", 0, 0, None, None, ((TXN_HEADER, b"short"),), 5)
    msg = Message.from_record(rec)
    assert (msg.data, msg.partition_key, msg.txn_id, msg.properties, msg.sequence_id) == (
        b"",
        None,
        None,
        {},
        None,
    )
    assert msg.message_id == MessageId("t", 0, 0) and msg.message_id < MessageId("t", 0, 1)
    assert hash(msg.message_id) == hash(MessageId("t", 0, 0))
