"""Topics outside public/default (Kafka name ``tenant.namespace.local``): received messages name
their topic in its namespace, and a pattern subscription in Pulsar's full form matches them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_txn import EARLIEST, InvalidTopicName
from pulsar_txn.naming import TopicName
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def test_a_message_of_a_namespaced_topic_names_its_topic_in_its_namespace(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"persistent://acme/orders/t{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send(b"x")
    reader = c.client.create_reader(topic, EARLIEST)
    try:
        assert reader.read_next(5000).topic_name == f"{topic}-partition-0"
    finally:
        reader.close()


def test_a_pattern_in_a_namespace_other_than_public_default_matches_its_topics(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"persistent://acme/orders/p{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send(b"x")
    consumer = c.client.subscribe(
        None, f"pat{uid}", pattern=f"persistent://acme/orders/p{uid}.*", initial_position="Earliest"
    )
    try:
        msg = consumer.receive(10_000)
        assert (msg.data(), msg.topic_name) == (b"x", f"{topic}-partition-0")
    finally:
        consumer.close()


def test_an_overlong_topic_name_is_refused_before_it_is_cached() -> None:
    with pytest.raises(InvalidTopicName, match="over"):
        TopicName.parse(" " * 100_000 + "orders")
