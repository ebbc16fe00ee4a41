"""Record types for JSON and Avro schemas: dataclasses and pydantic models, described by their type
hints. Derives the Avro schema of a record type, and converts records to and from plain dicts."""

from __future__ import annotations

import dataclasses
import enum
import numbers
import types
import typing
from typing import Any, Union

from pydantic import BaseModel

from pulsar_txn.errors import ConfigError, SchemaSerializationError

_PRIMITIVES: dict[type, str] = {bool: "boolean", int: "long", float: "double", str: "string", bytes: "bytes"}


def is_record_type(tp: object) -> bool:
    """A dataclass or a pydantic model class."""
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or issubclass(tp, BaseModel))


def _fields(record_type: type) -> dict[str, Any]:
    """Field name -> resolved type hint, in declaration order."""
    try:
        hints = typing.get_type_hints(record_type)
    except RecursionError:  # the caller is deep in a nested record, not a configuration error
        raise
    except Exception as exc:  # unresolvable forward references
        raise ConfigError(f"cannot resolve the type hints of {record_type.__name__}: {exc}") from None
    if dataclasses.is_dataclass(record_type):
        return {f.name: hints[f.name] for f in dataclasses.fields(record_type)}
    assert issubclass(record_type, BaseModel)
    return {name: hints[name] for name in record_type.model_fields}


def _defaults(record_type: type) -> dict[str, Any]:
    """Field name -> default value, for the fields that have one (a factory is called once)."""
    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(record_type):
        for f in dataclasses.fields(record_type):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out
    assert issubclass(record_type, BaseModel)
    for name, info in record_type.model_fields.items():
        if not info.is_required():
            out[name] = info.get_default(call_default_factory=True)
    return out


