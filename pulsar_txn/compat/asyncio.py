"""``pulsar.asyncio`` (pulsar-client 3.x) on Kafka: the same calls as ``pulsar_txn.compat``, awaited.

::

    import pulsar_txn.compat.asyncio as pulsar_asyncio     # was: import pulsar.asyncio

    client = pulsar_asyncio.Client("pulsar://localhost:6650", bootstrap_servers="localhost:9092")
    producer = await client.create_producer("my-topic")
    await producer.send(b"hello")

Blocking work runs in worker threads (``asyncio.to_thread``); ``receive()`` and ``read_next()`` wait
in short slices, so cancelling the awaiting task stops the wait (a message that arrives in the slice
under way is returned by the next call)."""

from __future__ import annotations

import asyncio
import functools
import re
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pulsar_txn.compat import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    _api,
    _params,
)
from pulsar_txn.compat._ids import Message, MessageId, native_id
from pulsar_txn.errors import PulsarTxnError, Timeout
from pulsar_txn.message import moved_by_seek
from pulsar_txn.transaction import Transaction, TransactionBuilder

T = TypeVar("T")
_SLICE_MS = 200  # how long one blocking receive waits before the task can be cancelled


async def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


# Parameters of the blocking client's calls that ``pulsar.asyncio``'s lack (its positional order is
# the blocking one without them).
_NOT_IN_ASYNC_SUBSCRIBE = frozenset({"message_listener", "pattern_auto_discovery_period"})
_NOT_IN_ASYNC_CREATE_READER = frozenset({"reader_listener"})


class _Waiter:
    """Waits for the next message in slices of ``_SLICE_MS``. The slice in flight when the awaiting
    task is cancelled is kept, and the next call awaits it: a message it brings is not lost."""

    def __init__(self, next_message: Callable[[int], Message[Any]]) -> None:
        self._next = next_message
        self._pending: asyncio.Future[Message[Any]] | None = None
        self._held: deque[Message[Any]] = deque()  # brought by a slice a seek waited for
        # One caller at a time: concurrent receives all awaited the same slice and got the same
        # message (pulsar.asyncio gives each receive its own).
        self._lock = asyncio.Lock()

    async def next(self) -> Message[Any]:
        async with self._lock:
            while True:
                if self._held:
                    return self._held.popleft()
                if self._pending is None:
                    self._pending = asyncio.ensure_future(_run(self._next, _SLICE_MS))
                    # A slice left by a cancelled call may end in an error nobody awaits (the
                    # consumer closed): asyncio logged "Task exception was never retrieved".
                    self._pending.add_done_callback(_retrieved)
                pending = self._pending
                try:
                    msg = await asyncio.shield(pending)
                except asyncio.CancelledError:
                    raise  # the slice goes on: the next call takes what it brings
                except Timeout:
                    self._release(pending)
                    continue
                except BaseException:
                    self._release(pending)  # an error ends this slice only: the next call reads again
                    raise
                if self._pending is not pending:
                    continue  # a seek took the slice over: its message, if kept, is in _held
                self._pending = None
                return msg

    def _release(self, pending: asyncio.Future[Message[Any]]) -> None:
        if self._pending is pending:
            self._pending = None

    async def seek(self, messageid: Any, seek: Callable[[Any], None]) -> None:
        """Seek with the blocking layer's ``seek``. A slice under way ends first: a call waiting for
        it takes its message, as without the seek; one left by a cancelled call is held, then dropped
        if the seek moved its partition (read again from the new position) and delivered by the next
        call otherwise (the blocking layer counts it read)."""
        pending = self._pending
        if pending is not None:
            await asyncio.wait([pending])  # not consumed here: a waiting call's own callback runs first
            if self._pending is pending:  # nobody took it
                self._pending = None
                if not pending.cancelled() and pending.exception() is None:
                    self._held.append(pending.result())
        await _run(seek, messageid)
        target = _api._seek_target(messageid)
        self._held = deque(m for m in self._held if not moved_by_seek(target, native_id(m)))


def _retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # marks it retrieved; whoever awaits it still gets it


class Client:
    """``pulsar.asyncio.Client(service_url, **kwargs)``: the keyword arguments of ``pulsar.Client``
    (and ``bootstrap_servers=`` / ``kafka={...}``)."""

    def __init__(self, service_url: str, **kwargs: Any) -> None:
        self.sync = _api.Client(service_url, **kwargs)
        """The blocking ``pulsar_txn.compat.Client`` underneath (no network I/O is done here)."""

    async def create_producer(self, topic: str, *args: Any, **kwargs: Any) -> Producer[Any]:
        """See ``pulsar_txn.compat.Client.create_producer``."""
        return Producer(await _run(self.sync.create_producer, topic, *args, **kwargs))

    async def subscribe(self, topic: Any, subscription_name: str, *args: Any, **kwargs: Any) -> Consumer[Any]:
        """See ``pulsar_txn.compat.Client.subscribe``; ``is_pattern_topic=True`` takes ``topic`` as a
        regex."""
        if kwargs.pop("is_pattern_topic", False) and isinstance(topic, str):
            topic = re.compile(topic)
        kwargs = _params.SUBSCRIBE.positional(args, kwargs, without=_NOT_IN_ASYNC_SUBSCRIBE)
        return Consumer(await _run(self.sync.subscribe, topic, subscription_name, **kwargs))

    async def create_reader(
        self, topic: str, start_message_id: Any, *args: Any, **kwargs: Any
    ) -> Reader[Any]:
        """See ``pulsar_txn.compat.Client.create_reader``."""
        kwargs = _params.CREATE_READER.positional(args, kwargs, without=_NOT_IN_ASYNC_CREATE_READER)
        return Reader(await _run(self.sync.create_reader, topic, start_message_id, **kwargs))

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """See ``pulsar_txn.compat.Client.get_topic_partitions``."""
        return await _run(self.sync.get_topic_partitions, topic)

    def new_transaction(self) -> TransactionBuilder:
        """A transaction builder (an addition; ``await asyncio.to_thread(builder.build)`` or use
        ``build_async``)."""
        return self.sync.new_transaction()

    async def transaction(self, timeout: float = 60.0) -> Transaction:
        """A new open transaction (an addition)."""
        return await _run(self.sync.transaction, timeout)

    async def close(self) -> None:
        """Close the client and everything it made."""
        await _run(self.sync.close)

    def shutdown(self) -> None:
        """Close at once, without awaiting."""
        self.sync.close()


