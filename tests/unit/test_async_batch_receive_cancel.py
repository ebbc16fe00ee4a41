"""A cancelled ``AsyncConsumer.batch_receive`` (e.g. under ``asyncio.wait_for``) loses nothing: what
the consumer handed out meanwhile comes with the next call, as for a cancelled ``receive``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pulsar_txn.asyncio import AsyncConsumer, _Pool


class _SlowSync:
    """The slice of a Consumer that batch_receive uses: a poll that takes a while, then hands out."""

    subscription = "s"

    def __init__(self) -> None:
        self.handed_out: list[str] = []
        self.queue = [f"m{i}" for i in range(10)]

    def batch_receive(self, n: int, _timeout_ms: int) -> list[str]:
        time.sleep(0.2)
        out, self.queue = self.queue[:n], self.queue[n:]
        self.handed_out += out
        return out


def test_a_cancelled_batch_receive_hands_its_messages_to_the_next_call() -> None:
    async def main() -> tuple[list[str], list[Any]]:
        sync = _SlowSync()
        consumer: AsyncConsumer[Any] = AsyncConsumer(sync, _Pool(2))  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(consumer.batch_receive(5, 1000), 0.05)
        except TimeoutError:
            pass
        await asyncio.sleep(0.4)  # the pool's call completes meanwhile
        got = await consumer.batch_receive(5, 1000)
        return sync.handed_out, got

    handed_out, got = asyncio.run(main())
    assert handed_out == [f"m{i}" for i in range(5)]
    assert got == handed_out
