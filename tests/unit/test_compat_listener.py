"""The compat listener thread: a pause (or close) made while a receive waits holds the message that
receive returns; it is delivered only after ``resume`` (never after close)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from pulsar_txn.compat._listener import ListenerThread
from pulsar_txn.errors import Timeout


def _slow_source(first_wait_s: float) -> tuple[Any, threading.Event]:
    """A receive that waits ``first_wait_s`` and then returns one message (later calls time out)."""
    entered = threading.Event()
    given = [False]

    def receive(timeout_ms: int) -> Any:
        if given[0]:
            time.sleep(timeout_ms / 1000)
            raise Timeout("nothing")
        entered.set()
        time.sleep(first_wait_s)
        given[0] = True
        return "m0"

    return receive, entered


def test_a_message_received_while_paused_waits_for_resume() -> None:
    receive, entered = _slow_source(0.3)
    delivered: list[Any] = []
    listener = ListenerThread("t", receive, delivered.append)
    listener.start()
    try:
        assert entered.wait(5)
        listener.pause()  # while the receive waits
        time.sleep(0.6)
        assert delivered == []
        listener.resume()
        deadline = time.monotonic() + 5
        while not delivered and time.monotonic() < deadline:
            time.sleep(0.01)
        assert delivered == ["m0"]
    finally:
        listener.stop()


def test_a_message_received_while_stopping_is_not_delivered() -> None:
    receive, entered = _slow_source(0.3)
    delivered: list[Any] = []
    listener = ListenerThread("t", receive, delivered.append)
    listener.start()
    assert entered.wait(5)
    listener.pause()
    listener.stop()
    assert delivered == []


def test_a_slice_left_by_a_cancelled_async_receive_is_dropped_by_a_seek() -> None:
    """pulsar_txn.compat.asyncio: a cancelled receive leaves its slice for the next call (nothing is
    lost); a seek first lets that slice end and drops its message, which is from before the seek."""
    import asyncio

    from pulsar_txn.compat.asyncio import _Waiter

    calls: list[str] = []

    def next_message(_timeout_ms: int) -> Any:
        calls.append("slice")
        if len(calls) == 1:
            time.sleep(0.2)
            return "before-seek"
        return "after-seek"

    async def main() -> Any:
        waiter = _Waiter(next_message)
        task = asyncio.ensure_future(waiter.next())
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await waiter.discard()  # what seek does first
        return await waiter.next()

    assert asyncio.run(main()) == "after-seek"
