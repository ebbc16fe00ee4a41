"""Bad input found by session 39's review: each reached the application as an error from inside
confluent_kafka or a misleading one, or stopped a coordinator from starting."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafka_store import KafkaConfig, TopicAdmin
from pulsar_txn import Client, ConfigError, TransactionCoordinatorNotFoundError
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from tests.conftest import Cluster, receive_all


def test_a_topic_named_twice_is_subscribed_once(cluster: Callable[..., Cluster], uid: str) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"twice_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}".encode())
    # Before: confluent_kafka's KafkaException (_INVALID_ARG) from the group's subscribe.
    consumer = c.client.subscribe(
        [topic, topic, f"persistent://public/default/{topic}"], f"s_{uid}", initial_position="Earliest"
    )
    assert len(consumer.topics) == 1
    assert sorted(m.data for m in receive_all(consumer)) == [b"m0", b"m1", b"m2", b"m3"]
    consumer.close()


def test_ending_a_transaction_of_a_tc_that_does_not_exist_says_so(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster(tb_service_enabled=False)
    # Before: TopicNotFound naming the coordinators' assign topic.
    with pytest.raises(TransactionCoordinatorNotFoundError, match="TC 99 does not exist") as err:
        c.client.resume_transaction("(99,1)").commit()
    assert not err.value.retriable


def test_a_send_callback_that_cannot_be_called_is_refused_at_the_call(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"badcb_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    # Before: the message was sent, then the failing callback was only logged.
    with pytest.raises(ConfigError, match="callback"):
        producer.send_async(b"x", 5)  # type: ignore[arg-type]
    assert c.client.get_last_message_ids(topic) == {0: None}


def test_a_coordinator_without_num_tcs_joins_a_cluster_of_another_tc_count(
    kafka: KafkaConfig, admin: TopicAdmin, coord_config: Callable[..., CoordinatorConfig]
) -> None:
    first = coord_config()
    admin.ensure_topic(first.log_topic, 4, {"cleanup.policy": "compact"})  # a cluster initialised with 4 TCs
    given = {k: getattr(first, k) for k in first.model_fields_set - {"num_tcs"}}
    config = CoordinatorConfig(**{**given, "tb_service_enabled": True})
    assert config.num_tcs == 16  # the default, not given
    # Before: the start failed ("has 4 partitions but num_tcs=16") though --num-tcs only matters at init.
    coordinator = EmbeddedCoordinator(kafka, config).start()
    try:
        # The TB service too: folding with 16 it would keep transactions of TCs 4-15 that readers
        # (who learn 4 from the log) discard.
        assert coordinator.service.num_tcs == 4 and coordinator.config.num_tcs == 4
        assert coordinator.node.buffer is not None and coordinator.node.buffer._config.num_tcs == 4
        client = Client(
            coordinator.url or "",
            kafka=kafka,
            log_topic=config.log_topic,
            snapshot_topic=config.snapshot_topic,
        )
        try:
            txn = client.transaction(30)
            assert 0 <= txn.txn_id.most_bits < 4
            txn.commit()
        finally:
            client.close()
    finally:
        coordinator.stop()
