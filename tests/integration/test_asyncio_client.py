"""The asyncio client against the real broker: transactions as async context managers, awaited
sends and receives, and an event loop that keeps running while the sync core blocks."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest

from pulsar_txn import (
    AvroSchema,
    MessageId,
    NotAllowedError,
    Result,
    Timeout,
    TopicDeleted,
    TopicNotFound,
    TransactionState,
)
from pulsar_txn.asyncio import AsyncClient
from tests.conftest import Cluster, read_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


@dataclasses.dataclass
class Event:
    n: int
    text: str


def test_async_transaction_commits_on_success_and_aborts_on_an_exception(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_txn_{uid}"

    async def main() -> list[Event]:
        async with AsyncClient(
            c.client.service_url,
            kafka=c.client.kafka,
            num_tcs=c.config.num_tcs,
            snapshot_topic=c.config.snapshot_topic,
            operation_timeout_seconds=30,
        ) as client:
            await client.create_topic(topic, 2)
            producer = await client.create_producer(topic, schema=AvroSchema(Event))
            async with client.transaction(timeout=30) as txn:
                futures = [await producer.send_async(Event(i, "c"), txn=txn) for i in range(50)]
                await asyncio.gather(*futures)
            assert txn.state is TransactionState.COMMITTED
            with pytest.raises(RuntimeError):
                async with client.transaction(timeout=30) as failed:
                    await producer.send(Event(99, "a"), txn=failed)
                    raise RuntimeError("boom")
            assert failed.state is TransactionState.ABORTED
            consumer = await client.subscribe(
                topic, f"sub_{uid}", initial_position="Earliest", schema=AvroSchema(Event)
            )
            got = [(await consumer.receive(5000)).value() for _ in range(50)]
            with pytest.raises(Timeout):
                await consumer.receive(800)
            return got

    got = asyncio.run(main())
    assert sorted(e.n for e in got) == list(range(50)) and {e.text for e in got} == {"c"}


def test_async_consume_process_produce_acks_in_the_transaction_and_abort_redelivers(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    src, dst = f"aio_src_{uid}", f"aio_dst_{uid}"

    async def main() -> None:
        async with AsyncClient(c.client) as client:
            await _pipeline(client)

    async def _pipeline(client: AsyncClient) -> None:
        await client.create_topic(src, 1)
        await client.create_topic(dst, 1)
        source = await client.create_producer(src)
        for i in range(3):
            await source.send(f"m{i}".encode())
        sink = await client.create_producer(dst)
        consumer = await client.subscribe(src, f"sub_{uid}", initial_position="Earliest")
        first = await consumer.receive(5000)
        aborted = await client.new_transaction().with_transaction_timeout(30).build()
        await sink.send(first.data().upper(), txn=aborted)
        await consumer.acknowledge(first, txn=aborted)
        await aborted.abort()
        for _ in range(3):
            msg = await consumer.receive(5000)
            txn = await client.transaction(30)
            await sink.send(msg.data().upper(), txn=txn)
            await consumer.acknowledge(msg, txn=txn)
            await txn.commit()
        with pytest.raises(Timeout):
            await consumer.receive(800)
        await consumer.close()

    asyncio.run(main())
    assert sorted(m.data() for m in read_all(c.client.create_reader(dst))) == [b"M0", b"M1", b"M2"]

    async def delete() -> TopicDeleted:
        async with AsyncClient(c.client) as client:
            return await client.delete_topic(src)

    assert asyncio.run(delete()).subscriptions == (f"sub_{uid}",)
    with pytest.raises(TopicNotFound):
        c.client.delete_topic(src)


def test_the_event_loop_keeps_running_while_receive_waits_and_a_cancelled_receive_loses_nothing(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_loop_{uid}"

    async def main() -> tuple[int, bytes]:
        async with AsyncClient(c.client, max_workers=2) as client:
            return await _run(client)

    async def _run(client: AsyncClient) -> tuple[int, bytes]:
        await client.create_topic(topic, 1)
        consumer = await client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        with pytest.raises(Timeout):
            await consumer.receive(1500)  # nothing there: waits in the pool, not on the loop
        counted = ticks
        waiting = asyncio.create_task(consumer.receive())
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        producer = await client.create_producer(topic)
        await producer.send(b"after-cancel")
        msg = await consumer.receive(5000)
        tick_task.cancel()
        return counted, msg.data()

    counted, data = asyncio.run(main())
    # A blocked loop would count ~0 ticks in 1.5 s; even a busy machine runs dozens.
    assert counted >= 20
    assert data == b"after-cancel"


def test_a_cancelled_read_next_loses_no_message(cluster: ClusterFactory, uid: str) -> None:
    """``wait_for(reader.read_next(), t)`` timing out cancels the read while its poll goes on in the
    pool: a message that arrives then is the next read's, in order (before, it was dropped)."""
    c = cluster()
    topic = f"aio_read_cancel_{uid}"

    async def main() -> list[bytes]:
        async with AsyncClient(c.client, max_workers=2) as client:
            await client.create_topic(topic, 1)
            reader = await client.create_reader(topic)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read_next(), 1.0)
            producer = await client.create_producer(topic)
            for i in range(3):
                await producer.send(f"m{i}".encode())
            got = [(await reader.read_next(10_000)).data() for _ in range(3)]
            with pytest.raises(Timeout):
                await reader.read_next(300)
            await reader.close()
            return got

    assert asyncio.run(main()) == [b"m0", b"m1", b"m2"]


def test_after_the_async_client_closed_its_objects_refuse_with_not_allowed_and_close_quietly(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_closed_{uid}"

    async def main() -> None:
        client = AsyncClient(c.client, max_workers=2)
        await client.create_topic(topic, 1)
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
        reader = await client.create_reader(topic)
        await client.close()
        for call in (producer.flush, consumer.receive, lambda: reader.read_next(100)):
            with pytest.raises(NotAllowedError, match="closed"):
                await call()
        with pytest.raises(NotAllowedError, match="closed"):
            await client.new_transaction().build()
        for obj in (producer, consumer, reader):
            await obj.close()  # no RuntimeError from a pool that is gone

    asyncio.run(main())


def test_async_handle_commits_a_transaction_by_its_id(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"aio_byid_{uid}"
    c.client.create_topic(topic, 1)
    txn = c.client.transaction(60)
    c.client.create_producer(topic).send(b"x", txn=txn)

    async def main() -> TransactionState:
        async with AsyncClient(c.client) as client:
            handle = client.resume_transaction(str(txn.txn_id))
            await handle.commit()
            return handle.state

    assert asyncio.run(main()) is TransactionState.COMMITTED
    assert [m.data() for m in read_all(c.client.create_reader(topic))] == [b"x"]


def test_async_send_async_takes_a_callback_as_the_sync_one_does(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"aio_cb_{uid}"
    c.client.create_topic(topic, 1)
    seen: list[tuple[object, object]] = []

    async def main() -> MessageId:
        async with AsyncClient(c.client) as client:
            producer = await client.create_producer(topic)
            return await (await producer.send_async(b"x", lambda res, mid: seen.append((res, mid))))

    mid = asyncio.run(main())
    assert wait_until(lambda: seen, 10, what="the callback") == [(Result.Ok, mid)]
