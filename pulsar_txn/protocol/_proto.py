"""A minimal proto2 codec: messages are slotted dataclasses whose fields carry their wire number and kind.

No code generation and no protobuf dependency. Only what Pulsar's command set needs: varint scalars
(uint64, uint32, int32, bool, enum), strings, bytes and nested messages, optional/required/repeated.
No groups, packed scalars, fixed-width or zigzag kinds (unknown fields of those wire types are skipped).

Declaring a message::

    @message
    class CommandNewTxn(Message):
        request_id: int = pb(1, Kind.UINT64)                  # no default: required
        txn_ttl_seconds: int = pb(2, Kind.UINT64, default=0)  # optional, proto default 0
        error: int | None = pb(4, Kind.ENUM, enum_type=ServerError, default=None)  # None: absent

Optional fields whose attribute is ``None`` are not encoded; any other value is. Enum fields decode to
the IntEnum member when the number is known and stay a plain ``int`` otherwise, so a newer peer's code
is never silently dropped (proto2 would treat it as an absent field).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from enum import Enum, IntEnum
from typing import Any, ClassVar, Self, TypeVar, cast, dataclass_transform

from pulsar_txn.errors import ProtocolError

__all__ = ["Kind", "Message", "message", "pb"]

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1
_I32_MIN = -(1 << 31)
_I32_MAX = (1 << 31) - 1

_WT_VARINT = 0
_WT_FIXED64 = 1
_WT_LEN = 2
_WT_FIXED32 = 5


class Kind(Enum):
    UINT64 = "uint64"
    UINT32 = "uint32"
    INT32 = "int32"
    BOOL = "bool"
    ENUM = "enum"
    STRING = "string"
    BYTES = "bytes"
    MESSAGE = "message"


_VARINT_KINDS = frozenset({Kind.UINT64, Kind.UINT32, Kind.INT32, Kind.BOOL, Kind.ENUM})


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldSpec:
    """What ``pb()`` records; the name is added when the class is compiled."""

    number: int
    kind: Kind
    required: bool
    repeated: bool
    secret: bool
    msg_type: type[Message] | None
    enum_type: type[IntEnum] | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    """A compiled field: everything the hot loops need, precomputed."""

    name: str
    number: int
    kind: Kind
    wire_type: int
    tag: bytes
    required: bool
    repeated: bool
    secret: bool
    msg_type: type[Message] | None
    enum_members: dict[int, IntEnum]


def pb(
    number: int,
    kind: Kind,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | None = None,
    msg_type: type[Message] | None = None,
    enum_type: type[IntEnum] | None = None,
    repeated: bool = False,
    secret: bool = False,
) -> Any:
    """Declare a field. No ``default``/``default_factory`` means proto2 ``required``; repeated fields
    take ``default_factory=list``. ``secret`` keeps the value out of ``repr`` (credentials)."""
    if not 1 <= number <= (1 << 29) - 1:
        raise ValueError(f"bad field number {number}")
    if (kind is Kind.MESSAGE) != (msg_type is not None):
        raise ValueError("msg_type is given exactly for MESSAGE fields")
    required = default is dataclasses.MISSING and default_factory is None
    if repeated and required:
        raise ValueError("a repeated field needs default_factory=list")
    spec = _FieldSpec(number, kind, required, repeated, secret, msg_type, enum_type)
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata={"pb": spec})
    return dataclasses.field(default=default, metadata={"pb": spec})


class Message:
    """Base of every message. Subclasses are made with the ``@message`` decorator."""

    __slots__ = ()

    _FIELDS: ClassVar[tuple[_Field, ...]] = ()
    _BY_NUMBER: ClassVar[dict[int, _Field]] = {}
    _REQUIRED: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        # Only the fields that are set, so a BaseCommand logs as its one sub-command; never secrets.
        parts = []
        for f in self._FIELDS:
            value = getattr(self, f.name)
            if value is None or (f.repeated and not value):
                continue
            parts.append(f"{f.name}=<hidden>" if f.secret else f"{f.name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def encode(self) -> bytes:
        out = bytearray()
        _encode_into(self, out)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Self:
        buf = bytes(data)  # no copy when already bytes
        return cls._decode(buf, 0, len(buf))

    @classmethod
    def _decode(cls, buf: bytes, pos: int, end: int) -> Self:
        by_number = cls._BY_NUMBER
        values: dict[str, Any] = {}
        while pos < end:
            key, pos = _read_varint(buf, pos, end)
            number = key >> 3
            wire_type = key & 7
            if number == 0:
                raise ProtocolError(f"{cls.__name__}: field number 0")
            f = by_number.get(number)
            if f is None:
                pos = _skip(buf, pos, end, wire_type)
                continue
            if wire_type != f.wire_type:
                raise ProtocolError(f"{cls.__name__}.{f.name}: wire type {wire_type}, expected {f.wire_type}")
            value: Any
            if wire_type == _WT_VARINT:
                raw, pos = _read_varint(buf, pos, end)
                value = _from_varint(f, raw)
            else:
                size, pos = _read_varint(buf, pos, end)
                stop = pos + size
                if stop > end:
                    raise ProtocolError(f"{cls.__name__}.{f.name}: length {size} past the end")
                kind = f.kind
                if kind is Kind.STRING:
                    try:
                        value = buf[pos:stop].decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise ProtocolError(f"{cls.__name__}.{f.name}: invalid UTF-8") from exc
                elif kind is Kind.BYTES:
                    value = buf[pos:stop]
                else:
                    assert f.msg_type is not None
                    value = f.msg_type._decode(buf, pos, stop)
                pos = stop
            if f.repeated:
                values.setdefault(f.name, []).append(value)
            else:
                values[f.name] = value  # proto2: the last occurrence wins
        for name in cls._REQUIRED:
            if name not in values:
                raise ProtocolError(f"{cls.__name__}.{name} is required but missing")
        make: Callable[..., Self] = cls
        return make(**values)


M = TypeVar("M", bound=Message)


@dataclass_transform(kw_only_default=True, field_specifiers=(pb,))
def message(cls: type[M]) -> type[M]:
    """Turn a ``Message`` subclass into a keyword-only slotted dataclass and compile its field table."""
    new_cls = dataclasses.dataclass(slots=True, kw_only=True, repr=False)(cls)
    compiled: list[_Field] = []
    for dc_field in dataclasses.fields(cast(Any, new_cls)):
        spec = dc_field.metadata.get("pb")
        if not isinstance(spec, _FieldSpec):
            raise TypeError(f"{cls.__name__}.{dc_field.name} is not declared with pb()")
        wire_type = _WT_VARINT if spec.kind in _VARINT_KINDS else _WT_LEN
        members: dict[int, IntEnum] = {int(m): m for m in spec.enum_type} if spec.enum_type else {}
        compiled.append(
            _Field(
                name=dc_field.name,
                number=spec.number,
                kind=spec.kind,
                wire_type=wire_type,
                tag=_varint_bytes((spec.number << 3) | wire_type),
                required=spec.required,
                repeated=spec.repeated,
                secret=spec.secret,
                msg_type=spec.msg_type,
                enum_members=members,
            )
        )
    compiled.sort(key=lambda f: f.number)  # encoders emit fields in number order
    by_number = {f.number: f for f in compiled}
    if len(by_number) != len(compiled):
        raise TypeError(f"{cls.__name__}: duplicate field numbers")
    new_cls._FIELDS = tuple(compiled)
    new_cls._BY_NUMBER = by_number
    new_cls._REQUIRED = tuple(f.name for f in compiled if f.required)
    return new_cls


# -- encoding ---------------------------------------------------------------------------------------


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    _put_varint(out, value)
    return bytes(out)


def _put_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _to_varint(f: _Field, value: Any) -> int:
    if not isinstance(value, int):
        raise ProtocolError(f"{f.name}: expected an int, got {type(value).__name__}")
    kind = f.kind
    if kind is Kind.BOOL:
        return 1 if value else 0
    if kind is Kind.UINT64:
        if not 0 <= value <= _U64:
            raise ProtocolError(f"{f.name}: {value} out of uint64 range")
        return value
    if kind is Kind.UINT32:
        if not 0 <= value <= _U32:
            raise ProtocolError(f"{f.name}: {value} out of uint32 range")
        return value
    # int32 and enum: negatives go out sign-extended to 64 bits (10 bytes), as protobuf does
    if not _I32_MIN <= value <= _I32_MAX:
        raise ProtocolError(f"{f.name}: {value} out of int32 range")
    return value & _U64


def _put_value(out: bytearray, f: _Field, value: Any) -> None:
    out += f.tag
    if f.wire_type == _WT_VARINT:
        _put_varint(out, _to_varint(f, value))
        return
    kind = f.kind
    data: bytes
    if kind is Kind.STRING:
        if not isinstance(value, str):
            raise ProtocolError(f"{f.name}: expected str, got {type(value).__name__}")
        data = value.encode("utf-8")
    elif kind is Kind.BYTES:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ProtocolError(f"{f.name}: expected bytes, got {type(value).__name__}")
        data = bytes(value)
    else:
        if not isinstance(value, Message):
            raise ProtocolError(f"{f.name}: expected a message, got {type(value).__name__}")
        data = value.encode()
    _put_varint(out, len(data))
    out += data


def _encode_into(msg: Message, out: bytearray) -> None:
    for f in msg._FIELDS:
        value = getattr(msg, f.name)
        if value is None:
            if f.required:
                raise ProtocolError(f"{type(msg).__name__}.{f.name} is required")
            continue
        if f.repeated:
            for item in value:
                _put_value(out, f, item)
        else:
            _put_value(out, f, value)


# -- decoding ---------------------------------------------------------------------------------------


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos < end:
        b = buf[pos]
        if b < 0x80:  # the common one-byte case
            return b, pos + 1
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _U64, pos
        shift += 7
        if shift >= 70:
            raise ProtocolError("varint longer than 10 bytes")


def _from_varint(f: _Field, raw: int) -> Any:
    kind = f.kind
    if kind is Kind.UINT64:
        return raw
    if kind is Kind.BOOL:
        return raw != 0
    if kind is Kind.UINT32:
        return raw & _U32
    value = raw & _U32  # int32 / enum: the low 32 bits, two's complement
    if value > _I32_MAX:
        value -= 1 << 32
    if kind is Kind.ENUM:
        return f.enum_members.get(value, value)
    return value


def _skip(buf: bytes, pos: int, end: int, wire_type: int) -> int:
    if wire_type == _WT_VARINT:
        return _read_varint(buf, pos, end)[1]
    if wire_type == _WT_LEN:
        size, pos = _read_varint(buf, pos, end)
        stop = pos + size
    elif wire_type == _WT_FIXED64:
        stop = pos + 8
    elif wire_type == _WT_FIXED32:
        stop = pos + 4
    else:
        raise ProtocolError(f"unsupported wire type {wire_type}")
    if stop > end:
        raise ProtocolError("unknown field runs past the end")
    return stop
