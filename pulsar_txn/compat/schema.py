"""``pulsar.schema`` as the compat layer offers it: ``BytesSchema``, ``StringSchema``,
``JsonSchema(record_cls)`` and ``AvroSchema(record_cls, schema_definition=None)``.

``record_cls`` may be one of this library's record types (a dataclass, a pydantic model, ``dict``) or
a ``pulsar.schema.Record`` subclass of pulsar-client (keep pulsar-client installed for those): its
``schema()`` gives the Avro schema, and values are built with ``record_cls(**fields)`` (nested
records too, also in arrays and maps). Schema objects of pulsar-client itself are accepted
wherever a schema is (``to_native``)."""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable
from typing import Any

from pulsar_txn import schema as _schema
from pulsar_txn.compat import _params
from pulsar_txn.errors import ConfigError, SchemaSerializationError

BytesSchema = _schema.BytesSchema
StringSchema = _schema.StringSchema
Schema = _schema.Schema


def _is_pulsar_record(record_cls: Any) -> bool:
    """A ``pulsar.schema.Record`` subclass (duck-typed, so pulsar-client need not be importable)."""
    return (
        isinstance(record_cls, type)
        and callable(getattr(record_cls, "schema", None))
        and (isinstance(getattr(record_cls, "_fields", None), dict))
    )


class _PulsarRecords(_schema.Schema[Any]):
    """Encodes and decodes pulsar-client ``Record`` instances through one of our dict schemas."""

    def __init__(self, inner: _schema.Schema[Any], record_cls: type) -> None:
        self._inner = inner
        self._cls = record_cls
        self._names = list(record_cls._fields)  # type: ignore[attr-defined]

    def header(self) -> bytes | None:
        return self._inner.header()

    def writer_schema(self) -> dict[str, Any] | None:
        return self._inner.writer_schema()

    def with_registry(self, lookup: Callable[[str], dict[str, Any] | None]) -> _PulsarRecords:
        bound = copy.copy(self)
        bound._inner = self._inner.with_registry(lookup)
        return bound

    def prepare(self, header: bytes | None) -> None:
        self._inner.prepare(header)

    def encode(self, value: Any) -> bytes:
        if isinstance(value, self._cls):
            value = {name: self._plain(getattr(value, name)) for name in self._names}
        return self._inner.encode(value)

    def _plain(self, value: Any) -> Any:
        """A field's value with nested records (also in arrays and maps) as dicts, as pulsar-client
        writes them; its ``Record(**fields)`` builds nested records back from dicts."""
        if _is_pulsar_record(type(value)):
            return {name: self._plain(getattr(value, name)) for name in type(value)._fields}
        if isinstance(value, list):
            return [self._plain(item) for item in value]
        if isinstance(value, dict):
            return {key: self._plain(item) for key, item in value.items()}
        return self._field(value)

    def _field(self, value: Any) -> Any:
        """A field's value as pulsar-client writes it (its record classes take either form back)."""
        return value

    def decode(self, data: bytes) -> Any:
        return self._record(self._inner.decode(data))

    def decode_message(self, data: bytes, header: bytes | None) -> Any:
        return self._record(self._inner.decode_message(data, header))

    def _record(self, fields: dict[str, Any]) -> Any:
        try:
            return self._cls(**fields)
        except (TypeError, ValueError, AttributeError) as exc:  # the Record's own field checks
            raise SchemaSerializationError(f"cannot build {self._cls.__name__}: {exc}") from None

    def __repr__(self) -> str:
        return f"{type(self._inner).__name__}({self._cls.__name__})"


class _PulsarJson(_PulsarRecords):
    schema_type = "JSON"

    def _field(self, value: Any) -> Any:
        # As pulsar-client's JsonSchema: an enum by its value, bytes as text.
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, bytes):
            try:
                return value.decode()
            except UnicodeDecodeError:
                raise SchemaSerializationError("a Bytes field in JSON must be UTF-8 text") from None
        return value


class _PulsarAvro(_PulsarRecords):
    schema_type = "AVRO"

    def _field(self, value: Any) -> Any:
        return value.name if isinstance(value, enum.Enum) else value  # an Avro enum's symbol


def JsonSchema(record_cls: Any) -> _schema.Schema[Any]:
    """JSON records (pulsar-client's ``JsonSchema(record_cls)``)."""
    if _is_pulsar_record(record_cls):
        return _PulsarJson(_schema.JsonSchema(dict), record_cls)
    return _schema.JsonSchema(record_cls)


def AvroSchema(record_cls: Any, schema_definition: dict[str, Any] | None = None) -> _schema.Schema[Any]:
    """Avro records (pulsar-client's ``AvroSchema(record_cls, schema_definition=None)``);
    ``AvroSchema(None, schema_definition={...})`` reads and writes dicts."""
    if record_cls is None:
        if schema_definition is None:
            raise ConfigError("AvroSchema(None) needs schema_definition={...}")
        return _schema.AvroSchema(dict, schema=schema_definition)
    if _is_pulsar_record(record_cls):
        avro = schema_definition or record_cls.schema()
        return _PulsarAvro(_schema.AvroSchema(dict, schema=avro), record_cls)
    return _schema.AvroSchema(record_cls, schema=schema_definition)


def to_native(schema: Any) -> _schema.Schema[Any] | None:
    """This library's schema for ``schema``: ours as is, pulsar-client's converted by kind."""
    if schema is None or isinstance(schema, _schema.Schema):
        return schema
    kind = type(schema).__name__
    if kind == "BytesSchema":
        return BytesSchema()
    if kind == "StringSchema":
        return StringSchema()
    record_cls = getattr(schema, "_record_cls", None)
    if kind == "JsonSchema" and record_cls is not None:
        return JsonSchema(record_cls)
    if kind == "AvroSchema" and record_cls is not None:
        return AvroSchema(record_cls)
    definition = getattr(schema, "_schema", None)
    if kind == "AvroSchema" and isinstance(definition, dict):  # AvroSchema(None, schema_definition=...)
        return AvroSchema(None, schema_definition=definition)
    raise ConfigError(f"schema {kind} is not supported here (bytes, string, JSON and Avro records are)")


ProtobufNativeSchema = _params.unsupported_class("ProtobufNativeSchema", _params.PROTOBUF_UNSUPPORTED)

__all__ = [
    "AvroSchema",
    "BytesSchema",
    "JsonSchema",
    "ProtobufNativeSchema",
    "Schema",
    "StringSchema",
    "to_native",
]
