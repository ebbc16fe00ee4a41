"""Versioned record codecs (fastavro) for every internal record kind.

Wire layout of an encoded record: ``b"PT" | kind code (u8) | schema version (u8) | avro body``.
A reader rejects an unknown kind or a version it has no schema for with a typed error, never
guessing at the bytes.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro

from kafka_store.errors import (
    CodecError,
    CorruptRecordError,
    UnknownRecordKindError,
    UnsupportedRecordVersionError,
)

MAGIC = b"PT"
_HEADER_LEN = len(MAGIC) + 2


@dataclass
class RecordKind:
    """One kind of internal record with all the schema versions this build can read."""

    name: str
    code: int
    schemas: dict[int, dict[str, Any]]
    _parsed: dict[int, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.code < 256:
            raise ValueError(f"record kind code {self.code} out of range")
        for version, schema in self.schemas.items():
            if not 0 < version < 256:
                raise ValueError(f"schema version {version} out of range")
            self._parsed[version] = fastavro.parse_schema(schema)

    @property
    def latest(self) -> int:
        return max(self.schemas)

    def encode(self, value: Mapping[str, Any], version: int | None = None) -> bytes:
        version = self.latest if version is None else version
        if version not in self._parsed:
            raise UnsupportedRecordVersionError(f"{self.name} has no schema version {version}")
        buf = io.BytesIO()
        buf.write(MAGIC)
        buf.write(bytes((self.code, version)))
        try:
            fastavro.schemaless_writer(buf, self._parsed[version], dict(value))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CodecError(f"cannot encode {self.name} v{version}: {exc}") from None
        return buf.getvalue()


class CodecRegistry:
    """Maps kind codes to ``RecordKind``; decodes any registered record."""

    def __init__(self) -> None:
        self._by_code: dict[int, RecordKind] = {}

    def register(self, kind: RecordKind) -> RecordKind:
        existing = self._by_code.get(kind.code)
        if existing is not None and existing.name != kind.name:
            raise ValueError(f"record code {kind.code} used by {existing.name} and {kind.name}")
        self._by_code[kind.code] = kind
        return kind

    def decode(self, data: bytes | None) -> tuple[RecordKind, int, dict[str, Any]]:
        """Return (kind, version, fields) or raise a ``CodecError`` subclass."""
        if data is None or len(data) < _HEADER_LEN or data[:2] != MAGIC:
            raise CorruptRecordError("not an internal record (missing or truncated header)")
        code, version = data[2], data[3]
        kind = self._by_code.get(code)
        if kind is None:
            raise UnknownRecordKindError(f"unknown internal record kind code {code}")
        parsed = kind._parsed.get(version)
        if parsed is None:
            raise UnsupportedRecordVersionError(
                f"{kind.name} record has schema version {version}; this build reads {sorted(kind.schemas)}"
            )
        buf = io.BytesIO(data)
        buf.seek(_HEADER_LEN)
        try:
            fields = fastavro.schemaless_reader(buf, parsed, None)
        except (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError, OverflowError) as exc:
            raise CorruptRecordError(f"corrupt {kind.name} v{version} record: {exc}") from None
        if buf.tell() != len(data):
            raise CorruptRecordError(
                f"{kind.name} v{version} record has {len(data) - buf.tell()} trailing bytes"
            )
        if not isinstance(fields, dict):
            raise CorruptRecordError(f"{kind.name} v{version} record is not a record")
        return kind, version, fields

    def decode_as(self, kind: RecordKind, data: bytes | None) -> dict[str, Any]:
        got, _version, fields = self.decode(data)
        if got.code != kind.code:
            raise CorruptRecordError(f"expected a {kind.name} record, found {got.name}")
        return fields


REGISTRY = CodecRegistry()
