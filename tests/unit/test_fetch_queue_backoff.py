"""Our fetching readers put a partition's next fetch off by a few ms, not librdkafka's default 1 s,
once its prefetch queue is over its thresholds. With the default, a read-committed scanner working
through a 3-partition backlog got one partition's records ~0.9 s after the others' (a subscription's
receive of a 30,000-record backlog: 27k msg/s, 140-185k with the short back-off;
docs/benchmarks.md, session 21)."""

from __future__ import annotations

from typing import Any

import pytest

import kafka_store.group as group_module
import kafka_store.reader as reader_module
from kafka_store import KafkaConfig
from kafka_store.group import GroupReader
from kafka_store.reader import PartitionReader

_LIBRDKAFKA_DEFAULT_MS = 1000


class _Captured:
    """A confluent Consumer stand-in that keeps the settings it was made with (no connection)."""

    confs: list[dict[str, Any]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        type(self).confs.append(conf)

    def close(self) -> None:
        pass


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    _Captured.confs = []
    monkeypatch.setattr(reader_module, "Consumer", _Captured)
    monkeypatch.setattr(group_module, "Consumer", _Captured)
    return _Captured.confs


def test_partition_reader_puts_off_a_full_partition_briefly(captured: list[dict[str, Any]]) -> None:
    reader = PartitionReader(KafkaConfig(bootstrap_servers="127.0.0.1:9"), extra={"queued.min.messages": 10})
    assert reader.consumer is not None
    (conf,) = captured
    assert conf["queued.min.messages"] == 10  # the scanner's low threshold, which made the stall likely
    assert conf["fetch.queue.backoff.ms"] <= 10 < _LIBRDKAFKA_DEFAULT_MS


def test_group_reader_puts_off_a_full_partition_briefly(captured: list[dict[str, Any]]) -> None:
    GroupReader(KafkaConfig(bootstrap_servers="127.0.0.1:9"), "g", lambda _tps: {}, lambda _tps: None)
    (conf,) = captured
    assert conf["fetch.queue.backoff.ms"] <= 10 < _LIBRDKAFKA_DEFAULT_MS
