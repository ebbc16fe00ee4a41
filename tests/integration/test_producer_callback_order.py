"""``send_async`` callbacks run on the client's delivery thread, one partition's in send order, also
while ``flush()`` runs (a review of session 43: confluent-kafka's ``flush()`` served delivery reports
on the caller's thread beside the delivery thread, so callbacks ran out of order and on the
application's thread). Failed before the fix."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def test_send_callbacks_run_on_the_delivery_thread_in_send_order_per_partition_across_flushes(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"cb_order_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    lock = threading.Lock()
    threads: set[str] = set()
    offsets: dict[int, list[int]] = {0: [], 1: []}

    def callback(_result: Any, mid: Any) -> None:
        with lock:
            threads.add(threading.current_thread().name)
            offsets[mid.partition].append(mid.offset)

    for _round in range(6):
        for i in range(3000):
            producer.send_async(b"m%d" % i, callback)
        producer.flush()
    producer.close()
    assert sum(map(len, offsets.values())) == 6 * 3000
    assert threading.current_thread().name not in threads
    for got in offsets.values():
        assert got == sorted(got)
