"""Records without a value (Kafka tombstones a plain Kafka producer wrote) are delivered as Pulsar
delivers null values: ``has_null_value`` True, ``data`` empty, ``value()`` None whatever the schema,
told apart from an empty payload; a dead-lettered one stays null."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer as KafkaProducer

import pulsar_txn.compat as pulsar
from pulsar_txn import DeadLetterPolicy, JsonSchema, Timeout
from tests.conftest import Cluster, compat_options, read_all

pytestmark = pytest.mark.integration


@dataclass
class Event:
    n: int


def _write_raw(c: Cluster, topic: str, values: list[bytes | None]) -> None:
    c.client.create_topic(topic, 1)
    kafka = KafkaProducer({"bootstrap.servers": c.client.kafka.bootstrap_servers})
    for v in values:
        kafka.produce(topic, value=v, key=b"k", partition=0)
    assert kafka.flush(30) == 0


def test_a_tombstone_is_delivered_as_a_null_value_not_as_an_empty_payload(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    topic = f"nulls_{uid}"
    _write_raw(c, topic, [None, b"", b'{"n": 1}'])
    reader = c.client.create_reader(topic, schema=JsonSchema(Event))
    got = read_all(reader)
    assert [(m.has_null_value, m.data) for m in got] == [(True, b""), (False, b""), (False, b'{"n": 1}')]
    assert got[0].value() is None  # no JSON decode of a missing value
    assert got[2].value() == Event(1)

    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    first = consumer.receive(10_000)
    assert first.has_null_value and first.value() is None
    consumer.acknowledge(first)

    client = pulsar.Client(c.coordinator.url, **compat_options(c))
    try:
        compat_reader = client.create_reader(topic, pulsar.MessageId.earliest)
        msgs = [compat_reader.read_next(10_000) for _ in range(2)]
        assert [m.has_null_value() for m in msgs] == [True, False]
        assert msgs[0].data() == b""
    finally:
        client.close()


def test_a_dead_lettered_tombstone_stays_a_tombstone(cluster: Callable[..., Cluster], uid: str) -> None:
    c = cluster()
    topic, dlq = f"nulls_dlq_{uid}", f"nulls_dlq_{uid}-DLQ"
    _write_raw(c, topic, [None])
    consumer = c.client.subscribe(
        topic,
        f"s_{uid}",
        initial_position="Earliest",
        negative_ack_redelivery_delay_ms=50,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1, dead_letter_topic=dlq),
    )
    for _ in range(2):
        consumer.negative_acknowledge(consumer.receive(10_000))
    with pytest.raises(Timeout):
        consumer.receive(1500)  # past max_redeliver_count: moved to the DLQ instead
    dead = c.client.create_reader(dlq)
    (msg,) = read_all(dead, 5000)
    assert msg.has_null_value and msg.properties["REAL_TOPIC"].endswith(f"/{topic}")
