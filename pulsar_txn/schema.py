"""Schemas: how message values become bytes and back, as in Pulsar's ``pulsar.schema``.

``BytesSchema`` (the default), ``StringSchema``, ``JsonSchema(RecordType)`` and
``AvroSchema(RecordType)``, where a record type is a dataclass or a pydantic model (or ``dict``
with an explicit Avro schema). Pass one to ``create_producer``, ``subscribe`` or ``create_reader``;
``msg.value()`` then returns the decoded object and ``msg.data()`` the raw bytes.

Every message written with a schema other than bytes carries the header ``pulsar.schema``:
``STRING``, ``JSON:<fingerprint>`` or ``AVRO:<fingerprint>``, the fingerprint being the 16 hex
digits of the CRC-64-AVRO fingerprint of the writer schema's canonical form. Avro values are
encoded schemaless (no schema in the payload), so a reader decodes them only when it knows the
writer schema: its own (same fingerprint), one passed as ``writer_schemas=`` or one in the client's
schema registry, where Avro producers register theirs (then Avro schema resolution applies).
Anything else raises ``IncompatibleSchema``: a value is never misread.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

import fastavro
import fastavro._read_py as _read_py
from fastavro.schema import fingerprint, to_parsing_canonical_form

from pulsar_txn import _records
from pulsar_txn.errors import ConfigError, IncompatibleSchema, PulsarTxnError, SchemaSerializationError

T = TypeVar("T")
R = TypeVar("R")

SCHEMA_HEADER = "pulsar.schema"
"""The Kafka header naming the schema a message was written with."""


class Schema(ABC, Generic[T]):
    """How values of type ``T`` are encoded; subclasses are the concrete schemas."""

    schema_type: ClassVar[str]
    """Pulsar's SchemaType name: ``BYTES``, ``STRING``, ``JSON``, ``AVRO``."""

    @abstractmethod
    def encode(self, value: T) -> bytes:
        """The payload for ``value``; ``SchemaSerializationError`` if it does not fit the schema."""

    @abstractmethod
    def decode(self, data: bytes) -> T:
        """The value of a payload written with this very schema."""

    def header(self) -> bytes | None:
        """The ``pulsar.schema`` header value written with each message (None: no header)."""
        return self.schema_type.encode()

    def decode_message(self, data: bytes, header: bytes | None) -> T:
        """The value of a received message, given its ``pulsar.schema`` header (None if absent).

        Raises ``IncompatibleSchema`` when the message was written with a schema this one cannot
        read, ``SchemaSerializationError`` when the payload does not decode."""
        tag = _tag(header)
        written = tag.split(":", 1)[0] if tag else None
        if written is not None and written != self.schema_type:
            raise IncompatibleSchema(
                f"message written with schema {written}, read with {self.schema_type}; use "
                "BytesSchema (or msg.data()) to get its bytes"
            )
        return self.decode(data)

    def writer_schema(self) -> dict[str, Any] | None:
        """The schema a reader needs to resolve this one's messages against its own (Avro), which
        a producer registers; None for schemas whose messages decode without it."""
        return None

    def with_registry(self, lookup: Callable[[str], dict[str, Any] | None]) -> Schema[T]:
        """This schema looking writer schemas up by fingerprint with ``lookup`` (a client's schema
        registry: ``subscribe`` and ``create_reader`` decode with such a copy, so one schema object
        can serve several clients). Only Avro needs it; others return themselves."""
        return self

    def prepare(self, header: bytes | None) -> None:
        """Ahead of ``decode_message``: fetch what decoding a message with this ``pulsar.schema``
        header needs (an Avro writer schema from the registry), so that ``value()`` does no I/O.
        Called where messages are received (a pool thread, for the asyncio API). Never raises."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BytesSchema(Schema[bytes]):
    """Raw bytes, the default. Reads every message, whatever it was written with. For
    compatibility with existing code, ``encode`` also takes a ``str`` (as UTF-8)."""

    schema_type = "BYTES"

    def encode(self, value: bytes) -> bytes:
        if isinstance(value, str):  # the producer's historical convenience: str -> UTF-8
            return _utf8(value)
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        raise SchemaSerializationError(f"BytesSchema takes bytes or str, not {type(value).__name__}")

    def decode(self, data: bytes) -> bytes:
        return _payload(data)

    def header(self) -> bytes | None:
        return None  # plain messages stay header-free, readable by any Kafka consumer as-is

    def decode_message(self, data: bytes, header: bytes | None) -> bytes:
        return _payload(data)


class StringSchema(Schema[str]):
    """UTF-8 text."""

    schema_type = "STRING"

    def encode(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise SchemaSerializationError(f"StringSchema takes str, not {type(value).__name__}")
        return _utf8(value)

    def decode(self, data: bytes) -> str:
        try:
            return _payload(data).decode()
        except UnicodeDecodeError as exc:
            raise SchemaSerializationError(f"payload is not UTF-8: {exc}") from None


def _payload(data: object) -> bytes:
    """A payload given to a public ``decode``: bytes-like, else ``SchemaSerializationError``."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise SchemaSerializationError(f"a payload is bytes, not {type(data).__name__}")


