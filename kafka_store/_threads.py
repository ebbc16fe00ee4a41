"""Threads that run client callbacks (delivery reports, answers): code running on one must never
wait for something that only that thread can complete."""

from __future__ import annotations

import threading
import weakref

_CALLBACK_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def mark_callback_thread() -> None:
    """The current thread runs client callbacks (call it first thing in the thread)."""
    _CALLBACK_THREADS.add(threading.current_thread())


def in_callback_thread() -> bool:
    """Whether the current thread runs client callbacks."""
    return threading.current_thread() in _CALLBACK_THREADS


__all__ = ["in_callback_thread", "mark_callback_thread"]
