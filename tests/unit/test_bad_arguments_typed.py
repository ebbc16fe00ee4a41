"""Wrong arguments at the public API give one of our typed errors (``PulsarTxnError``) naming the
argument, never a TypeError, AttributeError or ValueError from deep inside (session 29's bad-input
review); none of these calls needs a broker."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pulsar_txn import (
    AvroSchema,
    Client,
    ConfigError,
    InvalidTxnID,
    JsonSchema,
    MessageId,
    PulsarTxnError,
    SchemaSerializationError,
    TransactionsAdmin,
    TxnID,
)
from pulsar_txn.asyncio import AsyncClient

NAN = float("nan")


@pytest.fixture
def client() -> Iterator[Client]:
    c = Client("pulsar://127.0.0.1:6650", bootstrap_servers="127.0.0.1:9")  # no I/O until used
    try:
        yield c
    finally:
        c.close()


OFFLINE: dict[str, Callable[[], object]] = {
    "Client(service_url=5)": lambda: Client(5, bootstrap_servers="127.0.0.1:9"),  # type: ignore[arg-type]
    "TxnID.parse(5)": lambda: TxnID.parse(5),  # type: ignore[arg-type]
    "TxnID('a', 'b')": lambda: TxnID("a", "b"),  # type: ignore[arg-type]
    "MessageId.parse('junk')": lambda: MessageId.parse("junk"),
    "MessageId.parse('t:a:b')": lambda: MessageId.parse("t:a:b"),
    "MessageId.parse(5)": lambda: MessageId.parse(5),  # type: ignore[arg-type]
    # Ids an application builds (session 39's review: these acked a message never named, corrupted a
    # cursor with a float offset, or failed inside confluent_kafka at the next commit).
    "MessageId(t, 0, 1.5)": lambda: MessageId("t", 0, 1.5),  # type: ignore[arg-type]
    "MessageId(t, 0, 'x')": lambda: MessageId("t", 0, "x"),  # type: ignore[arg-type]
    "MessageId(None, 0, 0)": lambda: MessageId(None, 0, 0),  # type: ignore[arg-type]
    "MessageId(t, False, True)": lambda: MessageId("t", False, True),
    "MessageId(t, 0, -5)": lambda: MessageId("t", 0, -5),
    "MessageId(t, -1, 3)": lambda: MessageId("t", -1, 3),
    "MessageId('', -1, 0)": lambda: MessageId("", -1, 0),
    "MessageId.parse('a:-1:-1')": lambda: MessageId.parse("a:-1:-1"),
    "Client(authentication=5)": lambda: Client("pulsar://h:6650", bootstrap_servers="h:9", authentication=5),  # type: ignore[arg-type]
    "Client(authentication='a\\nb')": lambda: Client(
        "pulsar://h:6650", bootstrap_servers="h:9", authentication="a\nb"
    ),
    "Client(snapshot_topic=5)": lambda: Client("pulsar://h:6650", bootstrap_servers="h:9", snapshot_topic=5),  # type: ignore[arg-type]
    "Client(log_topic='a b')": lambda: Client("pulsar://h:6650", bootstrap_servers="h:9", log_topic="a b"),
    "TransactionsAdmin('x')": lambda: TransactionsAdmin("x"),  # type: ignore[arg-type]
    "TransactionsAdmin(None).transaction_status": lambda: TransactionsAdmin(None).transaction_status("(0,1)"),
    "JsonSchema(5)": lambda: JsonSchema(5),  # type: ignore[arg-type]
    "JsonSchema({an avro schema})": lambda: JsonSchema({"type": "record", "name": "r", "fields": []}),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", list(OFFLINE))
def test_a_bad_argument_is_a_typed_error(case: str) -> None:
    with pytest.raises(PulsarTxnError):
        OFFLINE[case]()


def test_txn_ids_of_the_wrong_type_are_invalid_txn_ids() -> None:
    with pytest.raises(InvalidTxnID):
        TxnID.parse(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidTxnID):
        TxnID("0", 1)  # type: ignore[arg-type]
    assert TxnID.parse("(0,3)") == TxnID(0, 3)


def test_message_ids_naming_a_position_or_a_sentinel_are_still_made() -> None:
    from pulsar_txn import EARLIEST, LATEST

    assert MessageId.parse(str(EARLIEST)) == EARLIEST and MessageId.parse(str(LATEST)) == LATEST
    assert MessageId("", 0, 0).offset == 0 and MessageId("t", 2, 1 << 62).partition == 2


def test_a_closed_client_makes_no_topics_and_its_admin_refuses_kafka_calls() -> None:
    from pulsar_txn import AlreadyClosed

    c = Client("pulsar://127.0.0.1:6650", bootstrap_servers="127.0.0.1:9")
    admin = TransactionsAdmin(c)
    c.close()
    # Before: create_topic made the topic (the client's admin client was still usable).
    with pytest.raises(AlreadyClosed):
        c.create_topic("t")
    with pytest.raises(AlreadyClosed):
        c.delete_topic("t")
    with pytest.raises(AlreadyClosed):
        admin.list_transactions(0)


def test_message_id_parse_still_reads_topics_with_colons() -> None:
    assert MessageId.parse("a:b:1:2") == MessageId("a:b", 1, 2)
    with pytest.raises(ConfigError, match="not a MessageId"):
        MessageId.parse("t:a:b")


ADMIN: dict[str, Callable[[Client], object]] = {
    "admin_url=5": lambda c: TransactionsAdmin(c, admin_url=5),  # type: ignore[arg-type]
    "admin_url with a lone surrogate": lambda c: TransactionsAdmin(c, admin_url="http://h\ud800"),
    "timeout_seconds=nan": lambda c: TransactionsAdmin(
        c, admin_url="http://127.0.0.1:1", timeout_seconds=NAN
    ),
    "timeout_seconds=-1": lambda c: TransactionsAdmin(c, admin_url="http://127.0.0.1:1", timeout_seconds=-1),
    "timeout_seconds='x'": lambda c: TransactionsAdmin(c, timeout_seconds="x"),  # type: ignore[arg-type]
    "auth_token with a line break": lambda c: TransactionsAdmin(c, auth_token="a\nb"),
    "list_transactions('x')": lambda c: TransactionsAdmin(c).list_transactions("x"),  # type: ignore[arg-type]
    "list_transactions(1.5)": lambda c: TransactionsAdmin(c).list_transactions(1.5),  # type: ignore[arg-type]
    "slow_transactions('5')": lambda c: TransactionsAdmin(c).slow_transactions("5"),  # type: ignore[arg-type]
    "slow_transactions(nan)": lambda c: TransactionsAdmin(c).slow_transactions(NAN),  # type: ignore[arg-type]
    "pending_ack_stats(t, 5)": lambda c: TransactionsAdmin(c).pending_ack_stats("t", 5),  # type: ignore[arg-type]
    "pending_ack_stats(t, lone surrogate)": lambda c: TransactionsAdmin(c).pending_ack_stats("t", "s\ud800"),
    "position_stats_in_pending_ack(t, s, 'x')": lambda c: TransactionsAdmin(c).position_stats_in_pending_ack(
        "t",
        "s",
        "x",  # type: ignore[arg-type]
    ),
    "AsyncClient(max_workers='x')": lambda c: AsyncClient(c, max_workers="x"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", list(ADMIN))
def test_a_bad_admin_or_async_argument_is_refused_before_any_io(client: Client, case: str) -> None:
    # The client points at nothing: a call that got past its checks would fail differently (or hang).
    with pytest.raises(ConfigError):
        ADMIN[case](client)


def test_an_admin_call_with_a_txn_id_of_the_wrong_type_is_an_invalid_txn_id(client: Client) -> None:
    admin = TransactionsAdmin(client)
    with pytest.raises(InvalidTxnID):
        admin.transaction_status(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidTxnID):
        admin.transaction_in_buffer_stats(5, "t")  # type: ignore[arg-type]


@dataclasses.dataclass
class _Point:
    x: int


def test_an_avro_record_with_a_field_the_schema_lacks_is_refused_not_truncated() -> None:
    schema = AvroSchema(
        dict, schema={"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    )
    with pytest.raises(SchemaSerializationError):
        schema.encode({"a": 1, "b": "important"})
    assert schema.decode(schema.encode({"a": 1})) == {"a": 1}
    # A missing field with a default still takes it.
    with_default = AvroSchema(
        dict,
        schema={
            "type": "record",
            "name": "R2",
            "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": "d"}],
        },
    )
    assert with_default.decode(with_default.encode({"a": 1})) == {"a": 1, "b": "d"}
    records: Any = AvroSchema(_Point)
    assert records.decode(records.encode(_Point(3))) == _Point(3)


_ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"]},  # optional, no default
        {
            "name": "addr",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Addr",
                    "fields": [
                        {"name": "city", "type": "string"},
                        {"name": "zip", "type": ["null", "string"]},
                    ],
                },
            ],
        },
        {"name": "more", "type": {"type": "array", "items": "Addr"}, "default": []},
    ],
}


def test_an_avro_dict_may_leave_out_optional_fields_but_not_add_undeclared_ones() -> None:
    # Missing nullable fields are written as null, as pulsar-client does (strict fastavro refused them).
    schema = AvroSchema(dict, schema=_ORDER)
    assert schema.decode(schema.encode({"id": 1})) == {"id": 1, "note": None, "addr": None, "more": []}
    nested = {"id": 1, "addr": {"city": "x"}, "more": [{"city": "y"}]}
    assert schema.decode(schema.encode(nested))["more"] == [{"city": "y", "zip": None}]
    for bad, where in [
        ({"id": 1, "extra": 2}, "'extra'"),
        ({"id": 1, "addr": {"city": "x", "street": "s"}}, "addr.street"),
        ({"id": 1, "more": [{"city": "y"}, {"city": "z", "zip2": "1"}]}, r"more.\[1\].zip2"),
    ]:
        with pytest.raises(SchemaSerializationError, match=where):
            schema.encode(bad)


def test_the_compat_avro_schema_writes_missing_optional_fields_as_null() -> None:
    from pulsar_txn.compat.schema import AvroSchema as CompatAvroSchema

    schema = CompatAvroSchema(None, schema_definition=_ORDER)
    assert schema.decode(schema.encode({"id": 7}))["note"] is None