def _tag(header: object) -> str:
    """A ``pulsar.schema`` header as text ("" if absent)."""
    if header is None:
        return ""
    if isinstance(header, bytes | bytearray | memoryview):
        return bytes(header).decode("ascii", "replace")
    if isinstance(header, str):
        return header
    raise SchemaSerializationError(f"a schema header is bytes, not {type(header).__name__}")


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError as exc:  # lone surrogates
        raise SchemaSerializationError(f"text does not encode as UTF-8: {exc}") from None


def avro_fingerprint(avro: dict[str, Any]) -> str:
    """The 16 hex digits of the CRC-64-AVRO fingerprint of the schema's canonical form."""
    try:
        parsed = fastavro.parse_schema(avro)
    except Exception as exc:  # fastavro's SchemaParseException, UnknownType and friends
        raise ConfigError(f"invalid Avro schema: {exc}") from None
    return str(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


class _RecordSchema(Schema[R]):
    """Common part of JSON and Avro: a record type (dataclass, pydantic model, or ``dict``)."""

    def __init__(self, record_type: type[R], avro: dict[str, Any] | None) -> None:
        if record_type is not dict and not _records.is_record_type(record_type):
            raise ConfigError(
                f"{type(self).__name__} takes a dataclass, a pydantic model or dict, not {record_type!r}"
            )
        self.record_type = record_type
        if avro is None and record_type is not dict:
            avro = _records.avro_schema(record_type)
        self.avro_schema = avro
        """The Avro schema of the record (JSON schemas are described by one too, as in Pulsar)."""
        self.fingerprint = avro_fingerprint(avro) if avro is not None else None
        """CRC-64-AVRO fingerprint of the schema's canonical form, as hex; None for schemaless JSON."""

    def header(self) -> bytes:
        tag = self.schema_type if self.fingerprint is None else f"{self.schema_type}:{self.fingerprint}"
        return tag.encode()

    def _to_plain(self, value: R) -> Any:
        if self.record_type is dict:
            if not isinstance(value, dict):
                raise SchemaSerializationError(f"expected a dict, got {type(value).__name__}")
            return value
        if value is None:  # to_plain lets None through for Optional fields, not as the record
            raise SchemaSerializationError(f"expected {self.record_type.__name__}, got None")
        return _records.to_plain(value, self.record_type)

    def _from_plain(self, data: Any) -> R:
        if self.record_type is dict:
            if not isinstance(data, dict):
                raise SchemaSerializationError(f"expected a JSON object, got {type(data).__name__}")
            return data  # type: ignore[return-value]  # R is dict here
        try:
            value: R = _records.from_plain(data, self.record_type)
        except RecursionError:  # a self-referencing record type, nested deeper than the stack
            raise SchemaSerializationError(
                f"payload nests {self.record_type.__name__} records too deeply to decode"
            ) from None
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.record_type.__name__})"


