"""pulsar-client's message and reader listeners: a thread per consumer (or reader) that receives and
calls the application's ``listener(consumer, message)`` for each message, as pulsar-client's
listener threads do. An exception in the listener is logged and the next message follows (the
message stays unacknowledged, so ack timeouts and negative acks work as with pulsar-client)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pulsar_txn.errors import AlreadyClosed, PulsarTxnError, Timeout

log = logging.getLogger(__name__)

_POLL_MS = 200  # how long one receive waits: bounds how late pause and close take effect
_in_callback = threading.local()  # set on a dispatch thread while it runs an application's listener


class ListenerDispatch:
    """pulsar-client's ``message_listener_threads``: the threads a client's listener callbacks run
    on (one by default, so callbacks of different consumers never run at the same time). Each
    consumer's or reader's thread receives, hands the call over and waits for it, so one consumer's
    messages still come one at a time and in order."""

    def __init__(self, threads: int = 1) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[Any], None], message: Any) -> None:
        with self._lock:
            if self._pool is None:  # threads only once a listener exists
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="pulsar-listener-call")
            pool = self._pool
        pool.submit(_run_callback, fn, message).result()

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _run_callback(fn: Callable[[Any], None], message: Any) -> None:
    _in_callback.active = True
    try:
        fn(message)
    finally:
        _in_callback.active = False


class ListenerThread:
    """Calls ``deliver(message)`` for each message ``receive(timeout_ms)`` returns, until stopped."""

    def __init__(
        self,
        name: str,
        receive: Callable[[int], Any],
        deliver: Callable[[Any], None],
        dispatch: ListenerDispatch | None = None,
    ) -> None:
        self._receive = receive
        self._deliver = deliver
        self._dispatch = dispatch
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._thread = threading.Thread(target=self._run, name=f"pulsar-listener-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def pause(self) -> None:
        """No more calls until ``resume`` (a call under way finishes)."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._running.set()
        # Not from a listener callback (e.g. one that closes its consumer): the thread waits for
        # that very call to return.
        inside = threading.current_thread() is self._thread or getattr(_in_callback, "active", False)
        if self._thread.is_alive() and not inside:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._running.wait(_POLL_MS / 1000):
                continue
            try:
                message = self._receive(_POLL_MS)
            except Timeout:
                continue
            except AlreadyClosed:
                return  # closed under it (e.g. by the client's close): nothing more will come
            except PulsarTxnError as exc:
                if self._stop.is_set():
                    return
                log.warning("listener %s: receive failed (retrying): %s", self._thread.name, exc)
                self._stop.wait(0.5)
                continue
            # Paused (or stopped) while the receive waited: no call until resumed, none after stop
            # (the message stays unacknowledged: it comes back to a later consumer).
            while not self._running.is_set() and not self._stop.is_set():
                self._running.wait(_POLL_MS / 1000)
            if self._stop.is_set():
                return
            try:
                if self._dispatch is None:
                    self._deliver(message)
                else:
                    self._dispatch.call(self._deliver, message)
            except Exception:  # the application's code: log it, go on (pulsar-client does the same)
                log.exception("listener %s raised; the message stays unacknowledged", self._thread.name)
