"""The streaming source's offsets against topics that go away and starts past a partition's end, as
Spark's Kafka source treats them. Found by the Spark review (session 42): a deleted ``subscribe`` topic
failed every micro-batch with TopicNotFound even with ``failOnDataLoss=false``; a deleted
``subscribePattern`` topic lost its unread records without a word even with ``failOnDataLoss=true``;
``startingOffsets`` past the end went on from the log start, reading records below the start asked
for. The planning calls are those Spark makes at each micro-batch."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_store import KafkaConfig
from pulsar_txn.errors import DataLossError
from tests.conftest import Cluster

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _reader(c: Cluster, kafka: KafkaConfig, **options: str) -> Any:
    from spark._options import parse_options
    from spark.source import PulsarTxnStreamReader

    base = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "snapshotTopic": c.config.snapshot_topic,
        "numTcs": str(c.config.num_tcs),
        "logTopic": c.config.log_topic,
    }
    return PulsarTxnStreamReader(parse_options({**base, **options}, streaming=True))


def _two_topics(c: Cluster, a: str, b: str) -> None:
    for topic in (a, b):
        c.client.create_topic(topic, 1)
        c.client.create_producer(topic).send("x")


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
@pytest.mark.parametrize("by", ["subscribe", "subscribePattern"])
def test_a_deleted_topic_is_data_loss_or_left_behind_as_failOnDataLoss_says(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, by: str, fail_on_data_loss: bool
) -> None:
    c = cluster(tb_service_enabled=False)
    a, b = f"gone_a_{uid}", f"gone_b_{uid}"
    _two_topics(c, a, b)
    names = f"{a},{b}" if by == "subscribe" else f"gone_[ab]_{uid}"
    reader = _reader(
        c, kafka, **{by: names}, startingOffsets="earliest", failOnDataLoss=str(fail_on_data_loss).lower()
    )
    try:
        first = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        assert first == {a: {"0": 1}, b: {"0": 1}}
        c.client.create_producer(b).send("never read")
        c.client.delete_topic(b)
        time.sleep(1)
        c.client.create_producer(a).send("y")
        if fail_on_data_loss:
            with pytest.raises(DataLossError, match="gone"):
                reader.latestOffset(first, ReadAllAvailable())
            return
        later = reader.latestOffset(first, ReadAllAvailable())
        assert later == {a: {"0": 2}}  # the stream goes on with what is left
        assert [(p.topic, p.start, p.end) for p in reader.partitions(first, later)] == [(a, 1, 2)]
        assert reader.latestOffset(later, ReadAllAvailable()) == later  # reported once
    finally:
        reader.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_starting_offsets_past_the_end_never_read_below_the_end(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, fail_on_data_loss: bool
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"past_end_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}")
    reader = _reader(
        c,
        kafka,
        subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":50}}}}',
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    try:
        if fail_on_data_loss:
            with pytest.raises(DataLossError, match="past the partition's end offset 5"):
                reader.initialOffset()
            return
        start = reader.initialOffset()
        assert start == {topic: {"0": 5}}  # Spark's Kafka source goes on from the end too
        producer.send("m5")
        end = reader.latestOffset(start, ReadAllAvailable())
        assert [(p.start, p.end) for p in reader.partitions(start, end)] == [(5, 6)]
    finally:
        reader.stop()
