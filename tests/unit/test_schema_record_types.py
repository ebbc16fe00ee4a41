"""Record types a schema accepts must round-trip, and an invalid Avro schema is a ConfigError up front
(found in review, session 35; each test failed before its fix)."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np
import pytest
from pydantic import AliasChoices, BaseModel, Field

import pulsar_txn.compat.schema as compat_schema
from pulsar_txn.errors import ConfigError, SchemaSerializationError
from pulsar_txn.schema import AvroSchema, JsonSchema

SCHEMAS = [JsonSchema, AvroSchema]


def _round_trip(schema_cls: Any, record_type: type, value: Any) -> Any:
    schema = schema_cls(record_type)
    return schema.decode_message(schema.encode(value), schema.header())


@dataclasses.dataclass
class Derived:
    a: int
    b: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        self.b = self.a * 2


@dataclasses.dataclass(frozen=True)
class FrozenDerived:
    a: int
    b: int = dataclasses.field(init=False, default=7)


@pytest.mark.parametrize("schema_cls", SCHEMAS)
def test_a_dataclass_field_without_init_round_trips(schema_cls: Any) -> None:
    """It used to be passed to the constructor, which refuses it: no message ever decoded."""
    assert _round_trip(schema_cls, Derived, Derived(3)) == Derived(3)
    got = _round_trip(schema_cls, FrozenDerived, FrozenDerived(1))
    assert (got.a, got.b) == (1, 7)


class Aliased(BaseModel):
    a: int = Field(alias="A")
    b: str = Field(validation_alias=AliasChoices("B", "bee"))
    c: float = 0.5


@pytest.mark.parametrize("schema_cls", SCHEMAS)
def test_a_pydantic_model_with_aliases_round_trips(schema_cls: Any) -> None:
    """Built by field name, a model without populate_by_name refused every message."""
    value = Aliased(A=1, B="x", c=2.0)
    got = _round_trip(schema_cls, Aliased, value)
    assert (got.a, got.b, got.c) == (1, "x", 2.0)


def _item_types() -> tuple[type, type]:
    first = types.new_class("Item")
    second = types.new_class("Item")
    first.__annotations__ = {"a": int}
    second.__annotations__ = {"s": str}
    first.__module__, second.__module__ = "one", "two"
    return dataclasses.dataclass(first), dataclasses.dataclass(second)


@pytest.mark.parametrize("schema_cls", SCHEMAS)
def test_two_record_types_of_one_name_get_names_of_their_own(schema_cls: Any) -> None:
    """The second used to be written as a reference to the first: Avro never encoded such a record,
    and the JSON schema's declared definition named the wrong type."""
    first, second = _item_types()
    outer = dataclasses.make_dataclass("Outer", [("x", first), ("y", second), ("z", first)])
    schema = schema_cls(outer)
    fields = {f["name"]: f["type"] for f in schema.avro_schema["fields"]}
    assert fields["x"]["name"] == "Item" and fields["y"]["name"] == "Item_2" and fields["z"] == "Item"
    value = outer(first(1), second("s"), first(2))
    assert _round_trip(schema_cls, outer, value) == value


@pytest.mark.parametrize("schema_cls", SCHEMAS)
def test_a_record_type_used_twice_is_defined_once(schema_cls: Any) -> None:
    first, _second = _item_types()
    pair = dataclasses.make_dataclass("Pair", [("x", first), ("y", first)])
    value = pair(first(1), first(2))
    assert _round_trip(schema_cls, pair, value) == value


@dataclasses.dataclass
class Numbers:
    n: int
    f: float


@pytest.mark.parametrize("schema_cls", SCHEMAS)
def test_numpy_scalars_encode_as_numbers(schema_cls: Any) -> None:
    """The type check takes numpy integers and floats; JSON's encoder then refused them."""
    got = _round_trip(schema_cls, Numbers, Numbers(np.int64(3), np.float32(1.5)))  # type: ignore[arg-type]
    assert (got.n, got.f) == (3, 1.5)
    assert type(got.n) is int and type(got.f) is float


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]},
        {"type": "record", "fields": []},
    ],
)
def test_an_invalid_avro_schema_is_a_config_error(schema: dict[str, Any]) -> None:
    """fastavro's own exception used to escape the constructor."""
    with pytest.raises(ConfigError, match="invalid Avro schema"):
        AvroSchema(dict, schema=schema)
    with pytest.raises(ConfigError, match="invalid Avro schema"):
        compat_schema.AvroSchema(None, schema_definition=schema)


def test_an_invalid_writer_schema_is_one_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        AvroSchema(Numbers, writer_schemas=[{"type": "nope"}])
    assert str(caught.value).count("invalid Avro schema") == 1


def test_a_pulsar_record_that_refuses_a_decoded_value_is_a_serialization_error() -> None:
    """pulsar-client's Record checks its fields' types: a JSON object that does not fit raised a
    raw TypeError from ``msg.value()`` (and killed a table view's thread)."""
    from pulsar.schema import Integer, Record, String

    class Order(Record):  # type: ignore[misc]
        sku = String()
        qty = Integer()

    schema = compat_schema.JsonSchema(Order)
    assert schema.decode(b'{"sku": "a", "qty": 1}').sku == "a"
    with pytest.raises(SchemaSerializationError, match="cannot build Order"):
        schema.decode(b'{"sku": 5, "qty": 1}')
