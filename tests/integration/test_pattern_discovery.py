"""Pattern subscriptions follow their topics (Pulsar's pattern consumer, ``patternAutoDiscoveryPeriod``):
a topic created after subscribing that matches joins the subscription; transactions with acks in
flight while the subscription rebalances for it still commit."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pulsar_txn import ConfigError
from pulsar_txn.consumer import Consumer
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def _receive_all(consumer: Consumer[bytes], want: int, seconds: float = 20.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.batch_receive(100, 200):
            got.append(msg.data())
            consumer.acknowledge(msg)
    return got


def test_a_topic_created_after_subscribing_to_a_pattern_joins_the_subscription(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    c.client.create_topic(f"disc_{uid}_a", 1)
    c.client.create_producer(f"disc_{uid}_a").send(b"a")
    consumer = c.client.subscribe(
        None,
        f"disc{uid}",
        pattern=f"disc_{uid}_.*",
        initial_position="Earliest",
        pattern_auto_discovery_period=0.3,
    )
    try:
        assert _receive_all(consumer, 1) == [b"a"]
        c.client.create_topic(f"disc_{uid}_b", 2)
        c.client.create_topic(f"other_{uid}_b", 1)  # does not match: never consumed
        c.client.create_producer(f"other_{uid}_b").send(b"not mine")
        producer = c.client.create_producer(f"disc_{uid}_b")
        for i in range(4):
            producer.send(f"b{i}".encode())
        assert sorted(_receive_all(consumer, 4)) == [b"b0", b"b1", b"b2", b"b3"]
        assert {t.kafka_topic for t in consumer.topics} == {f"disc_{uid}_a", f"disc_{uid}_b"}
        with pytest.raises(Exception, match="no message"):
            consumer.receive(500)
        # A deleted topic leaves the subscription; the others go on being consumed.
        c.client.delete_topic(f"disc_{uid}_a", force=True)
        deadline = time.monotonic() + 20
        while {t.kafka_topic for t in consumer.topics} != {f"disc_{uid}_b"} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {t.kafka_topic for t in consumer.topics} == {f"disc_{uid}_b"}
        producer.send(b"b4")
        assert _receive_all(consumer, 1) == [b"b4"]
    finally:
        consumer.close()


def test_a_transaction_acking_across_a_discovery_rebalance_still_commits_and_is_not_redelivered(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    c.client.create_topic(f"dtx_{uid}_a", 1)
    producer = c.client.create_producer(f"dtx_{uid}_a")
    for i in range(3):
        producer.send(f"m{i}".encode())
    sub = f"dtx{uid}"
    consumer = c.client.subscribe(
        None, sub, pattern=f"dtx_{uid}_.*", initial_position="Earliest", pattern_auto_discovery_period=0.3
    )
    try:
        msgs = [consumer.receive(10_000) for _ in range(3)]
        txn = c.client.transaction(60)
        for msg in msgs:
            consumer.acknowledge(msg, txn=txn)
        # A new matching topic rebalances the group (revoke all, assign all) while txn is open.
        c.client.create_topic(f"dtx_{uid}_b", 1)
        c.client.create_producer(f"dtx_{uid}_b").send(b"new")
        assert _receive_all(consumer, 1) == [b"new"]
        txn.commit()
    finally:
        consumer.close()
    again = c.client.subscribe(None, sub, pattern=f"dtx_{uid}_.*", initial_position="Earliest")
    try:
        with pytest.raises(Exception, match="no message"):
            got = again.receive(1500)
            pytest.fail(f"redelivered after commit: {got.data()!r}")
    finally:
        again.close()


def test_a_bad_discovery_period_is_a_config_error(cluster: Callable[..., Cluster], uid: str) -> None:
    c = cluster(tb_service_enabled=False)
    c.client.create_topic(f"dbad_{uid}", 1)
    with pytest.raises(ConfigError, match="pattern_auto_discovery_period"):
        c.client.subscribe(None, f"dbad{uid}", pattern=f"dbad_{uid}", pattern_auto_discovery_period=-1)


def test_a_matching_topic_deleted_and_created_again_is_consumed_from_its_start(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    # The group kept the deleted topic's cursor (offset 10) on the embedded broker; the new topic's
    # offsets restart at 0, so its first messages were skipped.
    c = cluster(tb_service_enabled=False)
    a, b = f"rc_{uid}_a", f"rc_{uid}_b"
    c.client.create_topic(a, 1)
    c.client.create_topic(b, 1)
    pa = c.client.create_producer(a)
    for i in range(10):
        pa.send(f"old{i}".encode())
    consumer = c.client.subscribe(
        None,
        f"rc{uid}",
        pattern=f"rc_{uid}_.*",
        initial_position="Earliest",
        pattern_auto_discovery_period=0.3,
    )
    try:
        assert len(_receive_all(consumer, 10)) == 10
        time.sleep(1.0)  # the cursor (offset 10) is committed
        c.client.delete_topic(a, force=True)
        _wait_topics(consumer, {b})
        c.client.create_topic(a, 1)
        pa = c.client.create_producer(a)
        for i in range(3):
            pa.send(f"new{i}".encode())
        _wait_topics(consumer, {a, b})
        assert sorted(_receive_all(consumer, 3, 15)) == [b"new0", b"new1", b"new2"]
    finally:
        consumer.close()


def _wait_topics(consumer: Consumer[bytes], want: set[str]) -> None:
    deadline = time.monotonic() + 20
    while {t.kafka_topic for t in consumer.topics} != want and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {t.kafka_topic for t in consumer.topics} == want
