"""pulsar-client's ``TableView``: the latest value of every key of a topic, kept current in the
background, from committed messages only."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pulsar_txn import message as _message
from pulsar_txn import reader as _reader
from pulsar_txn.errors import AlreadyClosed, PulsarTxnError, Timeout

T = TypeVar("T")
log = logging.getLogger(__name__)

_POLL_MS = 200  # how long one background read waits, so that close() is noticed soon
_RETRY_S = 0.5  # pause after a failed read (the broker away) before the next one


class TableView(Generic[T]):
    """Made by ``Client.create_table_view``. Messages without a partition key are skipped; a message
    with an empty payload removes its key (Pulsar's tombstone); an aborted transaction's messages
    never show. Creating one returns once everything committed so far has been read."""

    def __init__(self, reader: _reader.Reader[T], topic: str, subscription: str | None) -> None:
        self._reader = reader
        self._topic = topic
        self._subscription = subscription
        self._lock = threading.Lock()
        self._data: dict[str, _message.Message[T]] = {}
        self._listeners: list[Callable[[str, Any], None]] = []
        self._closed = threading.Event()
        while reader.has_message_available():  # caught up before the caller sees the table
            self._apply(reader.read_next(1000))
        self._thread = threading.Thread(
            target=self._follow, name=f"pulsar-txn-table-view {topic}", daemon=True
        )
        self._thread.start()

    def get(self, key: str) -> T | None:
        """The latest value of ``key``, or None if the table has no such key."""
        with self._lock:
            msg = self._data.get(key)
        return msg.value() if msg is not None else None

    def for_each(self, callback: Callable[[str, T], None]) -> None:
        """Call ``callback(key, value)`` for every entry."""
        with self._lock:
            entries = list(self._data.items())
        for key, msg in entries:
            callback(key, msg.value())

    def for_each_and_listen(self, callback: Callable[[str, T], None]) -> None:
        """``for_each``, then call ``callback`` again for every entry added or updated later (from
        the table's background thread; a callback must not block)."""
        with self._lock:
            entries = list(self._data.items())
            self._listeners.append(callback)
        for key, msg in entries:
            callback(key, msg.value())

    def close(self) -> None:
        """Stop following the topic."""
        self._closed.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)
        self._reader.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __repr__(self) -> str:
        if self._subscription is None:
            return f"TableView(topic={self._topic})"
        return f"TableView(topic={self._topic}, subscription={self._subscription})"

    def _apply(self, msg: _message.Message[T]) -> None:
        key = msg.partition_key
        if not key:
            return
        with self._lock:
            if len(msg.data) == 0:
                self._data.pop(key, None)
                return
            self._data[key] = msg
            listeners = list(self._listeners)
        if not listeners:
            return
        try:
            value = msg.value()
        except PulsarTxnError as exc:  # kept in the table; its value raises where it is read
            log.warning("table view %s: %s not decodable, listeners not called: %s", self._topic, key, exc)
            return
        for listener in listeners:
            try:
                listener(key, value)
            except Exception:  # an application callback must not stop the table
                log.exception("table view %s: listener failed", self._topic)

    def _follow(self) -> None:
        while not self._closed.is_set():
            try:
                self._apply(self._reader.read_next(_POLL_MS))
            except Timeout:
                continue
            except AlreadyClosed:
                return  # closed under it (e.g. by the client's close)
            except PulsarTxnError as exc:
                log.warning("table view %s: read failed (will retry): %s", self._topic, exc)
                self._closed.wait(_RETRY_S)
            except Exception:  # a bug must not stop the table for good
                log.exception("table view %s: update failed (going on)", self._topic)
                self._closed.wait(_RETRY_S)