class JsonSchema(_RecordSchema[R]):
    """Records as JSON objects. ``JsonSchema(MyDataclass)``, ``JsonSchema(MyModel)`` or
    ``JsonSchema(dict)`` (any JSON object). JSON is self-describing, so a reader decodes messages
    whatever record version wrote them, as long as they build its record type (else
    ``SchemaSerializationError``)."""

    schema_type = "JSON"

    def __init__(self, record_type: type[R]) -> None:
        super().__init__(record_type, None)  # checks that it is a record type at all
        if record_type is not dict:
            _records.check_json_compatible(record_type)
        # JSON has no depth limit of its own: the interpreter's stack was one, and Python 3.12 (no
        # frame per comprehension) follows ~490 levels where 3.11 follows ~330, so one version wrote
        # what another could not read. A self-referencing type nests at most as deep as Avro's.
        self._recursive = self.avro_schema is not None and _is_recursive(self.avro_schema)

    def _check_nesting(self, plain: Any, doing: str) -> None:
        if self._recursive and _nesting(plain) > MAX_RECURSIVE_NESTING:
            raise SchemaSerializationError(
                f"cannot {doing} {self.record_type.__name__} as JSON: nested deeper than "
                f"{MAX_RECURSIVE_NESTING} levels (a self-referencing record type)"
            )

    def encode(self, value: R) -> bytes:
        try:
            plain = self._to_plain(value)
            self._check_nesting(plain, "encode")
            return json.dumps(plain, separators=(",", ":"), ensure_ascii=False).encode()
        except SchemaSerializationError:
            raise
        except RecursionError:
            raise SchemaSerializationError(
                f"cannot encode {type(value).__name__}: nested too deeply"
            ) from None
        except Exception as exc:  # whatever a value json cannot take raises (TypeError, ValueError, ...)
            raise SchemaSerializationError(f"cannot encode {type(value).__name__} as JSON: {exc}") from None

    def decode(self, data: bytes) -> R:
        try:
            plain = json.loads(_payload(data))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise SchemaSerializationError(f"payload is not JSON: {exc}") from None
        except RecursionError:  # nested deeper than the interpreter's stack: any producer can write it
            raise SchemaSerializationError("payload is JSON nested too deeply to decode") from None
        self._check_nesting(plain, "decode")
        return self._from_plain(plain)


def _undeclared_field(value: Any, schema: Any, named: Mapping[str, Any]) -> str | None:
    """The path of the first key of a record (a dict, also nested in records, arrays, maps and
    unions) that its Avro schema has no field for; None if every key is declared."""
    if isinstance(schema, str):  # a named type (or a primitive: nothing to check)
        schema = named.get(schema)
    if isinstance(schema, list):  # a union: fine if one of its record branches declares every key
        branches = [named.get(b) if isinstance(b, str) else b for b in schema]
        records = [b for b in branches if isinstance(b, dict) and b.get("type") == "record"]
        found = None
        for branch in records if isinstance(value, dict) else ():
            found = _undeclared_field(value, branch, named)
            if found is None:
                return None
        return found
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    items: Iterable[tuple[str, Any, Any]] = ()
    if kind == "record" and isinstance(value, dict):
        fields = {f["name"]: f["type"] for f in schema["fields"]}
        for key in value:
            if key not in fields:
                return str(key)
        items = ((str(k), v, fields[k]) for k, v in value.items())
    elif kind == "array" and isinstance(value, list | tuple):
        items = ((f"[{i}]", v, schema["items"]) for i, v in enumerate(value))
    elif kind == "map" and isinstance(value, dict):
        items = ((f"[{k!r}]", v, schema["values"]) for k, v in value.items())
    elif isinstance(kind, dict | list):  # {"type": {...}}
        return _undeclared_field(value, kind, named)
    for where, item, item_schema in items:
        inner = _undeclared_field(item, item_schema, named)
        if inner is not None:
            return f"{where}.{inner}"
    return None


