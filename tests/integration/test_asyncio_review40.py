"""asyncio client review, session 40: a wrapper's close never leaves a transaction open, and an async
producer works from any event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from pulsar_txn.asyncio import AsyncClient, AsyncProducer, AsyncTransaction
from pulsar_txn.transaction import TransactionState
from tests.conftest import Cluster, read_all

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("how", ["success", "exception"])
def test_an_end_queued_when_a_wrapper_closes_still_ends_the_transaction(
    cluster: Callable[..., Cluster], uid: str, how: str
) -> None:
    """The block's commit (or abort) waits behind a busy worker when the wrapper closes: the close
    cancelled it, and the transaction stayed OPEN until its timeout."""
    c = cluster()
    topic = f"aioclose_{uid}"
    c.client.create_topic(topic, 1)
    began: list[AsyncTransaction] = []

    async def main() -> None:
        client = AsyncClient(c.client, max_workers=1)
        producer = await client.create_producer(topic)
        exiting = asyncio.Event()
        busy: list[asyncio.Future[None]] = []

        async def block() -> None:
            async with client.transaction(60) as txn:
                began.append(txn)
                await producer.send(b"x", txn=txn)
                busy.append(asyncio.ensure_future(client._pool.run(time.sleep, 1.0)))  # the only worker
                await asyncio.sleep(0.05)
                exiting.set()
                if how == "exception":
                    raise ValueError("boom")

        task = asyncio.create_task(block())
        await exiting.wait()
        await asyncio.sleep(0.05)  # __aexit__ has queued its end behind the busy worker
        await client.close()
        with pytest.raises(ValueError) if how == "exception" else _nothing():
            await task
        await asyncio.gather(*busy, return_exceptions=True)

    asyncio.run(main())
    assert began[0].state is (TransactionState.COMMITTED if how == "success" else TransactionState.ABORTED)
    values = [m.data() for m in read_all(c.client.create_reader(topic))]
    assert values == ([b"x"] if how == "success" else [])


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_an_async_producer_keeps_its_places_across_event_loops(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """Sends left in flight when a loop ended gave their places back through that (closed) loop: lost
    for good, every later send timed out; a full producer used from another loop raised a raw
    RuntimeError (the asyncio semaphore is bound to a loop)."""
    c = cluster()
    topic = f"aioloops_{uid}"
    c.client.create_topic(topic, 1)
    client = AsyncClient(c.client)
    held: dict[str, AsyncProducer[bytes | str]] = {}

    async def first() -> None:
        held["p"] = await client.create_producer(topic, max_pending_messages=2)
        await held["p"].send(b"warm")
        for i in range(2):
            await held["p"].send_async(b"x%d" % i)  # not awaited: still in flight when the loop ends

    async def second() -> None:
        await asyncio.gather(*(held["p"].send(b"s%d" % i) for i in range(4)))  # contended places

    asyncio.run(first())
    asyncio.run(asyncio.wait_for(second(), 30))
    stored = [m.data() for m in read_all(c.client.create_reader(topic))]
    assert stored[:3] == [b"warm", b"x0", b"x1"] and sorted(stored[3:]) == [b"s0", b"s1", b"s2", b"s3"]
