"""Closing a consumer keeps the acks it made in transactions that are still open."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_txn.errors import AlreadyClosed, Timeout, TransactionConflict
from pulsar_txn.pendingack.stats import pending_ack_stats
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def test_close_writes_batched_txn_acks_so_a_successor_sees_them_pending(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    topic, sub = f"close_{uid}", f"sub_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}")
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(4)]
    keep, drop = c.client.transaction(60), c.client.transaction(60)
    for m in msgs[:2]:
        consumer.acknowledge(m, txn=keep)
    for m in msgs[2:]:
        consumer.acknowledge(m, txn=drop)
    consumer.close()  # no commit or abort yet: the acks must be durable now
    stats = pending_ack_stats(c.client, topic, sub)[f"persistent://public/default/{topic}-partition-0"]
    assert stats["pending_ack_count"] == 4
    successor = c.client.subscribe(topic, sub)
    with pytest.raises(Timeout):
        successor.receive(800)  # all four pending: none redelivered
    with pytest.raises(TransactionConflict):
        successor.acknowledge(msgs[0].message_id, txn=c.client.transaction(60))
    keep.commit()
    drop.abort()
    again = sorted(successor.receive(5000).data for _ in range(2))
    assert again == [b"m2", b"m3"]
    with pytest.raises(Timeout):
        successor.receive(800)


def test_first_txn_ack_creates_the_pending_ack_log_partitioned_like_the_topic_so_a_timeout_releases_it(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    from pulsar_txn.naming import TopicName, pending_ack_topic

    c = cluster()
    topic, sub = f"palog_{uid}", f"sub_{uid}"
    c.client.create_topic(topic, 3)
    producer = c.client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}", partition_key=f"k{i}")
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    pa_topic = pending_ack_topic(TopicName.parse(topic), sub)
    assert not c.client._admin.topic_exists(pa_topic)  # subscribing alone creates nothing
    m = consumer.receive(5000)
    txn = c.client.transaction(5)
    consumer.acknowledge(m, txn=txn)  # never committed: only the TC's timeout abort ends it
    assert c.client._admin.partition_count(pa_topic) == 3
    others = {consumer.receive(5000).message_id for _ in range(2)}
    again = consumer.receive(30_000)  # the abort marker reached the log and released the ack
    assert again.message_id == m.message_id and again.message_id not in others


def test_abort_seen_in_the_pending_ack_log_does_not_duplicate_delivered_unacked_messages(
    cluster: Callable[..., Cluster], uid: str
) -> None:

    c = cluster()
    topic, sub = f"dup_{uid}", f"sub_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}")
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(5)]
    txn = c.client.transaction(60)
    consumer.acknowledge_cumulative(msgs[3], txn=txn)
    # Aborted by another client: this consumer learns the outcome only from the pending-ack log.
    other = c.other_client()
    try:
        other.resume_transaction(txn.txn_id).abort()
    finally:
        other.close()
    # Released by the abort: the cumulative ack's whole range (m0-m3) and the delivered m4 come again.
    first = consumer.receive(10_000)
    assert first.message_id in {m.message_id for m in msgs}
    consumer.redeliver_unacknowledged_messages()  # the one just received, again; the rest are queued
    again = sorted(consumer.receive(5000).data for _ in range(5))
    assert again == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    with pytest.raises(Timeout):
        consumer.receive(1000)  # and nothing twice


@pytest.mark.parametrize("how", ["plain", "cumulative", "txn", "txn_cumulative", "client_closed"])
def test_an_ack_on_a_closed_consumer_is_already_closed(
    cluster: Callable[..., Cluster], uid: str, how: str
) -> None:
    """As every other call of a closed consumer (and pulsar-client's ``AlreadyClosed``), not a
    ``NotAllowedError`` saying the partition moved to another consumer."""
    c = cluster()
    topic = f"ackclosed_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send("m")
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = c.client.transaction(60)
    consumer.close()
    with pytest.raises(AlreadyClosed):
        if how == "plain":
            consumer.acknowledge(msg)
        elif how == "cumulative":
            consumer.acknowledge_cumulative(msg)
        elif how == "txn":
            consumer.acknowledge(msg, txn=txn)
        elif how == "txn_cumulative":
            consumer.acknowledge_cumulative(msg, txn=txn)
        else:
            c.client.close()
            consumer.acknowledge(msg)
