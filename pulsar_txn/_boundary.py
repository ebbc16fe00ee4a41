"""The public API's error boundary: a storage-layer error (``kafka_store.StoreError``) never reaches an
application as such; it leaves every public method as the matching ``PulsarTxnError`` (one root
exception, as the API promises), with the storage error chained as its cause."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from kafka_store import StoreError
from pulsar_txn.errors import from_store_error

C = TypeVar("C", bound=type)
R = TypeVar("R")

# Dunder methods that are part of the public surface (the rest are Python's machinery). Constructors
# too: a Producer, Consumer or Reader looks its topic up when made (the asyncio client makes them).
_PUBLIC_DUNDERS = frozenset({"__init__", "__enter__", "__exit__", "__iter__", "__next__"})


def _sync(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StoreError as exc:
            raise from_store_error(exc) from exc

    return call


def call_translated(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` behind the boundary: for internal calls made on an application's behalf (e.g.
    the async reader's polls), which no public method wraps."""
    result: R = _sync(fn)(*args)
    return result


def _coroutine(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except StoreError as exc:
            raise from_store_error(exc) from exc

    return call


def _generator(fn: Callable[..., Iterator[Any]]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
        try:
            yield from fn(*args, **kwargs)
        except StoreError as exc:
            raise from_store_error(exc) from exc

    return call


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):
        return _coroutine(fn)
    if inspect.isgeneratorfunction(fn):
        return _generator(fn)
    return _sync(fn)


def public_errors(cls: C) -> C:
    """Class decorator: every public method, classmethod and staticmethod defined on ``cls`` raises
    ``PulsarTxnError`` subclasses only (storage errors translated). Private helpers are left alone:
    they run inside a public call, or on I/O threads that report through futures. (Properties too:
    none of ours touches Kafka.)"""
    for name, attr in list(vars(cls).items()):
        if name.startswith("_") and name not in _PUBLIC_DUNDERS:
            continue
        wrapped: Any
        if isinstance(attr, classmethod):
            wrapped = classmethod(_wrap(attr.__func__))
        elif isinstance(attr, staticmethod):
            wrapped = staticmethod(_wrap(attr.__func__))
        elif inspect.isfunction(attr):
            wrapped = _wrap(attr)
        else:
            continue
        setattr(cls, name, wrapped)
    return cls
