"""The asyncio client when callers cancel, time out or close: nothing stored is lost or reordered,
the event loop never blocks, and errors stay typed (found by a review of session 23; each test
failed before its fix)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import pytest

from pulsar_txn import NotAllowedError, TransactionState
from pulsar_txn.asyncio import AsyncClient, AsyncConsumer
from pulsar_txn.errors import PulsarTxnError
from tests.conftest import Cluster, LoopStalls

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _async_client(c: Cluster, **extra: object) -> AsyncClient:
    return AsyncClient(
        c.client.service_url,
        kafka=c.client.kafka,
        num_tcs=c.config.num_tcs,
        snapshot_topic=c.config.snapshot_topic,
        log_topic=c.config.log_topic,
        operation_timeout_seconds=5,
        **extra,
    )


def test_a_cancelled_async_send_is_still_part_of_its_committing_transaction(
    cluster: ClusterFactory, uid: str
) -> None:
    """Cancelling the awaited future of a send (a task cancel, ``asyncio.timeout``) stops the
    caller's wait, not the send: the message is stored and the commit goes through at once. (The
    cancel used to reach the core's send future; its delivery report then failed on the Kafka poll
    thread, the transaction waited out the operation timeout and aborted.)"""
    c = cluster()
    topic = f"aio_cancel_send_{uid}"
    c.client.create_topic(topic, 1)

    async def main() -> float:
        async with _async_client(c) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"warm-up")
            txn = await client.transaction(30)
            fut = await producer.send_async(b"x", txn=txn)
            fut.cancel()
            await asyncio.sleep(0.5)
            started = time.monotonic()
            await txn.commit()
            assert txn.state is TransactionState.COMMITTED
            return time.monotonic() - started

    assert asyncio.run(main()) < 2.0
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    assert [consumer.receive(5000).data for _ in range(2)] == [b"warm-up", b"x"]


def test_a_cancelled_send_leaves_the_clients_delivery_reports_flowing(
    cluster: ClusterFactory, uid: str
) -> None:
    """After a cancelled send, later sends are still confirmed and close() raises nothing (the
    Kafka poll thread used to die on the cancelled future's report)."""
    c = cluster()
    topic = f"aio_cancel_flow_{uid}"
    c.client.create_topic(topic, 1)

    async def main() -> None:
        client = _async_client(c)
        producer = await client.create_producer(topic)
        await producer.send(b"warm-up")
        fut = await producer.send_async(b"cancelled")
        fut.cancel()
        await asyncio.sleep(0.5)
        await producer.send(b"after")
        await client.close()

    asyncio.run(main())


def test_a_sync_send_future_cannot_be_cancelled(cluster: ClusterFactory, uid: str) -> None:
    """The sync API's send future, like a running concurrent.futures.Future: ``cancel()`` is False
    and the future ends with the MessageId; the transaction commits."""
    c = cluster()
    topic = f"cancel_sync_send_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with c.client.transaction(30) as txn:
        fut = producer.send_async(b"x", txn=txn)
        assert fut.cancel() is False
    assert fut.result(5).offset >= 0
    assert txn.state is TransactionState.COMMITTED


def test_async_receive_zero_takes_a_message_that_is_ready_like_the_sync_one(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_recv0_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}".encode())

    async def main() -> bytes:
        async with AsyncClient(c.client) as client:
            consumer = await client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
            assert (await consumer.receive(5000)).data == b"m0"
            return (await consumer.receive(0)).data

    assert asyncio.run(main()) == b"m1"


def test_a_cancelled_async_receive_does_not_reorder_the_subscription(
    cluster: ClusterFactory, uid: str
) -> None:
    """A receive cancelled while its poll waits for a worker of the (busy) pool: that poll still
    takes m0, and the next receive hands out m0 before polling again (it used to poll on its own
    and return m1 first)."""
    c = cluster()
    topic = f"aio_order_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}".encode())

    async def main() -> list[bytes]:
        async with AsyncClient(c.client, max_workers=1) as client:
            consumer = await client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
            # A blocking call of another task holds the only worker ~1 s (batch_receive polls in
            # short slices and would not).
            busy = asyncio.create_task(client._pool.run(time.sleep, 1.0))
            await asyncio.sleep(0.1)
            first = asyncio.create_task(consumer.receive(5000))
            await asyncio.sleep(0.1)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            got = [(await consumer.receive(5000)).data for _ in range(4)]
            await busy
            return got

    assert asyncio.run(main()) == [b"m0", b"m1", b"m2", b"m3"]


