"""A subscription's idle gate (``KafkaConfig.idle_fetch_backoff_ms``, for brokers that answer empty
fetches at once) also closes while the application does not poll, and loses nothing."""

from __future__ import annotations

from collections.abc import Callable

from kafka_store import KafkaConfig
from pulsar_txn.client import Client
from tests.conftest import Cluster, receive_all, wait_until

ClusterFactory = Callable[..., Cluster]


def test_a_consumer_the_application_stops_polling_closes_its_idle_gate_and_loses_nothing(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"idlegate_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(40):
        producer.send(f"m{i}".encode(), partition_key=str(i % 2))
    gated = kafka.model_copy(update={"idle_fetch_backoff_ms": 20})
    config = c.config
    with Client(c.coordinator.url, kafka=gated, num_tcs=config.num_tcs, log_topic=config.log_topic) as client:
        consumer = client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
        # Received one by one, as an application busy with each message would: every poll that
        # returns records returns at once, before the partitions' ends can close the gate.
        first = [consumer.receive(5000) for _ in range(40)]
        scanner = consumer._reader._scanner
        assert scanner is not None
        # Nobody polls from here on but the consumer's upkeep thread, which must close the gate
        # (before, an unpolled consumer fetched without pause until the application polled again).
        for _ in range(3):
            assert wait_until(lambda: scanner.idle_gate_closed, timeout=5)
            producer.send(b"late", partition_key="0")  # reopens nothing until polled
        rest = receive_all(consumer)
        assert sorted(m.value() for m in first) == sorted(f"m{i}".encode() for i in range(40))
        assert [m.value() for m in rest] == [b"late"] * 3
        consumer.close()
