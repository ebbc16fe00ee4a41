"""Edge inputs that used to escape as raw library exceptions (found by review, session 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_store import KafkaConfig, PartitionReader, StoreError, free_port
from kafka_store.group_admin import group_offsets
from pulsar_txn.cli import _load_file
from pulsar_txn.errors import ConfigError

DEAD = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", request_timeout_ms=1000)


def test_a_config_file_nested_deeper_than_the_parser_recurses_is_a_config_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"kafka": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match="not valid JSON"):
        _load_file(str(deep))  # RecursionError: a traceback from the CLI


def test_the_offsets_of_no_partitions_are_none() -> None:
    assert group_offsets(DEAD, "g", []) == {}  # the admin client's ValueError


def test_assigning_a_partition_twice_or_removing_one_never_assigned_is_a_store_error() -> None:
    reader = PartitionReader(DEAD)
    try:
        reader.add("t", 0, 0)
        with pytest.raises(StoreError):
            reader.add("t", 0, 0)  # a raw KafkaException (_CONFLICT)
        with pytest.raises(StoreError):
            reader.remove("t", 1)  # a raw KafkaException (_INVALID_ARG)
    finally:
        reader.close()
