"""A payload nesting a self-referencing record type deeper than the decoder can follow is a
SchemaSerializationError, like any payload that does not decode: never a raw RecursionError, a
ConfigError about the application's types, or (Avro) a crash of the whole process in fastavro's
compiled reader, which recurses in C without a bound. Any Kafka producer can write such a payload."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

from pulsar_txn.errors import SchemaSerializationError
from pulsar_txn.schema import AvroSchema, JsonSchema, _is_recursive


@dataclass
class Node:
    v: int
    next: Node | None = None


@dataclass
class Leaf:
    n: int


@dataclass
class Pair:
    left: Leaf
    right: Leaf  # the same named type twice: a reference, not a recursion


def _json_chain(depth: int) -> bytes:
    return ('{"v":1,"next":' * depth + '{"v":0}' + "}" * depth).encode()


def test_shallow_recursive_records_still_round_trip() -> None:
    value = Node(1, Node(2, Node(3)))
    for schema in (JsonSchema(Node), AvroSchema(Node)):
        assert schema.decode(schema.encode(value)) == value  # type: ignore[attr-defined]


@pytest.mark.parametrize("depth", [400, 600, 990])
def test_a_json_payload_nesting_records_too_deeply_is_a_serialization_error(depth: int) -> None:
    with pytest.raises(SchemaSerializationError):
        JsonSchema(Node).decode(_json_chain(depth))


def test_an_avro_payload_nesting_records_too_deeply_is_a_serialization_error_not_a_crash() -> None:
    # In a child process: before the fix, 10,000 levels (20 KB) segfaulted the interpreter.
    code = textwrap.dedent(
        """
        from __future__ import annotations
        from dataclasses import dataclass
        from pulsar_txn.errors import SchemaSerializationError
        from pulsar_txn.schema import AvroSchema

        @dataclass
        class Node:
            v: int
            next: Node | None = None

        schema = AvroSchema(Node)
        for depth in (500, 10_000):
            try:
                schema.decode(b"\\x02\\x02" * depth + b"\\x02\\x00")
            except SchemaSerializationError:
                print("typed", depth)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["typed 500", "typed 10000"]


def test_only_self_referencing_avro_schemas_take_the_bounded_reader() -> None:
    assert _is_recursive(AvroSchema(Node)._parsed)
    assert not _is_recursive(AvroSchema(Pair)._parsed)
    assert not _is_recursive(AvroSchema(Leaf)._parsed)


def _deep(n: int) -> Node:
    node = Node(0)
    for i in range(n - 1):
        node = Node(i + 1, node)
    return node


def test_a_recursive_json_value_nests_as_deep_as_avros_on_every_python() -> None:
    """The JSON limit was the interpreter's stack: ~330 levels on Python 3.11, ~490 on 3.12+, so
    3.13 wrote records 3.11 could not read (Python-version review of session 43)."""
    from pulsar_txn.schema import MAX_RECURSIVE_NESTING

    schema = JsonSchema(Node)
    deepest = _deep(MAX_RECURSIVE_NESTING)
    assert schema.decode(schema.encode(deepest)) == deepest
    with pytest.raises(SchemaSerializationError, match="deeper than"):
        schema.encode(_deep(MAX_RECURSIVE_NESTING + 1))
    with pytest.raises(SchemaSerializationError, match="deeper than"):
        schema.decode(_json_chain(MAX_RECURSIVE_NESTING + 1))
