"""Turns in call order for coroutines of any event loop (an async producer's sends)."""

from __future__ import annotations

import asyncio
import threading


class Turns:
    """``take()`` a ticket at the call (before any await), ``wait(ticket)`` until every earlier
    ticket is ``done``, then ``done(ticket)`` (also when cancelled or failed: a ticket given up
    before its turn is passed over). Not an asyncio lock: that binds to one loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0
        self._serving = 0
        self._gone: set[int] = set()  # done before their turn came
        self._waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}

    def take(self) -> int:
        with self._lock:
            ticket = self._next
            self._next += 1
            return ticket

    async def wait(self, ticket: int) -> None:
        with self._lock:
            if self._serving == ticket:
                return
            loop = asyncio.get_running_loop()
            turn: asyncio.Future[None] = loop.create_future()
            self._waiting[ticket] = (loop, turn)
        try:
            await turn
        finally:
            with self._lock:
                self._waiting.pop(ticket, None)

    def done(self, ticket: int) -> None:
        with self._lock:
            if ticket != self._serving:
                self._gone.add(ticket)
                return
            self._serving += 1
            while self._serving in self._gone:
                self._gone.discard(self._serving)
                self._serving += 1
            following = self._serving
            waiter = self._waiting.get(following)
        if waiter is not None:
            loop, turn = waiter
            try:
                loop.call_soon_threadsafe(_start, turn)
            except RuntimeError:  # its loop closed: nobody waits for that turn any more
                self.done(following)


def _start(turn: asyncio.Future[None]) -> None:
    if not turn.done():
        turn.set_result(None)
