"""The asyncio variant of the client API: the same shapes, awaited.

```python
from pulsar_txn.asyncio import AsyncClient

async with AsyncClient("pulsar://coord:6650", bootstrap_servers="kafka:9092") as client:
    producer = await client.create_producer("orders")
    consumer = await client.subscribe("orders", "billing", initial_position="Earliest")
    async with client.transaction(timeout=30) as txn:   # commit on success, abort on an exception
        await producer.send("order-1", txn=txn)
    msg = await consumer.receive(timeout_millis=5000)
    txn = await client.new_transaction().with_transaction_timeout(30).build()
    await consumer.acknowledge(msg, txn=txn)
    await txn.commit()
```

Sends need no thread: ``producer.send`` awaits the sync core's delivery future
(``asyncio.wrap_future``). Calls that block in the sync core (subscribing, polling for messages,
acknowledging, ending a transaction) run in a bounded thread pool owned by the client
(``max_workers``), so the event loop never blocks. ``receive`` polls in short slices, so a waiting
receive holds a worker only briefly and a cancelled one loses no message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

from pulsar_txn import _args
from pulsar_txn._boundary import call_translated
from pulsar_txn._topic_delete import TopicDeleted
from pulsar_txn._turns import Turns
from pulsar_txn.client import Client
from pulsar_txn.consumer import Consumer, ConsumerType, InitialPosition
from pulsar_txn.errors import AlreadyClosed, ConfigError, PulsarTxnError, Timeout
from pulsar_txn.message import EARLIEST, Message, MessageId, moved_by_seek
from pulsar_txn.producer import Producer, SendCallback
from pulsar_txn.reader import Reader
from pulsar_txn.schema import Schema
from pulsar_txn.transaction import ENDED_OR_ENDING, Transaction, TransactionState
from pulsar_txn.txnid import TxnID

T = TypeVar("T")
R = TypeVar("R")
H = TypeVar("H")
P = ParamSpec("P")

log = logging.getLogger(__name__)

_SLICE_MS = 100  # one blocking poll in the pool; bounds how long a receive holds a worker


class _Pool:
    """The client's bounded executor for blocking calls of the sync core."""

    def __init__(self, max_workers: int) -> None:
        _args.integer(max_workers, "max_workers", minimum=1)
        self.executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="pulsar-txn-aio")
        self.closed = False

    def submit(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        if self.closed:
            raise AlreadyClosed("client is closed")
        try:
            return self.executor.submit(fn, *args, **kwargs)
        except RuntimeError:  # shut down meanwhile
            raise AlreadyClosed("client is closed") from None

    def shutdown(self) -> None:
        self.closed = True
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.wait(self.submit(fn, *args, **kwargs))

    async def wait(self, job: Future[R], *, shield: bool = False) -> R:
        """Await a job of the pool. With ``shield``, cancelling the caller leaves the job running
        (its outcome is then the caller's to collect). A job that ``shutdown`` cancelled before it
        ran raises ``NotAllowedError``: the caller's task was not cancelled, the client was closed."""
        waited = asyncio.wrap_future(job)
        try:
            return await (asyncio.shield(waited) if shield else waited)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if job.cancelled() and self.closed and (task is None or not task.cancelling()):
                raise AlreadyClosed("client is closed") from None
            raise


class AsyncTransaction:
    """An open transaction; ``await txn.commit()`` / ``await txn.abort()``. Pass it as ``txn=`` to
    the async producer and consumer. ``async with`` commits on success and aborts on an exception."""

    def __init__(self, txn: Transaction, pool: _Pool) -> None:
        self.sync = txn
        """The underlying sync ``Transaction``."""
        self._pool = pool

    @property
    def txn_id(self) -> TxnID:
        """The coordinator-assigned id, printed like Pulsar: ``(0,3)``."""
        return self.sync.txn_id

    @property
    def state(self) -> TransactionState:
        """The client-side state (OPEN, COMMITTING, COMMITTED, ABORTED, ERROR, TIME_OUT, ...)."""
        return self.sync.state

    async def commit(self) -> None:
        """Wait for the transaction's sends and acks, then commit (see ``Transaction.commit``).
        Cancelling the caller does not stop a commit once begun: it ends either way."""
        await self._finish(self.sync.commit_async)

    async def abort(self) -> None:
        """Abort the transaction (see ``Transaction.abort``)."""
        await self._finish(self.sync.abort_async)

    async def _finish(self, start: Callable[[], Future[None]]) -> None:
        await _connected(self.sync, self._pool)
        # Begun on the pool, not on the loop: beginning runs the transaction's flush hooks and
        # commit checks, which take a consumer's lock (held by a rebalance for as long as its group
        # commit takes). Both waits are shielded: a cancelled caller leaves the end to begin and
        # finish, never half done.
        ending = await asyncio.shield(asyncio.wrap_future(_begin_end(self._pool, start)))
        limit = self.sync._end_limit()
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(ending)), limit)
        except TimeoutError:
            raise Timeout(f"transaction {self.txn_id} did not end within {limit:.0f}s") from None

    def __repr__(self) -> str:
        return f"Async{self.sync!r}"

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # As the sync ``__exit__``: commit on success; on an exception (a cancellation too) abort,
        # and if that fails, log it and let the block's exception through.
        state = self.sync.state
        if exc is None:
            if state not in ENDED_OR_ENDING:
                await self.commit()
        elif state in (TransactionState.OPEN, TransactionState.TIME_OUT):
            try:
                await self.abort()
            except PulsarTxnError as abort_error:
                log.warning("aborting %s after %r failed: %s", self.txn_id, exc, abort_error)


