"""kafka_store at its edges (found in review, session 35; each test failed before its fix): the idle
gate closes at an end no record was delivered for, a negative partition is refused at once, and
confluent's own argument errors come out as StoreError."""

from __future__ import annotations

import time

import pytest

from kafka_store import Appender, KafkaConfig, ProduceError, StoreError, TopicAdmin
from kafka_store.reader import PartitionReader

pytestmark = pytest.mark.integration


def test_the_idle_gate_closes_at_an_end_past_the_last_record_delivered(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """A reader started below the log start (retention, DeleteRecords) reaches the end without a
    record delivered: the gate compared the end with the last record delivered and never closed,
    so the reader fetched without pause for good."""
    topic = f"gate_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    try:
        for i in range(5):
            appender.append(topic, 0, b"r%d" % i).result(10)
    finally:
        appender.close()
    admin.delete_records_before(topic, 0, 5).result(10)
    reader = PartitionReader(kafka, idle_backoff_ms=500)
    try:
        reader.add(topic, 0, 0)
        until = time.monotonic() + 10
        while not reader.idle_gate_closed and time.monotonic() < until:
            assert reader.poll_batch(100, 0.1) == []
        assert reader.idle_gate_closed
    finally:
        reader.close()


def test_an_append_to_a_negative_partition_fails_at_once(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """-1 let librdkafka's partitioner choose a partition (reported as a success); other negative
    numbers were retried until the delivery timeout."""
    topic = f"negpart_{uid}"
    admin.ensure_topic(topic, 2)
    appender = Appender(kafka)
    try:
        for partition in (-1, -7):
            with pytest.raises(ProduceError, match="no such partition"):
                appender.append(topic, partition, b"x").result(5)
        assert appender.append(topic, 1, b"y").result(10) == 0
    finally:
        appender.close()


def test_bad_partition_counts_are_store_errors(admin: TopicAdmin, uid: str) -> None:
    with pytest.raises(StoreError):
        admin.ensure_topic(f"bad_{uid}", -5)
    admin.ensure_topic(f"ok_{uid}", 1)
    with pytest.raises(StoreError):
        admin.add_partitions(f"ok_{uid}", 0)


def test_growing_a_topic_another_process_grew_first_is_no_error(admin: TopicAdmin, uid: str) -> None:
    """Two consumers acking at once in partitions added to the data topic both grow its pending-ack
    log: Kafka refuses the loser's total ("already has 3 partitions"), and its ack failed, which
    aborted its transaction (review of session 44)."""
    topic = f"grow{uid}"
    admin.ensure_topic(topic, 1)
    admin.add_partitions(topic, 3)
    admin.add_partitions(topic, 3)
    admin.add_partitions(topic, 2)
    assert admin.partition_count(topic) == 3
    with pytest.raises(StoreError):
        admin.add_partitions(f"missing{uid}", 3)
