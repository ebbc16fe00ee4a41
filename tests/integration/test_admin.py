"""TransactionsAdmin (pulsar_txn.admin) against the real broker and an embedded coordinator."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_txn import (
    AuthenticationError,
    ConfigError,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
    TransactionsAdmin,
    TxnID,
)
from tests.conftest import Cluster, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _admin(c: Cluster, auth_token: str | None = None) -> TransactionsAdmin:
    return TransactionsAdmin(
        c.client, admin_url=c.coordinator.admin_url, log_topic=c.config.log_topic, auth_token=auth_token
    )


def test_metadata_shows_status_partitions_and_subscriptions_from_the_log(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    admin = _admin(c)
    topic = f"adm_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    producer.send("plain")
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = c.client.transaction(60)
    producer.send("t", txn=txn, partition_key="k")
    consumer.acknowledge(msg, txn=txn)
    full = f"persistent://public/default/{topic}"
    meta = wait_until(
        lambda: (m := admin.transaction_metadata(txn.txn_id))["subscriptions"] and m, 10, what="subscription"
    )
    assert meta["status"] == "OPEN" and meta["timeout_ms"] == 60_000 and meta["txn_id"] == str(txn.txn_id)
    # As Pulsar's client does, a partitioned topic's subscription joins per partition.
    acked = f"{full}-partition-{msg.message_id.partition}"
    assert meta["subscriptions"] == [{"topic": acked, "subscription": f"sub_{uid}"}]
    assert len(meta["partitions"]) == 1 and meta["partitions"][0].startswith(f"{full}-partition-")
    txn.commit()
    assert admin.transaction_status(str(txn.txn_id)) == "COMMITTED"
    assert txn.txn_id in admin.list_transactions(txn.txn_id.most_bits)
    stats = admin.pending_ack_stats(topic, f"sub_{uid}")
    assert sum(s["pending_ack_count"] for s in stats.values()) == 0
    tb = admin.transaction_buffer_stats(topic)
    assert sum(s["committed_txns"] for s in tb.values()) == 1 and len(tb) == 2


def test_unknown_transactions_and_coordinators_get_typed_errors(cluster: ClusterFactory) -> None:
    c = cluster()
    admin = _admin(c)
    with pytest.raises(TransactionNotFound):
        admin.transaction_metadata(TxnID(0, 10_000))
    with pytest.raises(TransactionCoordinatorNotFoundError, match="does not exist"):
        admin.transaction_metadata("(99,0)")
    wrong = TransactionsAdmin(c.client, log_topic="no_such_log_topic")
    with pytest.raises(TransactionCoordinatorNotFoundError, match="log_topic"):
        wrong.list_transactions(0)
    with pytest.raises(ConfigError, match="admin_url"):
        wrong.coordinator_stats()


def test_coordinator_stats_over_http_count_timeouts_and_need_the_token(cluster: ClusterFactory) -> None:
    c = cluster(admin_port=0, auth_token="s3cret")
    with pytest.raises(AuthenticationError):
        _admin(c, auth_token="wrong").coordinator_stats()
    admin = _admin(c, auth_token="s3cret")
    stats = admin.coordinator_stats()
    assert sorted(stats) == [0, 1, 2, 3]
    assert all(s["state"] == "Ready" and s["timeout_count"] == 0 for s in stats.values())


def test_a_missing_topic_is_reported_not_created(cluster: ClusterFactory, uid: str) -> None:
    from pulsar_txn import TopicNotFound

    c = cluster()
    with pytest.raises(TopicNotFound):
        c.client.create_producer(f"missing_{uid}")
    with pytest.raises(TopicNotFound):
        TransactionsAdmin(c.client).transaction_buffer_stats(f"missing_{uid}")
    assert not c.client._admin.topic_exists(f"missing_{uid}")