class Producer(Generic[T]):
    """pulsar.asyncio's Producer."""

    def __init__(self, sync: _api.Producer[T]) -> None:
        self.sync = sync

    def topic(self) -> str:
        """The topic written to."""
        return self.sync.topic()

    def producer_name(self) -> str:
        """The producer's name."""
        return self.sync.producer_name()

    def last_sequence_id(self) -> int:
        """See ``pulsar_txn.compat.Producer.last_sequence_id``."""
        return self.sync.last_sequence_id()

    def is_connected(self) -> bool:
        """True until closed (the Kafka producer reconnects by itself)."""
        return self.sync.is_connected()

    async def send(self, content: T, *args: Any, txn: Transaction | None = None, **kwargs: Any) -> MessageId:
        """Send and wait until stored (``txn=``: inside that transaction)."""
        return await _run(self.sync.send, content, *args, txn=txn, **kwargs)

    async def flush(self) -> None:
        """Wait until every message sent so far is stored."""
        await _run(self.sync.flush)

    async def close(self) -> None:
        """Flush and close."""
        await _run(self.sync.close)


class Consumer(Generic[T]):
    """pulsar.asyncio's Consumer."""

    def __init__(self, sync: _api.Consumer[T]) -> None:
        self.sync = sync
        self._waiter = _Waiter(sync.receive)

    def topic(self) -> str:
        """The subscribed topic(s)."""
        return self.sync.topic()

    def subscription_name(self) -> str:
        """The subscription's name."""
        return self.sync.subscription_name()

    def consumer_name(self) -> str:
        """This consumer's name."""
        return self.sync.consumer_name()

    async def receive(self) -> Message[T]:
        """The next message (waits until one arrives; cancel the task to stop waiting)."""
        return await self._waiter.next()

    async def acknowledge(self, message: Any, txn: Transaction | None = None) -> None:
        """Acknowledge a message or id; with ``txn``, inside that transaction."""
        await _run(self.sync.acknowledge, message, txn)

    async def acknowledge_cumulative(self, message: Any, txn: Transaction | None = None) -> None:
        """Acknowledge everything up to a message or id; with ``txn``, inside it."""
        await _run(self.sync.acknowledge_cumulative, message, txn)

    async def negative_acknowledge(self, message: Any) -> None:
        """Have the message redelivered after the negative-ack delay."""
        await _run(self.sync.negative_acknowledge, message)

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every received, unacknowledged message."""
        self.sync.redeliver_unacknowledged_messages()

    async def seek(self, messageid: Any) -> None:
        """Move the subscription to a MessageId, or to a publish time (ms since the epoch)."""
        await self._waiter.seek(messageid, self.sync.seek)

    async def get_last_message_id(self) -> MessageId:
        """See ``pulsar_txn.compat.Consumer.get_last_message_id``."""
        return await _run(self.sync.get_last_message_id)

    async def unsubscribe(self) -> None:
        """Delete the subscription and close the consumer."""
        await _run(self.sync.unsubscribe)

    async def close(self) -> None:
        """Close the consumer."""
        await _run(self.sync.close)


class Reader(Generic[T]):
    """pulsar.asyncio's Reader."""

    def __init__(self, sync: _api.Reader[T]) -> None:
        self.sync = sync
        self._waiter = _Waiter(sync.read_next)

    def topic(self) -> str:
        """The topic read."""
        return self.sync.topic()

    def is_connected(self) -> bool:
        """True until closed."""
        return self.sync.is_connected()

    async def read_next(self) -> Message[T]:
        """The next committed message (waits until one arrives; cancel the task to stop waiting)."""
        return await self._waiter.next()

    async def has_message_available(self) -> bool:
        """Whether a committed message is ready to read."""
        return await _run(self.sync.has_message_available)

    async def seek(self, messageid: Any) -> None:
        """Move the reader to a MessageId, or to a publish time (ms since the epoch)."""
        await self._waiter.seek(messageid, self.sync.seek)

    async def close(self) -> None:
        """Close the reader."""
        await _run(self.sync.close)


PulsarException = PulsarTxnError
"""The root of every error raised here (``pulsar.asyncio.PulsarException``)."""

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerCryptoFailureAction",
    "InitialPosition",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
]
