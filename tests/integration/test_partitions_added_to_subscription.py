"""Partitions added to a topic a subscription already reads start at their beginning, as Pulsar copies
a subscription onto added partitions at the earliest position; a new ``Latest`` subscription still
starts every partition the topic had at its end (review of session 44: a ``Latest`` subscription
skipped what producers wrote to added partitions before its consumer was assigned them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import pulsar_txn.consumer as consumer_module
import pulsar_txn.producer as producer_module
from kafka_store import group_offsets
from pulsar_txn.pendingack.stats import split_metadata
from tests.conftest import Cluster, receive_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _receive(consumer: Any, want: int, seconds: float = 30) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(set(got)) < want:
        got += [m.data() for m in receive_all(consumer, 1000)]
    return got


def test_a_latest_subscription_reads_partitions_added_to_its_topic_from_their_start(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(producer_module, "PARTITIONS_REFRESH_S", 0.0)
    monkeypatch.setattr(consumer_module, "PARTITIONS_REFRESH_MS", 1000)
    c = cluster()
    topic = f"grow{uid}"
    c.client.create_topic(topic, 1)
    consumer = c.client.subscribe(topic, "sub", initial_position="Latest")
    producer = c.client.create_producer(topic)
    producer.send(b"before")
    consumer.acknowledge(consumer.receive(10_000))
    c.client._admin.add_partitions(topic, 3)
    sent = [producer.send(b"after%d" % i) for i in range(9)]
    assert {m.partition for m in sent} == {0, 1, 2}
    got = _receive(consumer, 9)
    # As a set: the rebalance may deliver partition 0's unacked messages again (at-least-once).
    assert set(got) == {b"after%d" % i for i in range(9)}
    consumer.close()
    # The cursors record the count the subscription began with, for consumers to come.
    cursors = group_offsets(c.client.kafka, "sub", [(topic, p) for p in range(3)])
    assert {split_metadata(md).partitions for _, md in cursors.values()} == {1}


def test_a_new_latest_subscription_skips_what_every_existing_partition_held(
    cluster: ClusterFactory, uid: str
) -> None:
    """Two consumers that join at once each open their partitions without a cursor: the second must
    not take the first's fresh cursor for a sign that its partition was added later."""
    c = cluster()
    topic = f"fresh{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(6):
        producer.send(b"old%d" % i, partition_key=f"k{i}")
    a = c.client.subscribe(topic, "sub", consumer_type="Failover", initial_position="Latest")
    b = c.client.subscribe(topic, "sub", consumer_type="Failover", initial_position="Latest")
    time.sleep(2)  # both joined and opened what they were assigned
    producer.send(b"new", partition_key="k0")
    assert _receive(a, 1, 5) + _receive(b, 1, 5) == [b"new"]
    a.close()
    b.close()
