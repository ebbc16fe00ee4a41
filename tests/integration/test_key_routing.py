"""A partition key goes where a confluent-kafka (librdkafka) producer with its default partitioner
puts the same key: CRC32(key) % partitions. Plain Kafka producers and ours can share a keyed topic
and keep each key on one partition."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer as KafkaProducer

from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def test_partition_key_lands_where_librdkafka_default_partitioner_puts_it(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    topic = f"keyed_{uid}"
    c.client.create_topic(topic, 7)
    keys = [f"customer-{i}" for i in range(60)]
    ours = c.client.create_producer(topic)
    our_partitions = {k: ours.send(b"v", partition_key=k).partition for k in keys}

    theirs: dict[str, int] = {}

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        theirs[msg.key().decode()] = msg.partition()  # type: ignore[attr-defined]

    kafka = KafkaProducer({"bootstrap.servers": c.client.kafka.bootstrap_servers})  # default partitioner
    for k in keys:
        kafka.produce(topic, b"v", key=k.encode(), on_delivery=delivered)
    assert kafka.flush(30) == 0
    assert theirs == our_partitions
    assert len(set(our_partitions.values())) == 7  # the keys did spread
