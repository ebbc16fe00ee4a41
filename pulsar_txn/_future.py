"""A ``concurrent.futures.Future`` that builds its lock only when a thread has to wait on it.

A standard Future allocates a Condition (an RLock, a deque and five bound methods) up front. A
producer returns one Future per message, and applications keep thousands of them alive while
sends are in flight; every one of those objects is then re-scanned by the cyclic GC, which cost
more than the send itself. Most send futures finish before anyone waits on them, so the Condition
is made on first need (``result`` on a pending future, ``wait``, ``cancel``, ...) and the waiter and
callback lists on first use. Done callbacks do not need the Condition: they are added and taken
under a module-wide guard while there is none (a Condition costs about as much as the rest of a
coordinator call's bookkeeping, and the transaction paths chain every call's future through a
callback). Everything else behaves exactly as the standard class.

``relay`` hands one future's outcome on to another (the asynchronous API's chains).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING
from typing import Any, TypeVar

S = TypeVar("S")
T = TypeVar("T")

# Guards the switch from "no condition" to "condition": completing a future without one, and making
# one, never interleave, so a thread that waits always sees a completion or gets notified of it.
_GUARD = threading.Lock()
_ENDED = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
_LOGGER = logging.getLogger("concurrent.futures")  # where the standard class logs failed callbacks


class LazyFuture(Future[T]):
    """``concurrent.futures.Future`` with a lazily created Condition (see the module docstring)."""

    def __init__(self) -> None:  # not Future.__init__: that builds the Condition
        self._cond: threading.Condition | None = None
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._lists: tuple[list[Any], list[Any]] | None = None  # (waiters, done callbacks), on need

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        cond = self._cond
        if cond is None:
            with _GUARD:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition()
        return cond

    def _make_lists(self) -> tuple[list[Any], list[Any]]:
        lists = self._lists
        if lists is None:
            with _GUARD:
                lists = self._lists
                if lists is None:
                    lists = self._lists = ([], [])
        return lists

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]  # for concurrent.futures.wait
        return self._make_lists()[0]

    @property
    def _done_callbacks(self) -> list[Any]:
        return self._make_lists()[1]

    def done(self) -> bool:
        return self._state in _ENDED

    def add_done_callback(self, fn: Callable[[Future[T]], object]) -> None:
        with _GUARD:
            if self._cond is None:
                if self._state not in _ENDED:
                    lists = self._lists
                    if lists is None:
                        lists = self._lists = ([], [])
                    lists[1].append(fn)
                    return
                ended = True  # finished without a Condition: call now, outside the guard
            else:
                ended = False
        if not ended:
            super().add_done_callback(fn)  # the standard path, under the Condition
            return
        try:
            fn(self)
        except Exception:
            _LOGGER.exception("exception calling callback for %r", self)

    def _finish_unwatched(self, result: Any, exception: BaseException | None) -> bool:
        """End the future without a Condition if it has none (nobody waits on it) and run its
        callbacks; False if it has one (the caller takes the standard path)."""
        with _GUARD:
            if self._cond is not None or self._state in _ENDED:
                return False
            self._result = result
            self._exception = exception
            self._state = FINISHED
            callbacks = None if self._lists is None else self._lists[1]
        if callbacks:  # no callback can be added any more: the state is final
            for callback in callbacks:
                try:
                    callback(self)
                except Exception:
                    _LOGGER.exception("exception calling callback for %r", self)
        return True

    def result(self, timeout: float | None = None) -> T:
        if self._state == FINISHED:  # final: state and outcome never change again
            if self._exception is not None:
                raise self._exception
            return self._result  # type: ignore[no-any-return]
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == FINISHED:
            return self._exception
        return super().exception(timeout)

    def set_result(self, result: T) -> None:
        if not self._finish_unwatched(result, None):
            # A condition exists, or the future has ended already (the base class raises
            # InvalidStateError, outside _GUARD: its repr needs the condition).
            super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        if not self._finish_unwatched(None, exception):
            super().set_exception(exception)


class StartedFuture(LazyFuture[T]):
    """A ``LazyFuture`` for work that has started and cannot be taken back (a message handed to
    Kafka): ``cancel()`` returns False, as for a running ``concurrent.futures.Future``. Otherwise a
    caller's cancel (e.g. asyncio's, through ``wrap_future``) would leave the future ended before
    the work reports its outcome, and that report would fail on the thread delivering it."""

    def cancel(self) -> bool:
        return False


def relay(source: Future[S], target: Future[T], convert: Callable[[S], T]) -> None:
    """When ``source`` ends, end ``target`` the same way: with its exception, or with
    ``convert(result)``."""

    def done(f: Future[S]) -> None:
        exc = f.exception()
        if exc is not None:
            target.set_exception(exc)
        else:
            target.set_result(convert(f.result()))

    source.add_done_callback(done)


def settle(fut: Future[None], error: BaseException | None) -> None:
    """End ``fut`` with ``error`` (None: success), unless it ended already (e.g. its holder
    cancelled it): a completing callback must not raise for that."""
    if fut.done():
        return
    try:
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
    except InvalidStateError:  # cancelled meanwhile
        pass


__all__ = ["LazyFuture", "StartedFuture", "relay", "settle"]
