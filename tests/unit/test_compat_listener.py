"""The compat listener thread: a pause (or close) made while a receive waits holds the message that
receive returns; it is delivered only after ``resume`` (never after close)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

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


@pytest.mark.parametrize("moved", [True, False])
def test_a_slice_left_by_a_cancelled_async_receive_is_dropped_by_a_seek_that_moves_its_partition(
    moved: bool,
) -> None:
    """pulsar_txn.compat.asyncio: a cancelled receive leaves its slice for the next call (nothing is
    lost); a seek first lets that slice end, then drops its message if the seek moved its partition
    (it is read again from the new position), and keeps it for the next call otherwise."""
    import asyncio

    from kafka_store import StoredRecord
    from pulsar_txn.compat import MessageId as CompatMessageId
    from pulsar_txn.compat._ids import Message as CompatMessage
    from pulsar_txn.compat.asyncio import _Waiter
    from pulsar_txn.message import Message, MessageId

    def message(text: bytes) -> CompatMessage[Any]:
        return CompatMessage(Message.from_record(StoredRecord("t", 0, 7, None, text, (), 0)))

    calls: list[str] = []

    def next_message(_timeout_ms: int) -> Any:
        calls.append("slice")
        if len(calls) == 1:
            time.sleep(0.2)
            return message(b"before-seek")
        return message(b"after-seek")

    async def main() -> bytes:
        waiter = _Waiter(next_message)
        task = asyncio.ensure_future(waiter.next())
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        target = CompatMessageId.wrap(MessageId("t", 0 if moved else 1, 0))
        await waiter.seek(target, lambda _mid: None)
        return (await waiter.next()).data()

    assert asyncio.run(main()) == (b"after-seek" if moved else b"before-seek")
