"""Records refused because the producer's metadata predates their partition (a topic just created
or grown) are retried after a refresh in their append order, and later appends to that partition
wait behind them: a partition's records are stored in the order they were appended."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import kafka_store.producer as producer_module
from kafka_store import KafkaConfig

_JITTER = random.Random(7)


class _StaleMetadataProducer:
    """A confluent Producer stand-in whose cached metadata knows one partition until refreshed."""

    stored: list[bytes] = []
    known = 1

    def __init__(self, _conf: dict[str, Any]) -> None:
        self.pending: list[tuple[Any, int]] = []
        self.lock = threading.Lock()

    def produce(
        self, _topic: str, value: bytes, partition: int = 0, on_delivery: Any = None, **_: Any
    ) -> None:
        if partition >= type(self).known:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        with self.lock:
            type(self).stored.append(value)
            self.pending.append((on_delivery, len(type(self).stored) - 1))

    def poll(self, timeout: float) -> int:
        with self.lock:
            ready, self.pending = self.pending, []
        for callback, offset in ready:
            callback(None, type("Msg", (), {"offset": lambda _self, o=offset: o})())
        time.sleep(timeout / 10)
        return len(ready)

    def list_topics(self, *_args: Any, **_kwargs: Any) -> None:
        time.sleep(_JITTER.uniform(0.001, 0.02))  # refreshes take varying time, as real ones do
        type(self).known = 2

    def flush(self, _timeout: float | None = None) -> int:
        return 0

    def __len__(self) -> int:
        return len(self.pending)


def test_records_retried_for_an_unknown_partition_keep_their_append_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(producer_module, "Producer", _StaleMetadataProducer)
    monkeypatch.setattr(_StaleMetadataProducer, "stored", [])
    appender = producer_module.Appender(KafkaConfig(bootstrap_servers="fake:9092"))
    delivered = threading.Event()
    offsets: list[int | None] = []

    def settled(offset: int | None, _error: Any) -> None:
        offsets.append(offset)
        if len(offsets) == 20:
            delivered.set()

    for i in range(20):
        appender.append_cb("out", 1, f"m{i:02d}".encode(), callback=settled)
        time.sleep(0.002)
    assert delivered.wait(10)
    assert _StaleMetadataProducer.stored == [f"m{i:02d}".encode() for i in range(20)]
    appender.close(1)
