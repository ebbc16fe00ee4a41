"""Which DataFrame columns a transactional write takes (like Spark's Kafka sink), and how one row
becomes one message. Pure: checked on the driver from the schema, applied in the executors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from pulsar_txn.errors import IncompatibleSchema
from pulsar_txn.message import PROPERTY_PREFIX
from pulsar_txn.naming import TopicName

COLUMNS = ("value", "key", "topic", "partition", "headers")
_TEXT_OR_BYTES = (StringType, BinaryType)
_INTEGER = (IntegerType, LongType, ShortType)


@dataclass(frozen=True)
class OutMessage:
    topic: str
    partition: int | None
    value: bytes
    key: str | None
    properties: dict[str, str]


@dataclass(frozen=True)
class RowLayout:
    """Positions of the accepted columns in a row (None: absent). Picklable, shipped to tasks."""

    value: int
    key: int | None = None
    topic: int | None = None
    partition: int | None = None
    headers: int | None = None
    default_topic: str | None = None

    def message(self, row: Any) -> OutMessage:
        """The message for one row (a pyspark Row or any tuple in schema order)."""
        value = _as_bytes(row[self.value], "value")
        if value is None:
            raise IncompatibleSchema("a row has a null value: every message needs a value")
        topic = self.default_topic
        if topic is None:
            assert self.topic is not None  # checked by layout_for
            topic = row[self.topic]
            if topic is None:
                raise IncompatibleSchema("a row has a null topic and no topic option is set")
        key = None
        if self.key is not None:
            raw = _as_bytes(row[self.key], "key")
            key = None if raw is None else _utf8(raw, "key")
        partition = None
        if self.partition is not None and row[self.partition] is not None:
            partition = int(row[self.partition])
            if partition < 0:
                raise IncompatibleSchema(f"a row has a negative partition ({partition})")
        properties: dict[str, str] = {}
        if self.headers is not None:
            for header in row[self.headers] or ():
                name, raw = _header(header)
                if name in properties:
                    # Pulsar properties are a map: a second value would replace the first, silently.
                    raise IncompatibleSchema(
                        f"a row has header {name!r} twice (message properties are a map)"
                    )
                properties[name] = _utf8(raw, f"header {name!r}")
        return OutMessage(topic, partition, value, key, properties)


def _header(header: Any) -> tuple[str, bytes]:
    """One element of the headers column as a message property (name, value). The source's headers
    (``includeHeaders``) carry a message's properties as ``pulsar.prop.<name>``: taken back as
    ``<name>``, so a topic copies with its properties. Its other ``pulsar.*`` / ``ptxn.*`` headers
    describe the source message (producer, sequence, transaction, schema) and are refused, not
    written as properties: filter them out to copy a topic."""
    if header is None:
        raise IncompatibleSchema("a row has a null element in its headers")
    name, raw = header[0], _as_bytes(header[1], "header value")
    if name is None:
        raise IncompatibleSchema("a row has a header with a null key")
    if raw is None:
        raise IncompatibleSchema(f"header {name!r} has a null value (Pulsar properties are strings)")
    if name.startswith(PROPERTY_PREFIX):
        return name[len(PROPERTY_PREFIX) :], raw
    if name.startswith(("pulsar.", "ptxn")):
        raise IncompatibleSchema(
            f"header {name!r} is message metadata of the source, not a property: leave it out "
            "(e.g. filter(headers, h -> NOT (h.key LIKE 'pulsar.%' OR h.key LIKE 'ptxn%')) keeping "
            "'pulsar.prop.%')"
        )
    return name, raw


def _as_bytes(v: Any, what: str) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise IncompatibleSchema(f"{what} must be string or binary, got {type(v).__name__}")


def _utf8(raw: bytes, what: str) -> str:
    # Pulsar keys and properties are strings; refuse bytes that are not text rather than mangle them.
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise IncompatibleSchema(
            f"{what} is binary but not UTF-8 text (Pulsar keys and properties are strings)"
        ) from None


def _is(dtype: DataType, kinds: tuple[type[DataType], ...]) -> bool:
    return isinstance(dtype, kinds)


def layout_for(schema: StructType, topic: str | None) -> RowLayout:
    """Check the schema; raise ``IncompatibleSchema`` naming the offending column."""
    fields = {f.name: (i, f.dataType) for i, f in enumerate(schema.fields)}
    if len(fields) != len(schema.fields):
        twice = sorted({f.name for f in schema.fields if schema.fieldNames().count(f.name) > 1})
        raise IncompatibleSchema(f"column(s) {twice} appear more than once: select one of each")
    if "value" not in fields:
        raise IncompatibleSchema(
            f"the DataFrame needs a 'value' column (string or binary); it has {list(fields)}"
        )
    unknown = [name for name in fields if name not in COLUMNS]
    if unknown:
        raise IncompatibleSchema(
            f"unexpected column(s) {unknown}: a transactional write takes {list(COLUMNS)} (select them first)"
        )
    positions: dict[str, int] = {}
    for name, (index, dtype) in fields.items():
        positions[name] = index
        if name in ("value", "key", "topic") and not _is(
            dtype, _TEXT_OR_BYTES if name != "topic" else (StringType,)
        ):
            wanted = "string" if name == "topic" else "string or binary"
            raise IncompatibleSchema(f"column {name!r} must be {wanted}, not {dtype.simpleString()}")
        if name == "partition" and not _is(dtype, _INTEGER):
            raise IncompatibleSchema(f"column 'partition' must be an integer, not {dtype.simpleString()}")
        if name == "headers" and not _headers_ok(dtype):
            raise IncompatibleSchema(
                "column 'headers' must be array<struct<key:string,value:binary|string>>, "
                f"not {dtype.simpleString()}"
            )
    if topic is None and "topic" not in fields:
        raise IncompatibleSchema("no topic: pass topic= or give the DataFrame a 'topic' column")
    if topic is not None:
        TopicName.parse(topic)  # InvalidTopicName now rather than in every task
    return RowLayout(
        value=positions["value"],
        key=positions.get("key"),
        topic=positions.get("topic"),
        partition=positions.get("partition"),
        headers=positions.get("headers"),
        default_topic=topic,
    )


def _headers_ok(dtype: DataType) -> bool:
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    inner = dtype.elementType.fields
    return (
        len(inner) == 2
        and inner[0].name == "key"
        and isinstance(inner[0].dataType, StringType)
        and inner[1].name == "value"
        and isinstance(inner[1].dataType, _TEXT_OR_BYTES)
    )
