"""Review findings of session 41 that need no broker: admin URLs that are not http(s) are bad
configuration, not an unreachable host; Avro values of self-referencing record types are refused on
encode past the depth every reader can decode; a schema given to several clients decodes through
each client's own registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.errors import ConfigError, IncompatibleSchema, SchemaSerializationError
from pulsar_txn.schema import MAX_RECURSIVE_NESTING, AvroSchema


@pytest.mark.parametrize(
    "url", ["127.0.0.1:8080", "localhost:8080", "pulsar://127.0.0.1:6650", "ftp://127.0.0.1:1"]
)
def test_an_admin_url_that_is_not_http_is_a_config_error_not_unreachable(url: str) -> None:
    # "host:port" parsed as scheme "host": it was "cannot reach ...", retriable, and ftp:// was tried.
    with pytest.raises(ConfigError):
        TransactionsAdmin(None, admin_url=url, timeout_seconds=2).coordinator_stats()


@dataclass
class Node:
    v: int
    next: Node | None = None


def _chain(depth: int) -> Node:
    node = Node(0)
    for i in range(depth - 1):
        node = Node(i + 1, node)
    return node


def test_a_recursive_avro_value_is_written_only_as_deep_as_readers_decode() -> None:
    schema = AvroSchema(Node)
    deepest = _chain(MAX_RECURSIVE_NESTING)
    assert schema.decode(schema.encode(deepest)) == deepest
    with pytest.raises(SchemaSerializationError):
        schema.encode(_chain(MAX_RECURSIVE_NESTING + 1))  # encoded up to ~330 before, decoded to ~200


def _deep_call(depth: int, fn: Any) -> Any:
    return fn() if depth == 0 else _deep_call(depth - 1, fn)


def test_the_deepest_recursive_avro_value_decodes_from_deep_in_a_callers_stack() -> None:
    schema = AvroSchema(Node)
    data = schema.encode(_chain(MAX_RECURSIVE_NESTING))
    assert _deep_call(300, lambda: schema.decode(data)) == _chain(MAX_RECURSIVE_NESTING)


@dataclass
class V1:
    a: int


@dataclass
class V2:
    a: int
    b: str = "dflt"


def test_one_schema_object_decodes_through_each_clients_registry() -> None:
    # The first client's lookup stayed bound to the schema object for good (also once closed).
    writer = AvroSchema(V1)
    assert writer.avro_schema is not None and writer.fingerprint is not None
    data, header = writer.encode(V1(1)), writer.header()
    shared = AvroSchema(V2)
    first = shared.with_registry(lambda fp: None)  # a client whose registry lacks V1
    second = shared.with_registry(lambda fp: writer.avro_schema if fp == writer.fingerprint else None)
    with pytest.raises(IncompatibleSchema):
        first.decode_message(data, header)
    assert second.decode_message(data, header) == V2(1, "dflt")
    assert shared.with_registry(lambda fp: None) is not shared


def _price(scale: int, extra: bool = False) -> dict[str, Any]:
    amount = {
        "name": "amount",
        "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": scale},
    }
    fields = [amount, {"name": "note", "type": "string", "default": ""}] if extra else [amount]
    return {"type": "record", "name": "Price", "fields": fields}


def test_bound_copies_keep_the_writer_schemas_of_their_own_registry() -> None:
    # The copies shared one cache: whichever client looked a fingerprint up first decided the
    # decimal scale for every other client (12.34 read as 1234.00 through the second).
    from decimal import Decimal

    two, four = AvroSchema(dict, schema=_price(2)), AvroSchema(dict, schema=_price(4))
    assert two.fingerprint == four.fingerprint
    shared = AvroSchema(dict, schema=_price(2, extra=True))
    a = shared.with_registry(lambda fp: _price(2))
    b = shared.with_registry(lambda fp: _price(4))
    assert a.decode_message(two.encode({"amount": Decimal("12.34")}), two.header())["amount"] == Decimal(
        "12.34"
    )
    assert b.decode_message(four.encode({"amount": Decimal("12.34")}), four.header())["amount"] == Decimal(
        "12.34"
    )


def test_only_logical_types_make_two_registrations_of_one_fingerprint_differ() -> None:
    from pulsar_txn._schema_registry import _decoding_form

    plain = {
        "type": "record",
        "name": "E",
        "fields": [{"name": "a", "type": "long"}, {"name": "s", "type": "string"}],
    }
    javaish = {
        "type": "record",
        "name": "E",
        "doc": "generated",
        "fields": [
            {"name": "a", "type": {"type": "long"}},
            {"name": "s", "type": {"type": "string", "avro.java.string": "String"}, "default": "x"},
        ],
    }
    assert _decoding_form(plain) == _decoding_form(javaish)  # refused as forged before
    assert _decoding_form(_price(2)) != _decoding_form(_price(4))


def test_a_writer_from_the_registry_keeps_its_namespace_for_its_nested_types() -> None:
    # Taking the reader's namespace too moved the nested Item, and "com.acme.v1.Item" pointed nowhere.
    item = {"type": "record", "name": "Item", "fields": [{"name": "n", "type": "long"}]}

    def order(ns: str, extra: bool = False) -> dict[str, Any]:
        fields: list[dict[str, Any]] = [
            {"name": "first", "type": item},
            {"name": "second", "type": f"{ns}.Item"},
        ]
        if extra:
            fields.append({"name": "note", "type": "string", "default": ""})
        return {"type": "record", "name": "Order", "namespace": ns, "fields": fields}

    writer = AvroSchema(dict, schema=order("com.acme.v1"))
    data = writer.encode({"first": {"n": 1}, "second": {"n": 2}})
    for reader_ns in ("com.acme.v2", None):
        schema = order("com.acme.v2", extra=True)
        if reader_ns is None:
            schema = {k: v for k, v in schema.items() if k != "namespace"}
            schema["fields"] = [
                *schema["fields"][:1],
                {"name": "second", "type": "Item"},
                schema["fields"][2],
            ]
        reader = AvroSchema(dict, schema=schema).with_registry(lambda fp: order("com.acme.v1"))
        assert reader.decode_message(data, writer.header()) == {
            "first": {"n": 1},
            "second": {"n": 2},
            "note": "",
        }