class AvroSchema(_RecordSchema[R]):
    """Records in Avro binary encoding (fastavro), schemaless, with the writer schema's fingerprint
    in the message header.

    ``AvroSchema(MyDataclass)`` derives the Avro schema from the type hints;
    ``AvroSchema(dict, schema={...})`` reads and writes dicts with an explicit schema.
    ``writer_schemas=[older, ...]`` lets a reader decode messages written with those schemas
    (Avro resolution to this schema); any other writer schema raises ``IncompatibleSchema``."""

    schema_type = "AVRO"

    def __init__(
        self,
        record_type: type[R],
        *,
        schema: dict[str, Any] | None = None,
        writer_schemas: list[dict[str, Any]] | None = None,
    ) -> None:
        if record_type is dict and schema is None:
            raise ConfigError("AvroSchema(dict) needs schema={...}")
        super().__init__(record_type, schema)
        assert self.avro_schema is not None and self.fingerprint is not None
        try:
            self._parsed = fastavro.parse_schema(self.avro_schema)
            self._writers = {avro_fingerprint(w): fastavro.parse_schema(w) for w in (writer_schemas or [])}
        except ConfigError:
            raise
        except Exception as exc:  # fastavro's SchemaParseException and friends
            raise ConfigError(f"invalid Avro schema: {exc}") from None
        self._writers.pop(self.fingerprint, None)
        parsed = self._parsed
        # fastavro's compiled reader recurses in C without a bound: a payload nesting a recursive
        # record ~4,500 deep (9 KB) overflows the C stack and kills the process. Its pure-Python
        # reader stops at the interpreter's recursion limit instead (caught in _read).
        self._reader_of = {id(schema): _reader_for(schema) for schema in (parsed, *self._writers.values())}
        self._recursive = _is_recursive(parsed)
        self._registry: Callable[[str], dict[str, Any] | None] | None = None
        # fastavro's table of the schema's named types, by full name (for the undeclared-field check)
        self._named: Mapping[str, Any] = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}

    def encode(self, value: R) -> bytes:
        out = io.BytesIO()
        try:
            plain = self._to_plain(value)
        except RecursionError:
            raise SchemaSerializationError(
                f"cannot encode {type(value).__name__}: nested too deeply"
            ) from None
        # fastavro writes the fields the schema declares and drops any other key without a word; a
        # missing nullable field is written as null (as pulsar-client does), so only extras are refused.
        if self._recursive and _nesting(plain) > MAX_RECURSIVE_NESTING:
            # Readers decode such schemas with fastavro's pure-Python reader, which follows only so
            # many levels: refused here, not written for no reader to read.
            raise SchemaSerializationError(
                f"cannot encode {type(value).__name__} as Avro: nested deeper than "
                f"{MAX_RECURSIVE_NESTING} levels (a self-referencing record type)"
            )
        extra = _undeclared_field(plain, self._parsed, self._named)
        if extra is not None:
            raise SchemaSerializationError(
                f"cannot encode {type(value).__name__} as Avro: {extra!r} is not a field of the schema"
            )
        try:
            fastavro.schemaless_writer(out, self._parsed, plain)
        except SchemaSerializationError:
            raise
        except Exception as exc:  # fastavro raises ValueError, TypeError, AttributeError, ...
            raise SchemaSerializationError(f"cannot encode {type(value).__name__} as Avro: {exc}") from None
        return out.getvalue()

    def decode(self, data: bytes) -> R:
        return self._read(data, self._parsed, None)

    def writer_schema(self) -> dict[str, Any] | None:
        assert self.avro_schema is not None
        return self.avro_schema

    def with_registry(self, lookup: Callable[[str], dict[str, Any] | None]) -> AvroSchema[R]:
        bound = copy.copy(self)
        # Writer schemas of its own: one fingerprint may stand for schemas that decode differently
        # (logical types are not in it) in two clients' registries.
        bound._writers = dict(self._writers)
        bound._reader_of = dict(self._reader_of)
        bound._registry = lookup
        return bound

    def prepare(self, header: bytes | None) -> None:
        kind, _, fp = _tag(header).partition(":")
        if kind == "AVRO" and fp != self.fingerprint and fp not in self._writers:
            with contextlib.suppress(PulsarTxnError):  # value() raises it, if it still applies
                self._writer(fp)

    def _writer(self, fp: str) -> Any | None:
        """The parsed writer schema with fingerprint ``fp``: given, or found in the registry."""
        writer = self._writers.get(fp)
        if writer is not None or self._registry is None:
            return writer
        found = self._registry(fp)
        if found is None:
            return None
        try:
            writer = fastavro.parse_schema(_renamed_as(found, self.avro_schema))
        except Exception as exc:  # the registry checked its fingerprint, so this is not expected
            raise IncompatibleSchema(f"writer schema {fp} from the registry does not parse: {exc}") from None
        self._reader_of[id(writer)] = _reader_for(writer)  # before it is found in _writers
        self._writers[fp] = writer
        return writer

    def decode_message(self, data: bytes, header: bytes | None) -> R:
        kind, _, fp = _tag(header).partition(":")
        if kind != "AVRO":
            written = kind or "no schema (plain bytes)"
            raise IncompatibleSchema(f"message written with {written}, read with AVRO")
        if fp == self.fingerprint:
            return self._read(data, self._parsed, None)
        writer = self._writer(fp)
        if writer is None:
            raise IncompatibleSchema(
                f"message written with Avro schema {fp}, this reader's is {self.fingerprint}, and the "
                "schema registry has no such schema: pass it as AvroSchema(..., writer_schemas=[...])"
            )
        return self._read(data, writer, self._parsed)

    def _read(self, data: bytes, writer: Any, reader: Any | None) -> R:
        buf = io.BytesIO(_payload(data))
        read = self._reader_of[id(writer)]
        if reader is not None and read is fastavro.schemaless_reader:
            read = self._reader_of[id(reader)]
        try:
            plain = read(buf, writer, reader)
        except RecursionError:
            raise SchemaSerializationError(
                f"payload nests records too deeply to decode as {self!r}"
            ) from None
        except Exception as exc:  # truncated data, failed schema resolution
            if type(exc).__name__ == "SchemaResolutionError":
                raise IncompatibleSchema(f"writer schema does not resolve to the reader's: {exc}") from None
            raise SchemaSerializationError(f"payload is not valid Avro for {self!r}: {exc}") from None
        if buf.tell() != len(buf.getbuffer()):
            raise SchemaSerializationError(
                f"payload has {len(buf.getbuffer()) - buf.tell()} bytes after the {self!r} record"
            )
        return self._from_plain(plain)


