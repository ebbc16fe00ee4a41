"""Two subscriptions whose pending-ack logs have the same name (Pulsar's naming: topic "a-b" with
subscription "c" and topic "a" with subscription "b-c" both get "a-b-c__transaction_pending_ack").
One's committed transactional acks must not ack the other's messages (found by the session-34
security review; failed before the fix: the second subscription never received message 0)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_txn.naming import TopicName, pending_ack_topic
from tests.conftest import Cluster, receive_all

pytestmark = pytest.mark.integration


def test_a_subscription_sharing_its_pending_ack_log_name_does_not_take_the_others_acks(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    short, long_ = f"pashare_{uid}", f"pashare_{uid}-b"
    assert pending_ack_topic(TopicName.parse(long_), "c") == pending_ack_topic(TopicName.parse(short), "b-c")
    for topic in (short, long_):
        c.client.create_topic(topic, 1)
        producer = c.client.create_producer(topic)
        for i in range(3):
            producer.send(f"{topic}-{i}".encode())

    first = c.client.subscribe(long_, "c", initial_position="Earliest")
    with c.client.transaction(30) as txn:
        for msg in receive_all(first, 1500):
            first.acknowledge(msg, txn=txn)
    first.close()

    second = c.client.subscribe(short, "b-c", initial_position="Earliest")
    try:
        got = sorted(m.data for m in receive_all(second, 1500))
    finally:
        second.close()
    assert got == [f"{short}-{i}".encode() for i in range(3)]
