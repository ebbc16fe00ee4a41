"""Readers that re-arm a partition's end seek to where they read next as they keep it, never to the
client's position. Found by review (session 42): librdkafka before 2.16 (confluentinc/librdkafka
#4844) puts its position one past the end once ``consume()`` returns the end event. The TB service's
group reader sought there on resuming from its idle pause, so a transaction's first message written
during the pause was never folded; the abort marker after it then made the transaction "ended" but
not aborted, the snapshot said so, and readers delivered the aborted message (seen with
confluent-kafka 2.13). Here the client's position is made to misreport as that librdkafka does."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from kafka_store import Appender, GroupReader, KafkaConfig, PartitionReader, TopicAdmin

pytestmark = pytest.mark.integration


class _PositionPastTheEnd:
    """A client whose ``position()`` is one past where it reads next once the partition's end was
    reported (``ends``: the end offsets reported), as librdkafka before 2.16 (#4844)."""

    def __init__(self, real: Any, ends: dict[tuple[str, int], int]) -> None:
        self._real = real
        self._ends = ends

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        out = []
        for tp in self._real.position(partitions):
            end = self._ends.get((tp.topic, tp.partition))
            out.append(TopicPartition(tp.topic, tp.partition, end + 1 if end is not None else tp.offset))
        return out


def _first_offset(poll: Any, deadline_s: float = 20) -> int | None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = poll()
        if got:
            return got[0]
    return None


def test_a_group_reader_resuming_after_its_idle_pause_reads_the_record_written_meanwhile(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"resume_{uid}"
    admin.ensure_topic(topic, 1)
    reader = GroupReader(kafka, f"g_{uid}", lambda pairs: dict.fromkeys(pairs, 0), lambda _pairs: None)
    reader._consumer = _PositionPastTheEnd(reader._consumer, reader.eof)
    appender = Appender(kafka)
    try:
        reader.subscribe([topic])
        deadline = time.monotonic() + 30
        while not reader.caught_up() and time.monotonic() < deadline:
            reader.poll_batch(100, 0.2)
        assert reader.caught_up()
        reader.pause_all()
        appender.append(topic, 0, b"written during the pause").result(30)
        reader.resume_all()
        assert _first_offset(lambda: [m.offset() for m in reader.poll_batch(100, 0.2)]) == 0
    finally:
        appender.close()
        reader.close()


def test_a_partition_reader_rearming_its_ends_reads_the_next_record(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"rearm_next_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    reader = PartitionReader(kafka)
    reader.assign({(topic, 0): 0})
    reader._consumer = _PositionPastTheEnd(reader.consumer, reader._eof)
    try:
        appender.append(topic, 0, b"first").result(30)
        assert _first_offset(lambda: [r.offset for r in reader.poll_batch(100, 0.2)]) == 0
        deadline = time.monotonic() + 20
        while not reader.at_eof(topic, 0) and time.monotonic() < deadline:
            reader.poll_batch(100, 0.2)
        assert reader.at_eof(topic, 0)
        reader.rearm_ends([(topic, 0)])
        appender.append(topic, 0, b"second").result(30)
        assert _first_offset(lambda: [r.offset for r in reader.poll_batch(100, 0.2)]) == 1
    finally:
        appender.close()
        reader.close()
