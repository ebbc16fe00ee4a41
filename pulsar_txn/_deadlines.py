"""One thread that enforces the deadlines of work finished by callbacks.

An asynchronous transaction end (``commit_async``) is a chain of callbacks on the threads that
complete its operations; no thread waits for it, so nothing would notice if an operation never
ended. Each such end registers here with its deadline and a callback that ends it with ``Timeout``.
The thread checks a few times a second; registering never wakes it unless it sleeps with nothing
to watch, so a busy client pays a dict insert and removal per end, not a thread wake-up.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable

from kafka_store import mark_callback_thread

__all__ = ["DeadlineWatch"]

log = logging.getLogger(__name__)

_STEP_S = 0.25


class DeadlineWatch:
    """Calls each registered callback once its deadline (``time.monotonic``) has passed, unless it
    was cancelled first. Callbacks run on the watch's thread and must be quick."""

    def __init__(self, name: str, step_s: float = _STEP_S) -> None:
        self._name = name
        self._step = step_s
        self._cond = threading.Condition()
        self._entries: dict[int, tuple[float, Callable[[], None]]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def add(self, deadline: float, on_expiry: Callable[[], None]) -> int:
        """Watch ``deadline``; returns the key for ``cancel``."""
        with self._cond:
            key = next(self._ids)
            self._entries[key] = (deadline, on_expiry)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif len(self._entries) == 1:
                self._cond.notify_all()  # it sleeps without a timeout while nothing is watched
        return key

    def cancel(self, key: int) -> None:
        """Stop watching (the work ended in time); a no-op for an expired or unknown key."""
        with self._cond:
            if self._entries.pop(key, None) is not None and not self._entries:
                self._cond.notify_all()  # wakes wait_idle

    def wait_idle(self, timeout: float) -> bool:
        """Until nothing is watched (every registered piece of work ended), at most ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._entries, timeout)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(2 * self._step + 1)

    def _run(self) -> None:
        mark_callback_thread()  # expiry callbacks end futures whose callbacks run here
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._entries) or self._closed)
                if self._closed:
                    return
            time.sleep(self._step)
            now = time.monotonic()
            with self._cond:
                due = [key for key, (deadline, _cb) in self._entries.items() if deadline <= now]
                expired = [self._entries.pop(key)[1] for key in due]
                if due and not self._entries:
                    self._cond.notify_all()
            for on_expiry in expired:
                try:
                    on_expiry()
                except Exception:  # one failing callback must not stop the others' deadlines
                    log.exception("%s: expiry callback failed", self._name)