def _renamed_as(writer: dict[str, Any], reader: dict[str, Any] | None) -> dict[str, Any]:
    """``writer`` with the reader's record name, as pulsar-client's AvroSchema resolves a message's
    writer schema (Avro resolution needs equal names; a record renamed between versions, ``V1`` to
    ``V2``, is still the same record). Only the name: the writer's namespace stays, so its nested
    types keep the full names it refers to them by (fastavro matches records by their short name).
    Not for a self-referencing writer: its references to its own name would point nowhere."""
    if (
        reader is None
        or writer.get("type") != "record"
        or reader.get("type") != "record"
        or _is_recursive(fastavro.parse_schema(writer))
    ):
        return writer
    name = str(writer.get("name", ""))
    prefix = name.rsplit(".", 1)[0] + "." if "." in name else ""
    return {**writer, "name": prefix + str(reader["name"]).rsplit(".", 1)[-1]}


MAX_RECURSIVE_NESTING = 100
"""How deep (records, arrays and maps in one another) a value of a self-referencing Avro record
type may nest: what every reader can follow, whatever its own stack depth."""


def _nesting(plain: Any) -> int:
    """How deep dicts and lists nest in ``plain`` (iterative: no recursion limit of its own)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(plain, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            items: Iterable[Any] = node.values()
        elif isinstance(node, list | tuple):
            items = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((item, depth + 1) for item in items)
    return deepest


def _reader_for(parsed: Any) -> Callable[..., Any]:
    """fastavro's compiled reader, or for a recursive schema its pure-Python one (see _read)."""
    return _read_py.schemaless_reader if _is_recursive(parsed) else fastavro.schemaless_reader


def _is_recursive(schema: Any, defining: tuple[str, ...] = ()) -> bool:
    """Whether a parsed Avro schema has a named type that refers to itself (directly or through
    others): only such a schema lets a payload nest as deep as it likes."""
    if isinstance(schema, str):  # a primitive, or a reference to a named type by its full name
        return schema in defining
    if isinstance(schema, list):  # a union
        return any(_is_recursive(branch, defining) for branch in schema)
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind in ("record", "error"):
        inside = (*defining, str(schema.get("name")))
        return any(_is_recursive(f.get("type"), inside) for f in schema.get("fields", ()))
    if kind == "array":
        return _is_recursive(schema.get("items"), defining)
    if kind == "map":
        return _is_recursive(schema.get("values"), defining)
    return isinstance(kind, dict | list) and _is_recursive(kind, defining)


def prepare_all(schema: Schema[Any], messages: Iterable[Any]) -> None:
    """``schema.prepare`` for each header of ``messages`` (received ``Message``s) other than the
    schema's own: where they are received, so that ``value()`` need not fetch anything."""
    if type(schema).prepare is Schema.prepare:
        return  # nothing to fetch for this kind of schema
    own = schema.header()
    for header in {m.schema_header for m in messages}:
        if header is not None and header != own:
            schema.prepare(header)


def schema_header(headers: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...]) -> bytes | None:
    """The ``pulsar.schema`` header of a record's headers, if any."""
    for name, value in headers:
        if name == SCHEMA_HEADER:
            return value
    return None


__all__ = [
    "SCHEMA_HEADER",
    "AvroSchema",
    "BytesSchema",
    "JsonSchema",
    "Schema",
    "StringSchema",
]
