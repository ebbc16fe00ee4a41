"""``Producer.flush`` and ``close`` wait for every send made so far, also transactional sends still
queued behind their partition's ADD_PARTITION_TO_TXN (they are not in the Kafka producer yet)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import Cluster

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("end", ["flush", "close"])
def test_flush_and_close_wait_for_transactional_sends_queued_behind_registration(
    cluster: Callable[..., Cluster], uid: str, end: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"flush_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(timeout=60)
    futures = [producer.send_async(f"m{i}".encode(), txn=txn) for i in range(50)]
    getattr(producer, end)()
    unfinished = sum(not f.done() for f in futures)
    txn.commit()
    assert unfinished == 0
    assert [f.result().offset for f in futures] == list(range(50))
