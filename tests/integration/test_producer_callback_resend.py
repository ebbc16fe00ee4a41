"""A send callback may send again on the same producer, also while the producer's queue is full."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from kafka_store import KafkaConfig
from pulsar_txn import Client, MessageId
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def test_a_callback_that_sends_again_does_not_stall_a_producer_with_a_full_queue(
    cluster: Callable[..., Cluster], uid: str, kafka: KafkaConfig
) -> None:
    """The application thread waited for room in the full queue while holding the producer's order
    lock; the delivery thread, whose reports make that room, ran a callback sending again and
    waited for the same lock. Both sat until the record's deadline (the operation timeout), and
    sends failed with "producer queue stayed full" though the broker kept up."""
    c = cluster(tb_service_enabled=False)
    topic = f"cbq_{uid}"
    c.client.create_topic(topic, 1)
    small = kafka.model_copy(update={"extra": {"queue.buffering.max.messages": "200"}})
    client = Client(
        c.coordinator.url or "",
        kafka=small,
        num_tcs=c.config.num_tcs,
        log_topic=c.config.log_topic,
        snapshot_topic=c.config.snapshot_topic,
        operation_timeout_seconds=10,
    )
    try:
        producer = client.create_producer(topic)
        resent: list[Future[MessageId]] = []
        once = threading.Lock()

        def callback(_result: Any, _mid: Any) -> None:
            if once.acquire(blocking=False):
                resent.append(producer.send_async(b"from the callback"))

        futures = [producer.send_async(b"m%d" % i, callback) for i in range(2000)]
        failed = [f.exception(60) for f in futures if f.exception(60) is not None]
        assert failed == []  # a stalled send fails once the operation timeout passes
        assert len(resent) == 1 and resent[0].exception(30) is None
    finally:
        client.close()
