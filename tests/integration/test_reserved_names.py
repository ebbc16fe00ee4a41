"""Names that would silently reach another topic or another application's state are refused up front
(review of session 44): a subscription named like a consumer group of the deployment's own services
or of another Kafka application, a topic to create named by one partition, and "." / ".."."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer as KafkaConsumer

from kafka_store import KafkaConfig
from pulsar_txn import Client, CoordinatorConfig, DeadLetterPolicy
from pulsar_txn.errors import InvalidTopicName, NotAllowedError
from pulsar_txn.naming import TopicName
from tests.conftest import Cluster, receive_all, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["pulsar-txn-transaction-buffer", "pulsar-txn-coordinators"])
def test_a_subscription_cannot_take_a_default_service_group_name(
    cluster: Cluster, uid: str, name: str
) -> None:
    c = cluster()
    c.client.create_topic(f"rs{uid}", 1)
    with pytest.raises(NotAllowedError, match="reserved"):
        c.client.subscribe(f"rs{uid}", name)


def test_an_embedded_clients_own_service_groups_are_reserved(
    kafka: KafkaConfig, coord_config: Callable[..., CoordinatorConfig], uid: str
) -> None:
    config = coord_config(tb_service_enabled=False)
    with Client.embedded(bootstrap_servers=kafka.bootstrap_servers, coordinator=config) as client:
        client.create_topic(f"rse{uid}", 1)
        for name in (config.tb_group, config.coordinator_group):
            with pytest.raises(NotAllowedError, match="reserved"):
                client.subscribe(f"rse{uid}", name)


def test_a_subscription_cannot_join_the_running_tb_services_group(cluster: Cluster, uid: str) -> None:
    """Named like the TB service's (configured) group, a Failover consumer was assigned only the
    partitions the service was not, and received part of the topic."""
    c = cluster(tb_service_enabled=True, tb_topic_refresh_ms=200)
    topic = f"tbg{uid}"
    c.client.create_topic(topic, 2)
    with pytest.raises(NotAllowedError, match="another application"):
        wait_until(lambda: _joins_then_refused(c.client, topic, c.config.tb_group), 20)


def _joins_then_refused(client: Client, topic: str, name: str) -> bool:
    """False while the service's member has not joined yet (the consumer got in: closed again)."""
    consumer = client.subscribe(topic, name, consumer_type="Failover")
    consumer.close()
    return False


def test_a_subscription_cannot_join_another_kafka_applications_group(
    cluster: Cluster, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster()
    mine, theirs, group = f"mine{uid}", f"theirs{uid}", f"app{uid}"
    c.client.create_topic(mine, 1)
    c.client.create_topic(theirs, 1)
    other = KafkaConsumer(
        {"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "client.id": "their-app"}
    )
    try:
        other.subscribe([theirs])
        wait_until(lambda: other.poll(0.2) is None and bool(other.assignment()), 20)
        with pytest.raises(NotAllowedError, match="their-app"):
            c.client.subscribe(mine, group, consumer_type="Failover")
    finally:
        other.close()
    # Once that application has left, the name is free.
    c.client.create_producer(mine).send(b"m")
    consumer = c.client.subscribe(mine, group, initial_position="Earliest")
    assert [m.data() for m in receive_all(consumer)] == [b"m"]
    consumer.close()


def test_create_topic_named_by_a_partition_is_refused_and_creates_nothing(cluster: Cluster, uid: str) -> None:
    """It created the base topic ``x`` with the given partition count, and ``x-partition-2`` was
    unusable (Pulsar's admin answers 412)."""
    c = cluster()
    with pytest.raises(InvalidTopicName, match="-partition-N"):
        c.client.create_topic(f"cp{uid}-partition-2", 1)
    assert f"cp{uid}" not in c.client._admin.list_topics()


def test_a_dead_letter_topic_named_by_a_partition_is_refused_when_the_policy_is_made() -> None:
    """Accepted before, its first move created the base topic and every later receive() failed."""
    with pytest.raises(InvalidTopicName, match="one partition"):
        DeadLetterPolicy(1, f"dl{uuid.uuid4().hex[:6]}-partition-3")
    with pytest.raises(InvalidTopicName):
        DeadLetterPolicy(1, "a b")
    assert DeadLetterPolicy(1, "persistent://public/default/dlq").dead_letter_topic


@pytest.mark.parametrize("name", [".", "..", "persistent://public/default/.."])
def test_dot_topic_names_are_invalid_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(name)
