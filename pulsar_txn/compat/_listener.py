"""pulsar-client's message and reader listeners: a thread per consumer (or reader) that receives and
calls the application's ``listener(consumer, message)`` for each message, as pulsar-client's
listener threads do. An exception in the listener is logged and the next message follows (the
message stays unacknowledged, so ack timeouts and negative acks work as with pulsar-client)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pulsar_txn.errors import AlreadyClosed, PulsarTxnError, Timeout

log = logging.getLogger(__name__)

_POLL_MS = 200  # how long one receive waits: bounds how late pause and close take effect


class ListenerThread:
    """Calls ``deliver(message)`` for each message ``receive(timeout_ms)`` returns, until stopped."""

    def __init__(self, name: str, receive: Callable[[int], Any], deliver: Callable[[Any], None]) -> None:
        self._receive = receive
        self._deliver = deliver
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
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
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
                self._deliver(message)
            except Exception:  # the application's code: log it, go on (pulsar-client does the same)
                log.exception("listener %s raised; the message stays unacknowledged", self._thread.name)