def test_closing_the_async_client_fails_other_tasks_calls_with_not_allowed(
    cluster: ClusterFactory, uid: str
) -> None:
    """Calls of other tasks queued in the pool when the client closes end with the typed
    ``NotAllowedError("client is closed")``, not with a CancelledError nobody asked for."""
    c = cluster()
    topics = [f"aio_close{i}_{uid}" for i in range(3)]
    for topic in topics:
        c.client.create_topic(topic, 1)

    async def main() -> list[BaseException | None]:
        client = AsyncClient(c.client, max_workers=1)
        consumers = [await client.subscribe(t, f"s_{t}", initial_position="Earliest") for t in topics]

        async def receive_forever(consumer: AsyncConsumer[bytes]) -> None:
            while True:
                await consumer.receive()

        tasks = [asyncio.create_task(receive_forever(k)) for k in consumers]
        await asyncio.sleep(0.5)
        await client.close()
        return list(await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10))

    outcomes = asyncio.run(main())
    assert all(isinstance(o, NotAllowedError) for o in outcomes), outcomes


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_committing_a_resumed_transaction_never_blocks_the_event_loop(kafka: object) -> None:
    """A handle resumed on a fresh client opens the coordinator connection on its first end; that
    happens in the pool. Here no coordinator answers: the commit fails with a typed error after
    the operation timeout while the loop keeps ticking (it used to stall for all 3 s)."""

    async def main() -> tuple[float, BaseException | None]:
        client = AsyncClient(
            f"pulsar://127.0.0.1:{_dead_port()}", kafka=kafka, num_tcs=4, operation_timeout_seconds=3
        )
        stalls = LoopStalls()
        await asyncio.sleep(0.05)
        error: BaseException | None = None
        try:
            await client.resume_transaction("(0,1)").commit()
        except PulsarTxnError as exc:
            error = exc
        worst = stalls.stop()
        await client.close()
        return worst, error

    worst, error = asyncio.run(main())
    assert isinstance(error, PulsarTxnError) and error.retriable, repr(error)
    # Blocking, the loop stalls for the whole 3 s timeout; 1 s leaves room for a loaded machine.
    assert worst < 1.0, f"the event loop stalled for {worst:.2f} s"


def test_a_transaction_begun_for_a_cancelled_caller_is_aborted_not_left_open(
    cluster: ClusterFactory, uid: str
) -> None:
    """``async with client.transaction()`` cancelled while NEW_TXN is under way: the transaction
    that opens after all is aborted at once (it used to stay open until the coordinator's timeout)."""
    c = cluster()
    begun: list[object] = []

    async def main() -> None:
        async with AsyncClient(c.client, max_workers=1) as client:
            real_transaction = client.sync.transaction

            def slow_transaction(timeout: float) -> object:
                time.sleep(0.3)  # the caller is cancelled meanwhile
                txn = real_transaction(timeout)
                begun.append(txn)
                return txn

            client.sync.transaction = slow_transaction  # type: ignore[method-assign]
            task = asyncio.create_task(client.transaction(60).__aenter__())
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(1.0)

    asyncio.run(main())
    (txn,) = begun
    assert txn.state is TransactionState.ABORTED  # type: ignore[attr-defined]


def test_the_async_consumer_offers_the_sync_consumers_redelivery_and_stats(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_redeliver_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())

    async def main() -> list[int]:
        async with AsyncClient(c.client) as client:
            consumer = await client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
            first = [await consumer.receive(5000) for _ in range(3)]
            assert consumer.assigned_partitions() == [(topic, 0)]
            assert consumer.stats()["unacked"] == 3 and consumer.pending_transactions() == {}
            await consumer.redeliver_unacknowledged_messages()
            again = [await consumer.receive(5000) for _ in range(3)]
            assert [m.data for m in again] == [m.data for m in first]
            return [m.redelivery_count for m in again]

    assert asyncio.run(main()) == [1, 1, 1]
