"""Schema codecs: round trips, typed errors, and mismatches detected from the schema header."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pulsar_txn.errors import ConfigError, IncompatibleSchema, SchemaSerializationError
from pulsar_txn.message import Message, MessageId, Payload
from pulsar_txn.schema import AvroSchema, BytesSchema, JsonSchema, StringSchema


class Color(enum.Enum):
    RED = 1
    GREEN = 2


@dataclasses.dataclass
class Address:
    street: str
    number: int


@dataclasses.dataclass
class Order:
    order_id: str
    amount: float
    quantity: int
    paid: bool
    tags: list[str]
    attributes: dict[str, int]
    note: str | None
    color: Color
    address: Address
    previous: Address | None


def _order_json(**changes: Any) -> bytes:
    fields: dict[str, Any] = {
        "order_id": "o",
        "amount": 1,  # an int in a float field is fine
        "quantity": 2,
        "paid": False,
        "tags": ["t"],
        "attributes": {"a": 1},
        "note": None,
        "color": "RED",
        "address": {"street": "s", "number": 1},
        "previous": None,
    }
    return json.dumps(fields | changes).encode()


def test_well_formed_order_json_decodes() -> None:
    order = JsonSchema(Order).decode(_order_json())
    assert (order.amount, order.color, order.address) == (1, Color.RED, Address("s", 1))


@dataclasses.dataclass
class OrderWithBlob:
    order_id: str
    blob: bytes


class Payment(BaseModel):
    payment_id: int
    currency: str = "EUR"
    memo: str | None = None


@dataclasses.dataclass
class OrderV1:
    order_id: str


@dataclasses.dataclass
class OrderV2:  # adds a field with a default: an Avro-compatible evolution of OrderV1
    order_id: str
    note: str | None = None


texts = st.text(max_size=30)
finite = st.floats(allow_nan=False, allow_infinity=False)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
addresses = st.builds(Address, street=texts, number=longs)
orders = st.builds(
    Order,
    order_id=texts,
    amount=finite,
    quantity=longs,
    paid=st.booleans(),
    tags=st.lists(texts, max_size=5),
    attributes=st.dictionaries(texts, longs, max_size=5),
    note=st.none() | texts,
    color=st.sampled_from(Color),
    address=addresses,
    previous=st.none() | addresses,
)


@settings(max_examples=200, deadline=None)
@given(orders)
def test_avro_round_trips_every_dataclass_value_through_the_header_check(order: Order) -> None:
    schema = AvroSchema(Order)
    assert schema.decode_message(schema.encode(order), schema.header()) == order


@settings(max_examples=200, deadline=None)
@given(orders)
def test_json_round_trips_every_dataclass_value(order: Order) -> None:
    schema = JsonSchema(Order)
    assert schema.decode_message(schema.encode(order), schema.header()) == order


@settings(max_examples=100, deadline=None)
@given(st.builds(Payment, payment_id=longs, currency=texts, memo=st.none() | texts))
def test_pydantic_models_round_trip_in_avro_and_json(payment: Payment) -> None:
    for schema in (AvroSchema(Payment), JsonSchema(Payment)):
        assert schema.decode_message(schema.encode(payment), schema.header()) == payment


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_string_schema_round_trips_any_text(text: str) -> None:
    schema = StringSchema()
    assert schema.decode_message(schema.encode(text), schema.header()) == text


@settings(max_examples=100, deadline=None)
@given(st.binary())
def test_bytes_schema_is_the_identity_and_reads_whatever_was_written(data: bytes) -> None:
    schema = BytesSchema()
    assert schema.header() is None
    assert schema.decode_message(schema.encode(data), b"AVRO:0123456789abcdef") == data


def test_bytes_schema_accepts_str_as_utf8_for_compatibility() -> None:
    assert BytesSchema().encode("héllo") == "héllo".encode()


def test_avro_supports_bytes_fields_and_json_refuses_them_up_front() -> None:
    schema = AvroSchema(OrderWithBlob)
    value = OrderWithBlob("o", b"\x00\xff")
    assert schema.decode(schema.encode(value)) == value
    with pytest.raises(ConfigError, match="blob"):
        JsonSchema(OrderWithBlob)


def test_header_names_the_schema_type_and_the_writer_fingerprint() -> None:
    schema = AvroSchema(Order)
    assert schema.header() == f"AVRO:{schema.fingerprint}".encode()
    assert len(str(schema.fingerprint)) == 16
    assert AvroSchema(Order).fingerprint == schema.fingerprint  # stable across instances
    assert AvroSchema(OrderV1).fingerprint != AvroSchema(OrderV2).fingerprint
    assert StringSchema().header() == b"STRING"
    assert JsonSchema(dict).header() == b"JSON"


def test_avro_reader_with_another_fingerprint_raises_incompatible_schema_never_misreads() -> None:
    writer, reader = AvroSchema(OrderV1), AvroSchema(OrderV2)
    data = writer.encode(OrderV1("o-1"))
    with pytest.raises(IncompatibleSchema, match="writer_schemas"):
        reader.decode_message(data, writer.header())


def test_avro_reader_knowing_the_writer_schema_resolves_it() -> None:
    # An older version of the OrderV2 record (same record name), without the `note` field.
    old = {"type": "record", "name": "OrderV2", "fields": [{"name": "order_id", "type": "string"}]}
    writer = AvroSchema(dict, schema=old)
    reader = AvroSchema(OrderV2, writer_schemas=[old])
    assert reader.decode_message(writer.encode({"order_id": "o-1"}), writer.header()) == OrderV2("o-1", None)


def test_avro_writer_schema_that_does_not_resolve_raises_incompatible_schema() -> None:
    writer = AvroSchema(Address)
    reader = AvroSchema(OrderV1, writer_schemas=[writer.avro_schema or {}])
    with pytest.raises(IncompatibleSchema):
        reader.decode_message(writer.encode(Address("s", 1)), writer.header())


def test_avro_refuses_messages_without_a_schema_header_or_of_another_type() -> None:
    schema = AvroSchema(OrderV1)
    data = schema.encode(OrderV1("x"))
    with pytest.raises(IncompatibleSchema, match="plain bytes"):
        schema.decode_message(data, None)
    with pytest.raises(IncompatibleSchema, match="JSON"):
        schema.decode_message(data, JsonSchema(OrderV1).header())


def test_string_and_json_refuse_messages_written_with_another_schema_type() -> None:
    avro = AvroSchema(OrderV1)
    with pytest.raises(IncompatibleSchema):
        StringSchema().decode_message(b"x", avro.header())
    with pytest.raises(IncompatibleSchema):
        JsonSchema(OrderV1).decode_message(b'{"order_id":"x"}', b"STRING")


def test_json_reads_plain_json_bytes_and_any_record_version_that_builds_its_type() -> None:
    assert JsonSchema(OrderV2).decode_message(b'{"order_id":"x"}', None) == OrderV2("x")
    written = JsonSchema(OrderV1)
    assert JsonSchema(OrderV2).decode_message(written.encode(OrderV1("y")), written.header()) == OrderV2("y")
    assert JsonSchema(dict).decode_message(b'{"a":[1,2]}', None) == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("schema", "payload"),
    [
        (JsonSchema(OrderV1), b"not json"),
        (JsonSchema(OrderV1), b"{}"),
        (JsonSchema(OrderV1), b"[1]"),
        (JsonSchema(Payment), b'{"payment_id":"not a number"}'),
        (StringSchema(), b"\xff\xfe"),
        (AvroSchema(Address), b"\x02"),  # truncated
        (AvroSchema(OrderV1), b"\x02a\x00\x00"),  # trailing bytes
        # Well-formed JSON whose fields have the wrong shape for the record type (before: TypeError,
        # AttributeError, or silently a list of characters / a str in an int field).
        (JsonSchema(Order), _order_json(tags=5)),
        (JsonSchema(Order), _order_json(tags="abc")),
        (JsonSchema(Order), _order_json(attributes=[1, 2])),
        (JsonSchema(Order), _order_json(color=["RED"])),
        (JsonSchema(Order), _order_json(quantity="zz")),
        (JsonSchema(Order), _order_json(quantity=True)),
        (JsonSchema(Order), _order_json(address={"street": 1, "number": 2})),
    ],
)
def test_payloads_that_do_not_decode_raise_schema_serialization_error(schema: Any, payload: bytes) -> None:
    with pytest.raises(SchemaSerializationError):
        schema.decode(payload)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        (AvroSchema(OrderV1), OrderV2("x")),
        (AvroSchema(Address), Address("s", "not an int")),  # type: ignore[arg-type]
        (JsonSchema(OrderV1), "just a string"),
        (StringSchema(), b"bytes"),
        (BytesSchema(), 42),
    ],
)
def test_values_that_do_not_fit_raise_schema_serialization_error(schema: Any, value: Any) -> None:
    with pytest.raises(SchemaSerializationError):
        schema.encode(value)


def test_unsupported_record_types_are_config_errors() -> None:
    @dataclasses.dataclass
    class Bad:
        x: int | str

    with pytest.raises(ConfigError, match="unions"):
        AvroSchema(Bad)
    with pytest.raises(ConfigError):
        AvroSchema(int)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="schema="):
        AvroSchema(dict)


def test_avro_with_an_explicit_schema_reads_and_writes_dicts() -> None:
    avro = {"type": "record", "name": "P", "fields": [{"name": "a", "type": "int"}]}
    schema = AvroSchema(dict, schema=avro)
    assert schema.decode(schema.encode({"a": 5})) == {"a": 5}


def test_message_data_is_bytes_and_callable_and_value_decodes_with_the_schema() -> None:
    schema = StringSchema()
    msg = Message(
        MessageId("t", 0, 1),
        Payload(b"hi"),
        None,
        {},
        None,
        0,
        None,
        None,
        None,
        schema_header=schema.header(),
        schema=schema,
    )
    assert msg.data == b"hi" and msg.data() == b"hi" and isinstance(msg.data(), bytes)
    assert msg.value() == "hi"
    raw = dataclasses.replace(msg, schema=BytesSchema())
    assert raw.value() == b"hi"


def test_json_reader_ignores_fields_a_newer_writer_added() -> None:
    # Pulsar's JSON schema (Jackson, FAIL_ON_UNKNOWN_PROPERTIES off) reads such messages.
    data = _order_json(coupon="X1", address={"street": "s", "number": 1, "floor": 3})
    order = JsonSchema(Order).decode(data)
    assert order.order_id == "o" and order.address == Address("s", 1)


def test_json_reader_still_refuses_a_message_missing_a_required_field() -> None:
    fields = json.loads(_order_json())
    del fields["quantity"]
    with pytest.raises(SchemaSerializationError):
        JsonSchema(Order).decode(json.dumps(fields).encode())
