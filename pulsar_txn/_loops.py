"""Event loops for our own threads and processes: uvloop where it is installed, else asyncio's.

The coordinator's event loop spends most of its CPU in the loop machinery itself (one iteration per
request, per delivery burst, per reply); uvloop runs the same code with far less of it. Set
``PULSAR_TXN_EVENT_LOOP=asyncio`` to use the standard loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from pulsar_txn.errors import ConfigError

_T = TypeVar("_T")


def _uvloop_factory() -> Any:
    choice = os.environ.get("PULSAR_TXN_EVENT_LOOP", "").strip().lower()
    if choice == "asyncio":
        return None
    if choice not in ("", "uvloop"):  # a typo must not pass for a choice
        raise ConfigError(f"PULSAR_TXN_EVENT_LOOP must be asyncio or uvloop, not {choice[:40]!r}")
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    factory = _uvloop_factory()
    loop: asyncio.AbstractEventLoop = factory() if factory is not None else asyncio.new_event_loop()
    return loop


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run`` on the loop ``new_event_loop`` makes."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def loop_kind(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