class _TransactionStart:
    """What ``AsyncClient.transaction()`` returns: await it for an ``AsyncTransaction``, or use it
    as ``async with`` (begin on enter; commit on success, abort on an exception on exit)."""

    def __init__(self, begin: Callable[[], Awaitable[AsyncTransaction]]) -> None:
        self._begin = begin
        self._txn: AsyncTransaction | None = None

    def __await__(self) -> Generator[Any, None, AsyncTransaction]:
        return self._begin().__await__()

    async def __aenter__(self) -> AsyncTransaction:
        self._txn = await self._begin()
        return self._txn

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._txn is not None
        await self._txn.__aexit__(exc_type, exc, tb)


class AsyncTransactionBuilder:
    """``await client.new_transaction().with_transaction_timeout(seconds).build()``."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._timeout = 60.0

    def with_transaction_timeout(self, seconds: float) -> AsyncTransactionBuilder:
        """The coordinator aborts the transaction if it has not ended within ``seconds``."""
        self._timeout = _args.seconds(seconds, "transaction timeout")
        return self

    async def build(self) -> AsyncTransaction:
        """Begin the transaction at the coordinator and return it, open."""
        return await self._client._begin(self._timeout)


def _abort_unused(job: Future[Transaction]) -> None:
    if not job.cancelled() and job.exception() is None:
        job.result().abort_async().add_done_callback(_log_abort_failure)


class _Closable(Protocol):
    def close(self) -> None: ...


def _close_unused(job: Future[Any] | asyncio.Future[Any]) -> None:
    """Close what a factory opened for a caller that was cancelled meanwhile, on a thread of its
    own (closing blocks: leaving a group, flushing; the callback may run on the event loop)."""
    if job.cancelled() or job.exception() is not None:
        return
    handle: _Closable = job.result()

    def close() -> None:
        try:
            handle.close()
        except Exception as exc:  # nobody is left to tell but the log
            log.info("closing %r, opened for a cancelled caller, failed: %s", handle, exc)

    threading.Thread(target=close, name="pulsar-txn-aio-close", daemon=True).start()


def _log_abort_failure(ended: Future[None]) -> None:
    exc = ended.exception()
    if exc is not None:
        log.info("aborting a transaction begun for a cancelled caller failed (its timeout ends it): %s", exc)


def _unwrap(txn: AsyncTransaction | Transaction | None) -> Transaction | None:
    if txn is None or isinstance(txn, Transaction):
        return txn
    if isinstance(txn, AsyncTransaction):
        return txn.sync
    raise ConfigError(f"txn is an AsyncTransaction or Transaction, not {type(txn).__name__} {txn!r}")


def _begin_end(pool: _Pool, start: Callable[[], Future[None]]) -> Future[Future[None]]:
    """``start()`` (a transaction's commit or abort) run in the pool or, if the pool is closed or a
    wrapper's close cancels the job before it ran, on a thread of its own: an end once asked for
    always begins, also when its caller was cancelled meanwhile (before, the transaction stayed OPEN
    until its timeout)."""
    begun: Future[Future[None]] = Future()

    def run_here() -> None:
        try:
            begun.set_result(start())
        except BaseException as exc:
            begun.set_exception(exc)

    def off_pool() -> None:
        threading.Thread(target=run_here, name="pulsar-txn-aio-end", daemon=True).start()

    def relay(job: Future[Future[None]]) -> None:
        if job.cancelled():
            off_pool()
        elif job.exception() is not None:
            begun.set_exception(job.exception())
        else:
            begun.set_result(job.result())

    try:
        pool.submit(start).add_done_callback(relay)
    except AlreadyClosed:
        off_pool()
    return begun


async def _connected(txn: Transaction | None, pool: _Pool) -> None:
    """The sync core opens its coordinator connection on first use, blocking (up to the operation
    timeout): a handle resumed on a fresh client would do that on the event loop. Open it in the
    pool first; once open, this costs nothing."""
    if txn is not None and not txn._client._tc_connected():
        await pool.run(txn._client._tc)


class AsyncProducer(Generic[T]):
    """The async face of a ``Producer``. Sends run on the sync core's delivery futures, with no
    thread per send, and start in call order; at most ``max_pending_messages`` sends are in flight
    (more wait their turn)."""

    def __init__(self, producer: Producer[T], pool: _Pool, timeout: float, max_pending_messages: int) -> None:
        self.sync = producer
        """The underlying sync ``Producer``."""
        self._pool = pool
        self._timeout = timeout
        self._max_pending = max_pending_messages
        # A place per send in flight, taken before it starts and given back when it is stored or
        # failed: concurrent tasks never have more than max_pending_messages sends out together.
        # A thread semaphore, not an asyncio one: that one binds to the first loop that waits on it,
        # and a place given back through a loop closed meanwhile was lost for good.
        self._room = threading.Semaphore(max_pending_messages)
        self._turns = Turns()

    @property
    def topic(self) -> str:
        """The topic this producer sends to."""
        return str(self.sync.topic)

    @property
    def producer_name(self) -> str:
        """The name stored with each message."""
        return self.sync.producer_name

    async def _take_room(self) -> Callable[..., None]:
        """Wait for a place among the sends in flight (``Timeout`` after the operation timeout);
        returns what gives it back, callable from any thread, also after this loop has closed."""
        if not self._room.acquire(blocking=False):
            # Full: the producer is at its limit, so waiting is the point; polled with a short
            # back-off (a place comes back on a delivery thread, from any loop's sends).
            deadline = time.monotonic() + self._timeout
            delay = 0.0005
            while not self._room.acquire(blocking=False):
                if time.monotonic() >= deadline:
                    raise Timeout(
                        f"send to {self.topic}: {self._max_pending} sends still in flight "
                        f"after {self._timeout}s"
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.005)

        def give_back(_done: object = None) -> None:
            self._room.release()

        return give_back

    async def send_async(
        self,
        content: T,
        callback: SendCallback | None = None,
        *,
        txn: AsyncTransaction | Transaction | None = None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue the send and return at once with a future of its MessageId: send many, then
        ``await asyncio.gather(*futures)``. (The Pythonic form of Pulsar's ``sendAsync``.)
        ``callback(result, msg_id)``, as in the sync ``send_async``, runs on a client thread."""
        # Sends reach the sync producer in call order: a send waiting for room or for a look-up
        # below (a transaction's connection, the partition count, a compacted-topic check) held
        # back, the later ones went first.
        ticket = self._turns.take()
        try:
            await self._turns.wait(ticket)
            give_back = await self._take_room()
            try:
                sync_txn = _unwrap(txn)
                await _connected(sync_txn, self._pool)
                if self.sync._refresh_due():  # a metadata request: not on the event loop
                    await self._pool.run(self.sync._refresh_partitions)
                if sync_txn is not None and self.sync._compacted is None:  # DescribeConfigs, as above
                    await self._pool.run(self.sync._refuse_compacted)
                fut = self.sync.send_async(
                    content,
                    callback,
                    txn=sync_txn,
                    properties=properties,
                    partition_key=partition_key,
                    event_timestamp=event_timestamp,
                )
            except BaseException:
                give_back()
                raise
        finally:
            self._turns.done(ticket)
        fut.add_done_callback(give_back)
        return asyncio.wrap_future(fut)

    async def send(
        self,
        content: T,
        *,
        txn: AsyncTransaction | Transaction | None = None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
    ) -> MessageId:
        """Send and wait until stored; the MessageId (``Timeout`` after the operation timeout)."""
        fut = await self.send_async(
            content,
            txn=txn,
            properties=properties,
            partition_key=partition_key,
            event_timestamp=event_timestamp,
        )
        try:
            return await asyncio.wait_for(fut, self._timeout)
        except TimeoutError:
            raise Timeout(f"send to {self.topic} not confirmed within {self._timeout}s") from None

    async def flush(self) -> None:
        """Wait until every message sent so far is stored."""
        await self._pool.run(self.sync.flush)

    async def close(self) -> None:
        """Flush and close the producer."""
        if self._pool.closed:
            # The wrapper's pool is gone, but a wrapped client's owner may keep the sync client
            # open: the producer is still flushed and closed, on a thread of its own.
            await asyncio.to_thread(self.sync.close)
            return
        await self._pool.run(self.sync.close)


class AsyncConsumer(Generic[T]):
    """The async face of a ``Consumer``."""

    def __init__(self, consumer: Consumer[T], pool: _Pool) -> None:
        self.sync = consumer
        """The underlying sync ``Consumer``."""
        self._pool = pool
        self._stash: deque[Message[T]] = deque()  # received by a slice whose receive was cancelled
        # The polls of receives that were cancelled while they ran, oldest first (concurrent
        # receives can each leave one): the next call collects them into the stash before polling
        # again, so messages come out in the order the consumer handed them.
        self._orphans: deque[Future[Any]] = deque()

    @property
    def subscription(self) -> str:
        """The subscription name."""
        return self.sync.subscription

    async def _settle_orphan(self) -> None:
        while self._orphans:
            orphan = self._orphans[0]
            with contextlib.suppress(Exception):  # its error, if any, is the next poll's too
                await self._pool.wait(orphan, shield=True)  # cancelled here: it stays an orphan
            if self._orphans and self._orphans[0] is orphan:  # not collected by a concurrent call
                self._orphans.popleft()
                if not orphan.cancelled() and orphan.exception() is None:
                    got = orphan.result()
                    self._stash.extend(got if isinstance(got, list) else [got] if got is not None else [])

    async def _wait_poll(self, job: Future[R]) -> R:
        try:
            return await self._pool.wait(job, shield=True)
        except asyncio.CancelledError:
            self._orphans.append(job)  # what it receives after all is a later call's
            raise

    async def receive(self, timeout_millis: int | None = None) -> Message[T]:
        """The next committed message; ``Timeout`` if none arrives within ``timeout_millis`` (0:
        only a message ready now, as the sync ``receive(0)``)."""
        loop = asyncio.get_running_loop()
        wait_ms = None if timeout_millis is None else _args.millis(timeout_millis, "timeout_millis")
        deadline = None if wait_ms is None else loop.time() + wait_ms / 1000
        await self._settle_orphan()
        polled = False
        while True:
            if self._stash:
                return self._stash.popleft()
            remaining_ms = _SLICE_MS if deadline is None else int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0 and polled:
                raise Timeout(f"no message for subscription {self.subscription!r} within {timeout_millis} ms")
            job = self._pool.submit(self._receive_slice, max(0, min(remaining_ms, _SLICE_MS)))
            polled = True
            msg = await self._wait_poll(job)
            if msg is not None:
                return msg

    def _receive_slice(self, timeout_ms: int) -> Message[T] | None:
        try:
            return self.sync.receive(timeout_ms)
        except Timeout:
            return None

    async def batch_receive(self, max_messages: int = 100, timeout_millis: int = 100) -> list[Message[T]]:
        """Up to ``max_messages`` messages within ``timeout_millis`` (maybe none). Polls in short
        slices, as ``receive`` does, so a long wait does not hold a worker of the pool."""
        _args.integer(max_messages, "max_messages", minimum=1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _args.millis(timeout_millis, "timeout_millis") / 1000
        await self._settle_orphan()
        out = [self._stash.popleft() for _ in range(min(len(self._stash), max_messages))]
        polled = False
        try:
            while len(out) < max_messages:
                remaining_ms = int((deadline - loop.time()) * 1000)
                if remaining_ms <= 0 and polled:
                    break
                slice_ms = max(0, min(remaining_ms, _SLICE_MS))
                job = self._pool.submit(self.sync.batch_receive, max_messages - len(out), slice_ms)
                polled = True
                more: list[Message[T]] = await self._wait_poll(job)
                out += more
        except BaseException:
            # What this call had taken goes back first (a cancelled call's poll is collected behind
            # it by the next call).
            self._stash.extendleft(reversed(out))
            raise
        return out

    async def acknowledge(
        self, message: Message[Any] | MessageId, txn: AsyncTransaction | Transaction | None = None
    ) -> None:
        """Acknowledge one message; with ``txn`` inside that transaction, returning once the pending
        ack is stored."""
        await self._stored(await self._pool.run(self.sync.acknowledge_async, message, _unwrap(txn)))

    async def acknowledge_cumulative(
        self, message: Message[Any] | MessageId, txn: AsyncTransaction | Transaction | None = None
    ) -> None:
        """Acknowledge everything of the partition up to this message; with ``txn`` inside it,
        returning once the pending ack is stored."""
        written = await self._pool.run(self.sync.acknowledge_cumulative_async, message, _unwrap(txn))
        await self._stored(written)

    async def _stored(self, written: Future[None]) -> None:
        """Until an ack's write ended (cancelling the caller leaves the write going: the
        transaction waits for it anyway)."""
        if written.done():
            written.result()
            return
        limit = self.sync._client.operation_timeout_seconds
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(written)), limit)
        except TimeoutError:
            raise Timeout(f"the pending ack was not stored within {limit}s") from None

    async def negative_acknowledge(self, message: Message[Any] | MessageId) -> None:
        """Redeliver the message after the consumer's negative-ack delay."""
        await self._pool.run(self.sync.negative_acknowledge, message)

    async def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every delivered, unacknowledged message now (also those received by this
        wrapper and not handed out yet)."""
        await self._settle_orphan()
        self._stash.clear()  # the sync consumer delivered them: they are among its unacked ones
        await self._pool.run(self.sync.redeliver_unacknowledged_messages)

    def stats(self) -> dict[str, Any]:
        """Per-partition cursor and pending-ack counters (no I/O)."""
        return self.sync.stats()

    def pending_transactions(self) -> dict[TxnID, int]:
        """Transactions holding pending acks on this consumer's partitions -> how many message ids."""
        return self.sync.pending_transactions()

    def assigned_partitions(self) -> list[tuple[str, int]]:
        """The (Kafka topic, partition) pairs this consumer holds now."""
        return self.sync.assigned_partitions()

    async def seek(self, message_id: MessageId | int) -> None:
        """Reset the subscription's cursor on that partition to ``message_id``."""
        await self._settle_orphan()
        await self._pool.run(self.sync.seek, message_id)
        # Received by a cancelled call and handed out to nobody: those of a partition the seek moved
        # come again from the new position; the others' are delivered by the next calls (the sync
        # consumer counts them delivered, so nothing else would).
        self._stash = deque(m for m in self._stash if not moved_by_seek(message_id, m.message_id))

    async def close(self) -> None:
        """Persist the cursor and leave the subscription."""
        await self._settle_orphan()
        stashed, self._stash = list(self._stash), deque()
        if self._pool.closed:
            # The wrapper's pool is gone, but a wrapped client's owner may keep the sync client
            # open: the consumer still leaves its subscription, on a thread of its own.
            await asyncio.to_thread(self._close, stashed)
            return
        await self._pool.run(self._close, stashed)

    def _close(self, stashed: list[Message[T]]) -> None:
        for msg in stashed:  # received, handed out to nobody: let them come back
            with contextlib.suppress(PulsarTxnError):  # closed already: they come back anyway
                self.sync.negative_acknowledge(msg)
        self.sync.close()

    async def unsubscribe(self) -> None:
        """Close and delete the subscription."""
        await self._pool.run(self.sync.unsubscribe)

    async def __aenter__(self) -> AsyncConsumer[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncReader(Generic[T]):
    """The async face of a ``Reader``."""

    def __init__(self, reader: Reader[T], pool: _Pool) -> None:
        self.sync = reader
        """The underlying sync ``Reader``."""
        self._pool = pool
        self._lock = asyncio.Lock()  # the sync reader is not meant for concurrent reads
        # A read's poll that went on after its caller was cancelled: the next call waits for it
        # before touching the sync reader. It only fills the reader's buffer, so nothing is lost.
        self._orphan: Future[bool] | None = None

    async def read_next(self, timeout_millis: int | None = None) -> Message[T]:
        """The next committed message; ``Timeout`` if none arrives in time (30 s by default).
        Cancelling a read (e.g. ``asyncio.wait_for``) loses nothing: a message that arrives after all
        is the next call's."""
        loop = asyncio.get_running_loop()
        wait_ms = _args.millis(timeout_millis, "timeout_millis") if timeout_millis is not None else 30_000
        deadline = loop.time() + wait_ms / 1000
        async with self._lock:
            await self._settle_orphan()
            polled = False  # read_next(0) still takes a message that is ready, as the sync one
            while True:
                if self.sync._buffer:
                    return self.sync._buffer.popleft()
                remaining_ms = int((deadline - loop.time()) * 1000)
                if remaining_ms <= 0 and polled:
                    raise Timeout(f"no committed message on {self.sync.topic} within {timeout_millis} ms")
                await self._poll(max(0, min(remaining_ms, _SLICE_MS)) / 1000)
                polled = True

    async def _poll(self, timeout: float) -> bool:
        job = self._pool.submit(call_translated, self.sync._fill, timeout)
        try:
            return await self._pool.wait(job, shield=True)
        except asyncio.CancelledError:
            self._orphan = job
            raise

    async def _settle_orphan(self) -> None:
        orphan = self._orphan
        if orphan is not None:
            with contextlib.suppress(Exception):  # its error, if any, is the next poll's too
                await self._pool.wait(orphan, shield=True)  # cancelled here: it stays the orphan
            if self._orphan is orphan:
                self._orphan = None

    async def has_message_available(self) -> bool:
        """Whether ``read_next`` has a committed message to return (``Reader.has_message_available``:
        positions are compared, so the answer does not depend on how fast records arrive)."""
        async with self._lock:
            await self._settle_orphan()
            return await self._pool.run(self.sync.has_message_available)

    async def seek(self, message_id: MessageId | int) -> None:
        """Read that partition again from ``message_id``."""
        async with self._lock:
            await self._settle_orphan()
            await self._pool.run(self.sync.seek, message_id)

    async def close(self) -> None:
        """Stop reading."""
        if self._pool.closed:
            self.sync.close()  # quick: no waiting on the broker
            return
        async with self._lock:
            await self._settle_orphan()
            await self._pool.run(self.sync.close)


class AsyncClient:
    """``AsyncClient(service_url, bootstrap_servers=...)``: the asyncio variant of ``Client``.

    Takes the same arguments as ``Client``, plus ``max_workers`` (the bounded thread pool for
    blocking calls of the sync core). ``async with AsyncClient(...) as client:`` closes it.
    ``AsyncClient(sync_client)`` wraps an existing ``Client`` instead; closing the wrapper then
    leaves that client open (its owner closes it)."""

    def __init__(self, service_url: str | Client, *, max_workers: int = 8, **kwargs: Any) -> None:
        self._owns = not isinstance(service_url, Client)
        self.sync = service_url if isinstance(service_url, Client) else Client(service_url, **kwargs)
        """The underlying sync ``Client``."""
        self._pool = _Pool(max_workers)
        self._closed = False

    @classmethod
    async def embedded(cls, *, max_workers: int = 8, **kwargs: Any) -> AsyncClient:
        """``Client.embedded`` (coordinator in-process, and a broker if no ``bootstrap_servers``),
        started off the event loop."""
        _args.integer(max_workers, "max_workers", minimum=1)  # before anything starts
        started = asyncio.get_running_loop().run_in_executor(
            None, functools.partial(Client.embedded, **kwargs)
        )
        try:
            client = await asyncio.shield(started)
        except asyncio.CancelledError:
            # The caller is gone: the broker and coordinator that start after all are stopped.
            started.add_done_callback(_close_unused)
            raise
        try:
            wrapper = cls(client, max_workers=max_workers)
        except BaseException:
            client.close()
            raise
        wrapper._owns = True
        return wrapper

    @property
    def operation_timeout_seconds(self) -> float:
        """Bound on every blocking operation."""
        return self.sync.operation_timeout_seconds

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("client is closed")

    # ------------------------------------------------------------------ transactions
    def new_transaction(self) -> AsyncTransactionBuilder:
        """``await client.new_transaction().with_transaction_timeout(seconds).build()``."""
        self._check_open()
        return AsyncTransactionBuilder(self)

    def transaction(self, timeout: float = 60.0) -> _TransactionStart:
        """``async with client.transaction(timeout=30) as txn:`` (commit on success, abort on an
        exception), or ``txn = await client.transaction(30)``."""
        seconds = _args.seconds(timeout, "transaction timeout")
        return _TransactionStart(lambda: self._begin(seconds))

    async def _begin(self, timeout: float) -> AsyncTransaction:
        self._check_open()
        # A transaction begun for a caller that is gone is aborted now, not left open (and holding
        # nothing) until the coordinator times it out.
        txn = await self._open(functools.partial(self.sync.transaction, timeout), _abort_unused)
        return AsyncTransaction(txn, self._pool)

    async def _open(
        self, open_handle: Callable[[], H], unused: Callable[[Future[H]], None] = _close_unused
    ) -> H:
        """Run a blocking factory in the pool. A caller cancelled meanwhile owns nothing: what
        opens after all is handed to ``unused`` (by default closed, off the event loop), not left
        holding an Exclusive subscription or a producer nobody can reach."""
        job = self._pool.submit(open_handle)
        try:
            return await self._pool.wait(job, shield=True)
        except asyncio.CancelledError:
            job.add_done_callback(unused)
            raise

    def resume_transaction(self, txn_id: TxnID | str, timeout_ms: int = 60_000) -> AsyncTransaction:
        """A handle on a transaction begun elsewhere, by its id (no I/O until commit/abort)."""
        return AsyncTransaction(self.sync.resume_transaction(txn_id, timeout_ms), self._pool)

    # ------------------------------------------------------------------ factories
    @overload
    async def create_producer(
        self, topic: str, *, producer_name: str | None = None, max_pending_messages: int = 10_000
    ) -> AsyncProducer[bytes | str]: ...

    @overload
    async def create_producer(
        self,
        topic: str,
        *,
        producer_name: str | None = None,
        schema: Schema[T],
        max_pending_messages: int = 10_000,
    ) -> AsyncProducer[T]: ...

    async def create_producer(
        self,
        topic: str,
        *,
        producer_name: str | None = None,
        schema: Schema[Any] | None = None,
        max_pending_messages: int = 10_000,
    ) -> AsyncProducer[Any]:
        """See ``Client.create_producer``; ``max_pending_messages`` bounds sends in flight."""
        self._check_open()
        _args.integer(max_pending_messages, "max_pending_messages", minimum=1)
        producer: Producer[Any] = await self._open(
            functools.partial(self.sync.create_producer, topic, producer_name=producer_name, schema=schema)
        )
        return AsyncProducer(producer, self._pool, self.operation_timeout_seconds, max_pending_messages)

    @overload
    async def subscribe(
        self,
        topic: str | list[str] | None,
        subscription_name: str,
        *,
        consumer_type: ConsumerType | str = ...,
        initial_position: InitialPosition | str = ...,
        pattern: str | None = ...,
        schema: None = ...,
        **options: Any,
    ) -> AsyncConsumer[bytes]: ...

    @overload
    async def subscribe(
        self,
        topic: str | list[str] | None,
        subscription_name: str,
        *,
        consumer_type: ConsumerType | str = ...,
        initial_position: InitialPosition | str = ...,
        pattern: str | None = ...,
        schema: Schema[T],
        **options: Any,
    ) -> AsyncConsumer[T]: ...

    async def subscribe(
        self,
        topic: str | list[str] | None,
        subscription_name: str,
        *,
        consumer_type: ConsumerType | str = ConsumerType.Exclusive,
        initial_position: InitialPosition | str = InitialPosition.Latest,
        pattern: str | None = None,
        schema: Schema[Any] | None = None,
        **options: Any,
    ) -> AsyncConsumer[Any]:
        """See ``Client.subscribe``."""
        self._check_open()
        consumer: Consumer[Any] = await self._open(
            functools.partial(
                self.sync.subscribe,
                topic,
                subscription_name,
                consumer_type=consumer_type,
                initial_position=initial_position,
                pattern=pattern,
                schema=schema,
                **options,
            )
        )
        return AsyncConsumer(consumer, self._pool)

    @overload
    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = ...,
        *,
        schema: None = ...,
        start_message_id_inclusive: bool = ...,
    ) -> AsyncReader[bytes]: ...

    @overload
    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = ...,
        *,
        schema: Schema[T],
        start_message_id_inclusive: bool = ...,
    ) -> AsyncReader[T]: ...

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = EARLIEST,
        *,
        schema: Schema[Any] | None = None,
        start_message_id_inclusive: bool = False,
    ) -> AsyncReader[Any]:
        """See ``Client.create_reader``."""
        self._check_open()
        reader: Reader[Any] = await self._open(
            functools.partial(
                self.sync.create_reader,
                topic,
                start_message_id,
                schema=schema,
                start_message_id_inclusive=start_message_id_inclusive,
            )
        )
        return AsyncReader(reader, self._pool)

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        """Create a (partitioned) topic; a no-op if it exists."""
        await self._pool.run(self.sync.create_topic, topic, partitions)

    async def delete_topic(self, topic: str, *, force: bool = False) -> TopicDeleted:
        """See ``Client.delete_topic``."""
        return await self._pool.run(functools.partial(self.sync.delete_topic, topic, force=force))

    async def get_last_message_ids(self, topic: str) -> dict[int, MessageId | None]:
        """Per partition, the id of the last committed message."""
        return await self._pool.run(self.sync.get_last_message_ids, topic)

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Close the sync client if this wrapper made it (consumers, connections, anything
        ``embedded`` started), then the thread pool."""
        if self._closed:
            return
        self._closed = True
        if not self._owns:
            self._pool.shutdown()
            return
        job = self._pool.submit(self.sync.close)
        # Nothing new is taken; what is queued runs, the close last, then the pool goes. Shielded:
        # a cancelled caller (wait_for ran out) no longer cancels the close, which left it open.
        self._pool.closed = True
        job.add_done_callback(lambda _job: self._pool.shutdown())
        await self._pool.wait(job, shield=True)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


__all__ = [
    "AsyncClient",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncReader",
    "AsyncTransaction",
    "AsyncTransactionBuilder",
]
