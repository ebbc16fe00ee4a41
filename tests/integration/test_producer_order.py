"""A producer's per-partition order is its call order (Pulsar's per-producer ordering), whatever
else its client does meanwhile, for the sync and the asyncio producer alike (an ordering review of
session 43; each test failed before its fix)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_store.reader import read_range
from pulsar_txn.asyncio import AsyncClient
from pulsar_txn.buffer.reader import is_control
from tests.conftest import Cluster

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _stored(c: Cluster, topic: str) -> list[int]:
    return [
        int(r.value[:8])
        for r in read_range(c.client.kafka, topic, 0)
        if r.value is not None and not is_control(r.headers)
    ]


def _inversions(order: list[int]) -> list[tuple[int, int]]:
    return [(a, b) for a, b in itertools.pairwise(order) if b < a]


def test_sends_keep_call_order_across_the_clients_producer_renewal(cluster: ClusterFactory, uid: str) -> None:
    """Deleting a topic renews the client's Kafka producer; the old one still had this producer's
    records in flight, and later ones went out through the new one at the same time."""
    c = cluster(tb_service_enabled=False)
    topic, other = f"order_{uid}", f"other_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_topic(other, 1)
    producer = c.client.create_producer(topic)
    called: list[int] = []
    lock = threading.Lock()

    def callback_for(i: int) -> Callable[[Any, Any], None]:
        def callback(_result: Any, _mid: Any) -> None:
            with lock:
                called.append(i)

        return callback

    deleted = threading.Event()
    deleter = threading.Thread(target=lambda: (c.client.delete_topic(other), deleted.set()))
    payload = b"x" * 30_000
    sent = after = 0
    deadline = time.monotonic() + 60
    deleter.start()
    while time.monotonic() < deadline and after < 3000:  # a backlog across the renewal
        producer.send_async(b"%08d" % sent + payload, callback_for(sent))
        sent += 1
        after += deleted.is_set()
    deleter.join()
    producer.flush()
    stored = _stored(c, topic)
    c.client.delete_topic(topic)  # ~100 MB: the broker rewrites its whole store after each change
    assert len(stored) == sent
    assert _inversions(stored) == [] and _inversions(called) == []


def _async_client(c: Cluster) -> AsyncClient:
    return AsyncClient(c.client)


def test_async_sends_waiting_for_room_start_in_call_order(cluster: ClusterFactory, uid: str) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"aio_order_{uid}"
    c.client.create_topic(topic, 1)

    async def main() -> None:
        async with _async_client(c) as client:
            producer = await client.create_producer(topic, max_pending_messages=4)
            await asyncio.gather(*(producer.send(b"%08d" % i) for i in range(300)))

    asyncio.run(main())
    assert _stored(c, topic) == list(range(300))


def test_a_plain_send_does_not_overtake_the_first_transactional_one(
    cluster: ClusterFactory, uid: str
) -> None:
    """The first transactional send checks the topic (DescribeConfigs) in the pool first."""
    c = cluster(tb_service_enabled=False)
    topic = f"aio_order_txn_{uid}"
    c.client.create_topic(topic, 1)

    async def main() -> None:
        async with _async_client(c) as client:
            producer = await client.create_producer(topic)
            async with client.transaction(timeout=30) as txn:
                await asyncio.gather(
                    producer.send(b"%08d" % 0, txn=txn),
                    producer.send(b"%08d" % 1),
                    producer.send(b"%08d" % 2),
                )

    asyncio.run(main())
    assert _stored(c, topic) == [0, 1, 2]


def test_a_topic_delete_does_not_hold_sends_to_other_topics(cluster: ClusterFactory, uid: str) -> None:
    """The renewal holds back only partitions with records in flight on the old producer: after a
    delete of a topic still being written, a send elsewhere waited behind that topic's doomed
    records for the whole message timeout (review of this session's diff)."""
    c = cluster(tb_service_enabled=False)
    client = c.other_client(operation_timeout_seconds=10)
    try:
        x, y = f"held_x_{uid}", f"held_y_{uid}"
        client.create_topic(x, 1)
        client.create_topic(y, 1)
        to_x, to_y = client.create_producer(x), client.create_producer(y)
        to_y.send(b"warm")
        stop = threading.Event()

        def pump() -> None:
            for n in range(200_000):
                if stop.is_set():
                    return
                to_x.send_async(b"x" * 1000)
                if n % 200 == 0:
                    time.sleep(0.001)

        pumping = threading.Thread(target=pump, daemon=True)
        pumping.start()
        time.sleep(0.5)
        client.delete_topic(x)
        time.sleep(0.2)
        stop.set()
        pumping.join(10)
        started = time.monotonic()
        to_y.send(b"after")
        assert time.monotonic() - started < 3.0
    finally:
        client.close()


def test_flush_in_a_send_callback_is_refused_at_once(cluster: ClusterFactory, uid: str) -> None:
    """Callbacks run on the thread that reports deliveries: a flush there waited for its own report
    for the whole operation timeout, and then confluent-kafka aborted the process (review)."""
    from pulsar_txn.errors import NotAllowedError

    c = cluster(tb_service_enabled=False)
    topic = f"flush_in_cb_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    outcome: list[tuple[type[BaseException] | None, float]] = []

    def callback(_result: Any, _mid: Any) -> None:
        started = time.monotonic()
        try:
            producer.flush()
            outcome.append((None, time.monotonic() - started))
        except Exception as exc:  # recorded: the test's assertion below
            outcome.append((type(exc), time.monotonic() - started))

    producer.send_async(b"first", callback)
    for _ in range(500):
        producer.send_async(b"y" * 100)
    producer.flush()
    assert len(outcome) == 1
    error, took = outcome[0]
    assert error is NotAllowedError and took < 1.0
    assert len(list(read_range(c.client.kafka, topic, 0))) == 501


def test_the_appender_keeps_nothing_of_a_reported_send(cluster: ClusterFactory, uid: str) -> None:
    """The renewal's per-partition record of the last send kept each partition's last send, with
    its transaction and callback, for the client's life (review of this session's diff)."""
    c = cluster(tb_service_enabled=False)
    topic = f"kept_{uid}"
    c.client.create_topic(topic, 3)
    producer = c.client.create_producer(topic)
    with c.client.transaction(30) as txn:
        for i in range(30):
            producer.send_async(b"%08d" % i, txn=txn)
    producer.flush()
    assert c.client._appender()._last_sent == {}
