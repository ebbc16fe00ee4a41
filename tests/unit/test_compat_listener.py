"""The compat listener thread: a pause (or close) made while a receive waits holds the message that
receive returns; it is delivered only after ``resume`` (never after close)."""

from __future__ import annotations

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
