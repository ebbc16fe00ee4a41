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

    def close(self) -> None:  # Appender.close destroys its producers
        pass

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


class _UnassignedQueueProducer:
    """A confluent Producer stand-in for a topic the producer has no metadata for yet: as librdkafka
    does, it queues such records unassigned, and once metadata comes without their partition, fails
    them in delivery reports, while records produced after the metadata are refused at once."""

    stored: list[bytes] = []
    known: int | None = None  # partitions in the metadata; None: the topic is unknown yet
    fail_unassigned = threading.Event()

    def close(self) -> None:  # Appender.close destroys its producers
        pass

    def __init__(self, _conf: dict[str, Any]) -> None:
        self.unassigned: list[Any] = []
        self.pending: list[tuple[Any, int]] = []
        self.lock = threading.Lock()

    def produce(
        self, _topic: str, value: bytes, partition: int = 0, on_delivery: Any = None, **_: Any
    ) -> None:
        cls = type(self)
        with self.lock:
            if cls.known is None:
                self.unassigned.append(on_delivery)
                return
        if partition >= cls.known:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        with self.lock:
            cls.stored.append(value)
            self.pending.append((on_delivery, len(cls.stored) - 1))

    def poll(self, timeout: float) -> int:
        with self.lock:
            ready, self.pending = self.pending, []
            failed: list[Any] = []
            if type(self).fail_unassigned.is_set():
                failed, self.unassigned = self.unassigned, []
        for callback in failed:
            callback(KafkaError(KafkaError._UNKNOWN_PARTITION), None)
        for callback, offset in ready:
            callback(None, type("Msg", (), {"offset": lambda _self, o=offset: o})())
        time.sleep(timeout / 10)
        return len(ready) + len(failed)

    def list_topics(self, *_args: Any, **_kwargs: Any) -> None:
        type(self).known = 2

    def flush(self, _timeout: float | None = None) -> int:
        return 0

    def __len__(self) -> int:
        return len(self.pending) + len(self.unassigned)


def test_a_record_refused_in_its_delivery_report_is_retried_before_later_appends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(producer_module, "Producer", _UnassignedQueueProducer)
    monkeypatch.setattr(_UnassignedQueueProducer, "stored", [])
    monkeypatch.setattr(_UnassignedQueueProducer, "known", None)
    monkeypatch.setattr(_UnassignedQueueProducer, "fail_unassigned", threading.Event())
    appender = producer_module.Appender(KafkaConfig(bootstrap_servers="fake:9092"))
    offsets: list[int | None] = []
    both = threading.Event()

    def settled(offset: int | None, _error: Any) -> None:
        offsets.append(offset)
        if len(offsets) == 2:
            both.set()

    appender.append_cb("out", 1, b"first", callback=settled)  # queued unassigned: topic unknown
    _UnassignedQueueProducer.known = 1  # metadata came, without partition 1
    appender.append_cb("out", 1, b"second", callback=settled)  # refused at once: held first
    _UnassignedQueueProducer.fail_unassigned.set()  # "first" is refused in its report: held after
    assert both.wait(10)
    assert _UnassignedQueueProducer.stored == [b"first", b"second"]
    appender.close(1)