def _optional_arg(tp: Any) -> Any | None:
    """``X`` for ``X | None`` / ``Optional[X]``, else None."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
        raise ConfigError(f"unions other than `X | None` are not supported in records: {tp}")
    return None


def avro_schema(record_type: type, namespace: str | None = None) -> dict[str, Any]:
    """The Avro record schema of a dataclass or pydantic model (nested records included once)."""
    if not is_record_type(record_type):
        raise ConfigError(f"{record_type!r} is not a dataclass or a pydantic model")
    return _avro_record(record_type, namespace, {})


def _avro_name(tp: type, names: dict[type, str]) -> tuple[str, bool]:
    """The Avro name of the named type ``tp`` in this schema, and whether it is met for the first
    time (then defined, else referenced by name). Two different types of one class name (``v1.Item``
    and ``v2.Item``) cannot share it: the later one is named ``Item_2`` (``_3``, ...) instead."""
    known = names.get(tp)
    if known is not None:
        return known, False
    taken = set(names.values())
    name, n = tp.__name__, 1
    while name in taken:
        n += 1
        name = f"{tp.__name__}_{n}"
    names[tp] = name
    return name, True


def _avro_record(record_type: type, namespace: str | None, names: dict[type, str]) -> dict[str, Any]:
    type_name, _first = _avro_name(record_type, names)
    fields: list[dict[str, Any]] = []
    defaults = _defaults(record_type)
    for name, tp in _fields(record_type).items():
        field: dict[str, Any] = {"name": name, "type": _avro_type(tp, namespace, names)}
        optional = _optional_arg(tp) is not None
        if name in defaults:
            # Avro resolution fills a field missing from an older writer with the reader's default:
            # the record type's own default, as plain JSON (bytes as code points 0-255, per Avro).
            default = defaults[name]
            try:
                plain = to_plain(default, tp)
            except SchemaSerializationError as exc:
                raise ConfigError(
                    f"{record_type.__name__}.{name}: its default does not fit its type: {exc}"
                ) from None
            if isinstance(plain, bytes):
                plain = plain.decode("latin-1")
            field["default"] = plain
            if optional and plain is not None:  # a union's default must match its first branch
                field["type"] = [*field["type"][1:], "null"]
        elif optional:
            field["default"] = None
        fields.append(field)
    schema: dict[str, Any] = {"type": "record", "name": type_name, "fields": fields}
    if namespace:
        schema["namespace"] = namespace
    return schema


def _avro_type(tp: Any, namespace: str | None, names: dict[type, str]) -> Any:
    inner = _optional_arg(tp)
    if inner is not None:
        return ["null", _avro_type(inner, namespace, names)]
    if tp in _PRIMITIVES:
        return _PRIMITIVES[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _avro_type(args[0], namespace, names)}
    if origin is dict and len(args) == 2 and args[0] is str:
        return {"type": "map", "values": _avro_type(args[1], namespace, names)}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        name, first = _avro_name(tp, names)
        return {"type": "enum", "name": name, "symbols": [m.name for m in tp]} if first else name
    if is_record_type(tp):
        if tp in names:
            return names[tp]  # a named type is defined once, then referenced by name
        return _avro_record(tp, namespace, names)
    raise ConfigError(
        f"type {tp!r} is not supported in records (use bool, int, float, str, bytes, X | None, "
        "list[X], dict[str, X], enums, dataclasses or pydantic models)"
    )


def to_plain(value: Any, tp: Any) -> Any:
    """A record (or field value) as plain dicts/lists/scalars, following the type hint ``tp``."""
    if value is None:
        if _optional_arg(tp) is None and tp is not type(None):
            # The JSON schema writes null otherwise (Avro refuses it): the hint is the contract.
            raise SchemaSerializationError(
                f"None for a field of type {getattr(tp, '__name__', tp)} (declare it X | None)"
            )
        return None
    inner = _optional_arg(tp)
    if inner is not None:
        return to_plain(value, inner)
    if is_record_type(tp):
        if not isinstance(value, tp):
            raise SchemaSerializationError(f"expected {tp.__name__}, got {type(value).__name__}")
        return {name: to_plain(getattr(value, name), ftp) for name, ftp in _fields(tp).items()}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        if not isinstance(value, list | tuple):  # a str is iterable too: never split it into chars
            raise SchemaSerializationError(
                f"expected a list for {tp}, got {type(value).__name__}: {value!r:.80}"
            )
        return [to_plain(v, args[0]) for v in value]
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise SchemaSerializationError(f"expected a dict with str keys for {tp}, got {value!r:.80}")
        return {k: to_plain(v, args[1]) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not isinstance(value, tp):
            raise SchemaSerializationError(f"expected a {tp.__name__} member, got {value!r:.80}")
        return value.name
    _check_scalar(value, tp)
    if tp in (int, float) and type(value) not in (int, float):
        return int(value) if tp is int else float(value)  # numpy scalars: JSON takes Python numbers only
    return value


def from_plain(data: Any, tp: Any) -> Any:
    """The inverse of ``to_plain``: builds records (validated by their constructors)."""
    if data is None:
        return None
    inner = _optional_arg(tp)
    if inner is not None:
        return from_plain(data, inner)
    if is_record_type(tp):
        if not isinstance(data, dict):
            raise SchemaSerializationError(f"expected an object for {tp.__name__}, got {type(data).__name__}")
        fields = _fields(tp)
        # Fields the record type lacks are ignored (a newer writer added them), as Pulsar's JSON
        # schema does (Jackson with FAIL_ON_UNKNOWN_PROPERTIES off); Avro resolution drops them too.
        values = {name: from_plain(data[name], ftp) for name, ftp in fields.items() if name in data}
        return _build(tp, values)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        _expect(data, list, "an array")
        return [from_plain(v, args[0]) for v in data]
    if origin is dict:
        _expect(data, dict, "an object")
        return {k: from_plain(v, args[1]) for k, v in data.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp[data]
        except (KeyError, TypeError):  # TypeError: not even a name (e.g. a list)
            raise SchemaSerializationError(f"{data!r} is not a member of {tp.__name__}") from None
    if tp is bytes and isinstance(data, str):
        # fastavro hands a bytes field's schema default over as written in the schema (code points).
        try:
            return data.encode("latin-1")
        except UnicodeEncodeError:
            raise SchemaSerializationError(f"expected bytes, got str: {data!r:.80}") from None
    _check_scalar(data, tp)
    return data


def _build(tp: type, values: dict[str, Any]) -> Any:
    """A record of ``tp`` from its fields' values (validated by its constructor). A dataclass field
    with ``init=False`` is set after construction; a pydantic field with an alias is passed by it."""
    late: dict[str, Any] = {}
    if dataclasses.is_dataclass(tp):
        no_init = {f.name for f in dataclasses.fields(tp) if not f.init}
        late = {k: v for k, v in values.items() if k in no_init}
        values = {k: v for k, v in values.items() if k not in no_init}
    elif issubclass(tp, BaseModel):
        values = {_init_name(name, tp.model_fields[name]): v for name, v in values.items()}
    try:
        record = tp(**values)
        for name, value in late.items():
            object.__setattr__(record, name, value)  # frozen dataclasses too
    except (TypeError, ValueError, AttributeError) as exc:  # missing fields, pydantic validation
        raise SchemaSerializationError(f"cannot build {tp.__name__}: {exc}") from None
    return record


def _init_name(name: str, info: Any) -> str:
    """The keyword a pydantic model's constructor takes for field ``name``: its alias if it has one
    (a model without ``populate_by_name`` refuses the field name)."""
    alias = info.validation_alias if info.validation_alias is not None else info.alias
    if isinstance(alias, str):
        return alias
    choices = getattr(alias, "choices", None)  # AliasChoices: its first plain name
    if choices and isinstance(choices[0], str):
        return str(choices[0])
    return name


# What a scalar type hint takes, on both sides (a float field takes an int; bool is no int here).
_SCALARS: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (numbers.Integral,),  # numpy integers too
    float: (numbers.Real,),
    bool: (bool,),
    bytes: (bytes, bytearray),
}


def _check_scalar(value: Any, tp: Any) -> None:
    scalar = _SCALARS.get(tp)
    if scalar is not None and (not isinstance(value, scalar) or (tp is not bool and isinstance(value, bool))):
        raise SchemaSerializationError(f"expected {tp.__name__}, got {type(value).__name__}: {value!r:.80}")


def _expect(data: Any, kind: type, what: str) -> None:
    if not isinstance(data, kind):
        raise SchemaSerializationError(f"expected {what}, got {type(data).__name__}: {data!r:.80}")


def check_json_compatible(record_type: type, seen: frozenset[type] = frozenset()) -> None:
    """JSON has no bytes: refuse record types with bytes fields (also inside lists, dicts, optional
    fields and nested records) up front."""
    for name, tp in _fields(record_type).items():
        if _holds_bytes(tp):
            raise ConfigError(f"{record_type.__name__}.{name} is bytes: use AvroSchema for binary fields")
        for nested in _nested_records(tp):
            if nested not in seen:
                check_json_compatible(nested, seen | {record_type})


def _holds_bytes(tp: Any) -> bool:
    return tp in (bytes, bytearray) or any(_holds_bytes(arg) for arg in typing.get_args(tp))


def _nested_records(tp: Any) -> list[type]:
    if is_record_type(tp):
        return [tp]
    return [r for arg in typing.get_args(tp) for r in _nested_records(arg)]
