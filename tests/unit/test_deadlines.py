"""DeadlineWatch: the one thread that ends callback-driven work (asynchronous transaction ends) whose
deadline passed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pulsar_txn._deadlines import DeadlineWatch


@pytest.fixture
def watch() -> Iterator[DeadlineWatch]:
    w = DeadlineWatch("test-deadlines", step_s=0.02)
    yield w
    w.close()


def test_an_expired_entry_is_called_once_and_a_cancelled_one_never(watch: DeadlineWatch) -> None:
    called: list[str] = []
    fired = threading.Event()

    def expired() -> None:
        called.append("expired")
        fired.set()

    cancelled = watch.add(time.monotonic() + 0.05, lambda: called.append("cancelled"))
    watch.add(time.monotonic() + 0.05, expired)
    watch.cancel(cancelled)
    assert fired.wait(5)
    time.sleep(0.1)  # a second pass must not call it again
    assert called == ["expired"]


def test_wait_idle_returns_once_every_entry_ended_and_times_out_while_one_is_watched(
    watch: DeadlineWatch,
) -> None:
    key = watch.add(time.monotonic() + 60, lambda: None)
    assert not watch.wait_idle(0.1)
    threading.Timer(0.05, watch.cancel, args=(key,)).start()
    assert watch.wait_idle(5)


def test_a_failing_callback_does_not_stop_the_others(watch: DeadlineWatch) -> None:
    fired = threading.Event()

    def boom() -> None:
        raise RuntimeError("a bug in one callback")

    watch.add(time.monotonic(), boom)
    watch.add(time.monotonic(), fired.set)
    assert fired.wait(5)


def test_the_watch_sleeps_until_something_is_added_again(watch: DeadlineWatch) -> None:
    fired = threading.Event()
    watch.cancel(watch.add(time.monotonic() + 60, lambda: None))  # the thread started, then idle
    time.sleep(0.1)
    watch.add(time.monotonic(), fired.set)  # must wake it
    assert fired.wait(5)
