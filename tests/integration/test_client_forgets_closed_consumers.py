"""A long-lived client does not keep the consumers it made once they are closed (session 29's
resource-leak review: ~17 KB and a Consumer object per subscribe + close, for good)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

from tests.conftest import Cluster


def test_a_closed_consumer_is_forgotten_by_its_client(cluster: Callable[..., Cluster], uid: str) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"forget_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send(b"m")
    gone: list[weakref.ref[object]] = []
    for i in range(3):
        consumer = c.client.subscribe(topic, f"s{i}", initial_position="Earliest")
        consumer.acknowledge(consumer.receive(10_000))
        consumer.close()
        gone.append(weakref.ref(consumer))
    kept = c.client.subscribe(topic, "open", initial_position="Earliest")
    del consumer
    gc.collect()
    assert c.client._consumers == [kept]
    assert [ref() for ref in gone] == [None, None, None]
    c.client.close()  # still closes the open one
    assert kept._closed
