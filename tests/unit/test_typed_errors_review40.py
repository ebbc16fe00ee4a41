"""Bad input at public calls that let an untyped exception out (review, session 40): each is now a
PulsarTxnError subclass."""

from __future__ import annotations

import dataclasses

import pytest

from pulsar_txn._admin_cli import parse_duration_ms
from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.client import Client
from pulsar_txn.errors import ConfigError, InvalidTopicName, InvalidTxnID, SchemaSerializationError
from pulsar_txn.schema import AvroSchema, BytesSchema, JsonSchema, StringSchema
from pulsar_txn.txnid import TxnID


def test_a_txn_id_of_thousands_of_digits_is_invalid_not_a_value_error() -> None:
    with pytest.raises(InvalidTxnID):
        TxnID.parse("(" + "1" * 5000 + ",1)")
    assert str(TxnID.parse("(0,3)")) == "(0,3)"


def test_subscribe_to_something_not_a_topic_is_an_invalid_topic_name() -> None:
    with (
        Client("pulsar://127.0.0.1:1", bootstrap_servers="127.0.0.1:1") as client,
        pytest.raises(InvalidTopicName),
    ):
        client.subscribe(5, "s")  # type: ignore[arg-type]


@dataclasses.dataclass
class _Rec:
    n: int


@pytest.mark.parametrize(
    "schema",
    [BytesSchema(), StringSchema(), JsonSchema(_Rec), AvroSchema(_Rec)],
    ids=lambda s: type(s).__name__,
)
def test_schema_decode_of_a_non_payload_is_a_schema_error(schema: object) -> None:
    with pytest.raises(SchemaSerializationError):
        schema.decode(None)  # type: ignore[attr-defined]


def test_a_schema_header_given_as_text_is_read_as_its_bytes() -> None:
    assert StringSchema().decode_message(b"x", "STRING") == "x"
    payload = AvroSchema(_Rec).encode(_Rec(1))
    assert AvroSchema(_Rec).decode_message(payload, AvroSchema(_Rec).header().decode()) == _Rec(1)  # type: ignore[union-attr]


def test_json_nested_deeper_than_the_stack_is_a_schema_error() -> None:
    with pytest.raises(SchemaSerializationError, match="nested"):
        JsonSchema(dict).decode(b"[" * 100_000 + b"]" * 100_000)


def test_a_duration_too_long_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="too long"):
        parse_duration_ms("9" * 400)
    assert parse_duration_ms("5m") == 300_000


def test_an_admin_url_whose_host_is_no_valid_idna_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        TransactionsAdmin(None, admin_url="http://exämple..com:1").coordinator_stats()
