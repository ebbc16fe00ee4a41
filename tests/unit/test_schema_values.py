"""Values that do not fit a record's type hints are refused on encode with SchemaSerializationError
(never written as a poison message, never a raw AttributeError), text that is no UTF-8 too; record
defaults travel in the Avro schema, so Avro resolution can fill fields an older writer lacked."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest
from pydantic import BaseModel

from pulsar_txn.errors import ConfigError, SchemaSerializationError
from pulsar_txn.schema import AvroSchema, BytesSchema, JsonSchema, StringSchema


class Color(enum.Enum):
    RED = 1


@dataclasses.dataclass
class Tagged:
    tags: list[str]


@dataclasses.dataclass
class Counts:
    counts: dict[str, int]


@dataclasses.dataclass
class Painted:
    color: Color


@dataclasses.dataclass
class Qty:
    quantity: int


@dataclasses.dataclass
class ItemV2:
    order_id: str
    quantity: int = 1
    color: Color = Color.RED
    tags: list[str] = dataclasses.field(default_factory=lambda: ["new"])
    note: str | None = "n/a"
    blob: bytes = b"\x00\xff"


class Pay(BaseModel):  # PayV2 before its currency field
    payment_id: int


class PayV2(BaseModel):
    payment_id: int
    currency: str = "EUR"


@dataclasses.dataclass
class Kilobytes:
    value: int


@dataclasses.dataclass
class Upload:
    name: str
    size: Kilobytes


@dataclasses.dataclass
class Blobs:
    parts: list[bytes]


@pytest.mark.parametrize("schema_cls", [JsonSchema, AvroSchema])
@pytest.mark.parametrize(
    ("record", "value"),
    [
        (Tagged, Tagged(tags="abc")),  # a str would be split into characters
        (Counts, Counts(counts=[("a", 1)])),  # type: ignore[arg-type]
        (Painted, Painted(color="RED")),  # type: ignore[arg-type]
        (Qty, Qty(quantity="zz")),  # type: ignore[arg-type]
        (Qty, Qty(quantity=True)),
    ],
)
def test_a_value_that_does_not_fit_its_type_hint_is_refused_on_encode(
    schema_cls: Any, record: type, value: Any
) -> None:
    with pytest.raises(SchemaSerializationError):
        schema_cls(record).encode(value)


@pytest.mark.parametrize("schema", [StringSchema(), BytesSchema()])
def test_text_that_is_no_utf8_is_a_schema_serialization_error(schema: Any) -> None:
    with pytest.raises(SchemaSerializationError, match="UTF-8"):
        schema.encode("\ud800")


def test_record_defaults_are_in_the_avro_schema_and_fill_fields_an_older_writer_lacked() -> None:
    fields = {f["name"]: f for f in AvroSchema(ItemV2).avro_schema["fields"]}
    assert fields["quantity"]["default"] == 1
    assert fields["color"]["default"] == "RED"
    assert fields["tags"]["default"] == ["new"]
    assert fields["note"] == {"name": "note", "type": ["string", "null"], "default": "n/a"}
    assert fields["blob"]["default"] == "\x00\xff"
    # The older writer: the same record (same name) before the fields with defaults were added.
    old = AvroSchema(
        dict, schema={"type": "record", "name": "ItemV2", "fields": [{"name": "order_id", "type": "string"}]}
    )
    reader = AvroSchema(ItemV2, writer_schemas=[old.avro_schema])
    got = reader.decode_message(old.encode({"order_id": "o-1"}), old.header())
    assert got == ItemV2("o-1")
    pay = AvroSchema(dict, schema={**AvroSchema(Pay).avro_schema, "name": "PayV2"})
    assert AvroSchema(PayV2, writer_schemas=[pay.avro_schema]).decode_message(
        pay.encode({"payment_id": 7}), pay.header()
    ) == PayV2(payment_id=7, currency="EUR")


def test_a_default_that_does_not_fit_its_type_is_a_config_error() -> None:
    @dataclasses.dataclass
    class Bad:
        n: int = "x"  # type: ignore[assignment]

    with pytest.raises(ConfigError, match="default"):
        AvroSchema(Bad)


def test_json_refuses_bytes_fields_by_type_not_by_name() -> None:
    schema = JsonSchema(Upload)  # "Kilobytes" holds no bytes
    assert schema.decode(schema.encode(Upload("f", Kilobytes(3)))) == Upload("f", Kilobytes(3))
    with pytest.raises(ConfigError, match="bytes"):
        JsonSchema(Blobs)
