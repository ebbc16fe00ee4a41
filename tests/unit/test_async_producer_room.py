"""``max_pending_messages`` bounds the sends in flight of an async producer, also when many tasks
send at once; a place comes back when its send is stored or fails."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from pulsar_txn.asyncio import AsyncProducer, _Pool


class _Sends:
    """A sync producer stand-in whose sends complete when the test says so."""

    topic = "t"
    producer_name = "p"

    def __init__(self) -> None:
        self.started: list[Future[Any]] = []

    def _refresh_due(self) -> bool:
        return False

    def send_async(self, _content: object, _callback: object = None, **_kw: object) -> Future[Any]:
        fut: Future[Any] = Future()
        self.started.append(fut)
        return fut


def test_concurrent_tasks_never_have_more_sends_in_flight_than_max_pending_messages() -> None:
    async def main() -> list[int]:
        pool = _Pool(1)
        sends = _Sends()
        producer: AsyncProducer[bytes] = AsyncProducer(sends, pool, 5.0, 2)  # type: ignore[arg-type]
        tasks = [asyncio.create_task(producer.send_async(b"x")) for _ in range(6)]
        seen = []
        for _ in range(3):
            await asyncio.sleep(0.05)
            seen.append(sum(not f.done() for f in sends.started))
            for f in [f for f in sends.started if not f.done()][:1]:
                f.set_result(None)  # one stored: one more may start
        await asyncio.sleep(0.05)
        for f in sends.started:
            if not f.done():
                f.set_exception(RuntimeError("failed"))  # a failed send gives its place back too
        await asyncio.sleep(0.05)
        for f in sends.started:
            if not f.done():
                f.set_result(None)
        outcomes = await asyncio.gather(*tasks)
        await asyncio.gather(*outcomes, return_exceptions=True)  # retrieved: no "never retrieved" noise
        pool.shutdown()
        seen.append(len(sends.started))
        return seen

    assert asyncio.run(main()) == [2, 2, 2, 6]
