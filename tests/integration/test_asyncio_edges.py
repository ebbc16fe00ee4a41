"""The asyncio client at its edges: ending a transaction while the caller is cancelled or the
wrapper closed, closing consumers and producers of a wrapped client, keeping the event loop free of
blocking calls, and the same typed errors and zero-wait reads as the sync API."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pulsar_txn import ConfigError, PulsarTxnError, TransactionState
from pulsar_txn.asyncio import AsyncClient, AsyncTransaction
from tests.conftest import Cluster

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def test_a_transaction_ends_even_when_its_async_with_exit_is_cancelled_with_the_pool_busy(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_exit_busy_{uid}"
    c.client.create_topic(topic, 1)
    began: list[AsyncTransaction] = []

    async def main() -> None:
        async with AsyncClient(c.client, max_workers=1) as client:
            producer = await client.create_producer(topic)
            exiting = asyncio.Event()
            busy: list[asyncio.Future[None]] = []

            async def block() -> None:
                async with client.transaction(60) as txn:
                    began.append(txn)
                    await producer.send(b"x", txn=txn)
                    # another task's blocking call holds the pool's only worker for 2 s
                    busy.append(asyncio.ensure_future(client._pool.run(time.sleep, 2.0)))
                    await asyncio.sleep(0.05)
                    exiting.set()
                # the block succeeded: __aexit__ commits here

            task = asyncio.create_task(block())
            await asyncio.wait_for(exiting.wait(), 30)
            await asyncio.sleep(0.05)
            task.cancel()  # during the exit (e.g. the caller's timeout): the commit must go on
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await busy[0]

    asyncio.run(main())
    deadline = time.monotonic() + 10
    while began[0].state is not TransactionState.COMMITTED:
        assert time.monotonic() < deadline, f"left {began[0].state} (it holds its partition until timed out)"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["exception", "cancel"])
def test_the_blocks_exception_survives_a_closed_wrapper_and_the_transaction_is_aborted(
    cluster: ClusterFactory, uid: str, how: str
) -> None:
    c = cluster()
    began: list[AsyncTransaction] = []

    async def body(client: AsyncClient, started: asyncio.Event) -> None:
        async with client.transaction(60) as txn:
            began.append(txn)
            started.set()
            await asyncio.sleep(0.3 if how == "exception" else 30)
            raise ValueError("boom")

    async def main() -> tuple[BaseException | None, bool]:
        client = AsyncClient(c.client)  # a wrapper: the sync client stays open when it closes
        started = asyncio.Event()
        task = asyncio.create_task(body(client, started))
        await started.wait()
        await client.close()
        if how == "cancel":
            task.cancel()
        try:
            await task
        except BaseException as exc:  # the test inspects what the block raised
            return exc, task.cancelled()
        return None, False

    raised, cancelled = asyncio.run(main())
    if how == "exception":
        assert isinstance(raised, ValueError), repr(raised)
    else:
        assert cancelled, repr(raised)
    assert began[0].state is TransactionState.ABORTED


def test_consumers_and_producers_of_a_wrapped_client_really_close_after_the_wrapper(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_wrapped_close_{uid}"
    c.client.create_topic(topic, 1)
    made: dict[str, Any] = {}

    async def main() -> None:
        client = AsyncClient(c.client)
        made["producer"] = await client.create_producer(topic)
        async with await client.subscribe(topic, f"s_{uid}", initial_position="Earliest") as consumer:
            made["consumer"] = consumer
            await client.close()
        await made["producer"].close()

    asyncio.run(main())
    assert made["producer"].sync.closed
    # The Exclusive subscription is free again (it was held by the "closed" consumer).
    c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest", subscribe_timeout=5).close()


def test_the_producers_partition_refresh_never_runs_on_the_event_loop(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_refresh_{uid}"
    c.client.create_topic(topic, 1)
    on_loop: list[bool] = []

    async def main() -> None:
        async with AsyncClient(c.client) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"a")
            admin = client.sync._admin
            real = admin.partition_count
            loop_thread = threading.current_thread()

            def spy(name: str) -> int:
                on_loop.append(threading.current_thread() is loop_thread)
                return real(name)

            admin.partition_count = spy  # type: ignore[method-assign]
            producer.sync._partitions_due = 0.0  # as 60 s later
            await producer.send(b"b")

    asyncio.run(main())
    assert on_loop == [False]


def test_async_read_next_zero_takes_a_ready_message_as_the_sync_one(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"aio_read0_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send(b"m0")

    async def main() -> bytes:
        async with AsyncClient(c.client) as client:
            reader = await client.create_reader(topic)
            assert (await reader.read_next(5000)).data() == b"m0"
            producer.send(b"m1")
            await asyncio.sleep(1.0)  # the reader's fetch has it by now
            return (await reader.read_next(0)).data()

    assert asyncio.run(main()) == b"m1"


@pytest.mark.parametrize("bad", [math.nan, math.inf, "100", -1])
def test_bad_waits_and_arguments_are_config_errors_as_in_the_sync_api(
    cluster: ClusterFactory, uid: str, bad: object
) -> None:
    c = cluster()
    topic = f"aio_bad_{uid}"
    c.client.create_topic(topic, 1)

    async def main() -> list[str]:
        refused = []
        async with AsyncClient(c.client) as client:
            consumer = await client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
            reader = await client.create_reader(topic)
            calls: list[Callable[[], Any]] = [
                lambda: consumer.receive(bad),  # type: ignore[arg-type]
                lambda: consumer.batch_receive(10, bad),  # type: ignore[arg-type]
                lambda: reader.read_next(bad),  # type: ignore[arg-type]
                lambda: client.new_transaction().with_transaction_timeout(bad).build(),  # type: ignore[arg-type]
                lambda: client.transaction(bad),  # type: ignore[arg-type]
                lambda: client.create_producer(topic, schema=bad),  # type: ignore[call-overload]
            ]
            for call in calls:
                try:
                    await asyncio.wait_for(call(), 3)
                except ConfigError:
                    refused.append("ConfigError")
                except (PulsarTxnError, TimeoutError) as exc:
                    refused.append(type(exc).__name__)
                else:
                    refused.append("accepted")
        return refused

    assert asyncio.run(main()) == ["ConfigError"] * 6
