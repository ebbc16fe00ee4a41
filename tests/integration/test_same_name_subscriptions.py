"""A subscription is a Kafka group named after the subscription alone, so a same-named subscription on
another topic shares it. Pulsar keeps them apart: here an Exclusive consumer on one topic does not make
a consumer of the same name on another topic ConsumerBusy, and unsubscribing one of them refuses
(NotAllowedError, nothing deleted) instead of deleting the other's cursor."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_txn import NotAllowedError
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def test_same_named_subscriptions_on_two_topics_do_not_exclude_each_other(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    t1, t2, sub = f"same1_{uid}", f"same2_{uid}", f"billing_{uid}"
    for t in (t1, t2):
        c.client.create_topic(t, 1)
        c.client.create_producer(t).send(t.encode())
    first = c.client.subscribe(t1, sub, initial_position="Earliest")
    second = c.client.subscribe(t2, sub, initial_position="Earliest")  # not ConsumerBusy
    try:
        assert first.receive(10_000).data() == t1.encode()
        assert second.receive(10_000).data() == t2.encode()
    finally:
        second.close()
        first.close()


def test_unsubscribing_refuses_to_delete_a_same_named_subscriptions_cursor_on_another_topic(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    t1, t2, sub = f"unsub1_{uid}", f"unsub2_{uid}", f"billing_{uid}"
    for t in (t1, t2):
        c.client.create_topic(t, 1)
    producer = c.client.create_producer(t1)
    for i in range(3):
        producer.send(f"m{i}".encode())
    first = c.client.subscribe(t1, sub, initial_position="Earliest")
    for _ in range(2):
        first.acknowledge(first.receive(10_000))
    first.close()  # its cursor (2 acked) is committed
    other = c.client.subscribe(t2, sub, initial_position="Earliest")
    with pytest.raises(NotAllowedError, match="cursors"):
        other.unsubscribe()
    again = c.client.subscribe(t1, sub, initial_position="Earliest")
    try:
        assert again.receive(10_000).data() == b"m2"  # the cursor of t1 was kept
    finally:
        again.close()


@pytest.mark.parametrize("others", [1, 2])
def test_an_exclusive_consumer_closed_and_opened_again_is_not_busy_when_the_name_is_used_elsewhere(
    cluster: Callable[..., Cluster], uid: str, others: int
) -> None:
    # While the group rebalances after the close, the other topics' members are assigned nothing
    # for a moment: they counted as consumers of this topic, and the reopen got ConsumerBusy.
    c = cluster(tb_service_enabled=False)
    name = f"shared{uid}"
    keep = []
    for i in range(others):
        topic = f"elsewhere{i}_{uid}"
        c.client.create_topic(topic, 1)
        keep.append(c.client.subscribe(topic, name, initial_position="Earliest"))
    mine = f"mine_{uid}"
    c.client.create_topic(mine, 1)
    c.client.subscribe(mine, name, initial_position="Earliest").close()
    again = c.client.subscribe(mine, name, initial_position="Earliest")
    again.close()
    for consumer in keep:
        consumer.close()
