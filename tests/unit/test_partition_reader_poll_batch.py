"""PartitionReader.poll_batch converts what one poll of the client returned, nothing more: a read
error after some records were taken must not lose them (found by a review of session 33, against a
version that polled again in chunks)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError

import kafka_store.reader as reader_module
from kafka_store import KafkaConfig, PartitionReader
from kafka_store.errors import TopicNotFoundError
from kafka_store.reader import _last_offsets


class _Msg:
    def __init__(self, offset: int, partition: int = 0, error: KafkaError | None = None) -> None:
        self._offset = offset
        self._partition = partition
        self._error = error

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> list[tuple[str, bytes]] | None:
        return [("h", b"1")] if self._offset % 2 else None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)


def test_each_poll_returns_everything_the_client_handed_over_and_errors_come_on_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = PartitionReader(KafkaConfig(bootstrap_servers="127.0.0.1:1"))
    calls: list[int] = []
    real_poll, this_thread = reader_module.poll_ready, threading.current_thread()

    def fake_poll(_consumer: Any, max_records: int, timeout: float) -> list[Any]:
        if threading.current_thread() is not this_thread:
            # Another test's client still running in this worker (CI saw a third call).
            return real_poll(_consumer, max_records, timeout)
        calls.append(max_records)
        if len(calls) == 1:
            return [_Msg(o) for o in range(700)]
        return [_Msg(700, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))]

    monkeypatch.setattr(reader_module, "poll_ready", fake_poll)
    monkeypatch.setattr(PartitionReader, "consumer", None)
    first = reader.poll_batch(5000, 0.1)
    assert [r.offset for r in first] == list(range(700))
    assert first[1].headers == (("h", b"1"),) and first[0].headers == ()
    assert first[3].timestamp_ms == 1003
    with pytest.raises(TopicNotFoundError):
        reader.poll_batch(5000, 0.1)
    assert calls == [5000, 5000]


def test_last_offsets_are_each_partitions_last_item_found_from_the_end() -> None:
    msgs = [_Msg(o, p) for o, p in [(5, 0), (9, 1), (6, 0), (7, 0), (10, 1), (3, 2)]]
    assigned = dict.fromkeys([("t", 0), ("t", 1), ("t", 2)])
    assert _last_offsets(msgs, False, assigned) == {("t", 0): 7, ("t", 1): 10, ("t", 2): 3}
    # Stops once every assigned partition is seen: partition 0's earlier items are not looked at.
    assert _last_offsets(msgs, False, dict.fromkeys([("t", 1), ("t", 2)])) == {("t", 1): 10, ("t", 2): 3}
    # A partition not (or no longer) assigned does not end the walk early.
    assert _last_offsets(msgs, False, dict.fromkeys([("t", 0)])) == {("t", 2): 3, ("t", 1): 10, ("t", 0): 7}
    assert _last_offsets(msgs, False, {}) == {("t", 0): 7, ("t", 1): 10, ("t", 2): 3}
    records = [("t", p, o) for o, p in [(1, 0), (2, 0), (4, 1)]]
    assert _last_offsets(records, True, dict.fromkeys([("t", 0), ("t", 1)])) == {("t", 0): 2, ("t", 1): 4}
