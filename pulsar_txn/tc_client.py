"""A transaction-coordinator client speaking Pulsar's binary protocol, like Pulsar's Java TC client.

Per TC it looks the owner up (LOOKUP of ``transaction_coordinator_assign-partition-N`` on the service
URL, following Redirects), keeps one connection per owner URL and sends TC_CLIENT_CONNECT once per
(connection, TC). Every call is bounded by ``operation_timeout``; retriable failures (ServiceNotReady,
TransactionCoordinatorNotFound, a dropped connection, ...) are retried with exponential back-off from
50 ms up to ``max_retries_backoff``, looking the owner up again when ownership may have moved.

The number of TCs is ``num_tcs`` when given; otherwise ``connect()`` probes LOOKUPs for partitions
0, 1, 2, ... until one answers Failed/TopicNotFound, and that index is the count.

``SyncTcClient`` runs a ``TcClient`` on a private event loop in a daemon thread for non-async callers,
and sends calls to a TC whose connection is ready straight from the calling thread (the fast path).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from kafka_store import mark_callback_thread
from pulsar_txn import _loops
from pulsar_txn._future import LazyFuture, relay
from pulsar_txn._tc_calls import (
    TcCall,
    add_partitions_call,
    add_subscriptions_call,
    body,
    check_ttl,
    end_txn_call,
    new_txn_call,
    raise_for,
)
from pulsar_txn._tc_connection import CLIENT_VERSION, DEFAULT_KEEP_ALIVE_S, TcConnection, checked_answer
from pulsar_txn.errors import (
    ConfigError,
    ConnectionClosed,
    ProtocolError,
    PulsarTxnError,
    ServerError,
    Timeout,
    TopicNotFound,
    TransactionCoordinatorNotFoundError,
)
from pulsar_txn.naming import service_host_port
from pulsar_txn.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    TC_ASSIGN_TOPIC,
    CommandLookupTopic,
    CommandTcClientConnectRequest,
    CommandType,
    LookupType,
    tc_assign_topic,
    wrap,
)
from pulsar_txn.txnid import TxnAction, TxnID

__all__ = ["CLIENT_VERSION", "SyncTcClient", "TcClient"]

log = logging.getLogger(__name__)

INITIAL_BACKOFF = 0.05
MAX_LOOKUP_REDIRECTS = 8
MAX_PROBED_TCS = 4096
_OWNER_HINT = re.compile(r"is owned by (pulsar(?:\+ssl)?://\S+)")

T = TypeVar("T")


def check_service_url(url: str) -> None:
    """``ConfigError`` unless ``url`` is a coordinator URL this client speaks (``pulsar://host:port``)."""
    service_host_port(url)


class TcClient:
    """Asyncio client of the transaction coordinators behind ``service_url``."""

    def __init__(
        self,
        service_url: str,
        *,
        auth_token: str | None = None,
        operation_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        max_retries_backoff: float = 1.0,
        num_tcs: int | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        keep_alive_interval: float = DEFAULT_KEEP_ALIVE_S,
    ) -> None:
        """``keep_alive_interval``: seconds without a byte from a coordinator before a PING; after
        twice that its connection is given up and its TCs looked up again (Pulsar's keep-alive)."""
        service_host_port(service_url)  # fail fast on a bad URL
        if min(operation_timeout, connect_timeout, max_retries_backoff, keep_alive_interval) <= 0:
            raise ConfigError(
                "operation_timeout, connect_timeout, max_retries_backoff and keep_alive_interval "
                "must be positive"
            )
        self._keep_alive = keep_alive_interval
        if num_tcs is not None and num_tcs < 1:
            raise ConfigError(f"num_tcs must be at least 1, got {num_tcs}")
        self.service_url = service_url
        self._token = auth_token
        self._operation_timeout = operation_timeout
        self._connect_timeout = connect_timeout
        self._max_backoff = max_retries_backoff
        self._max_frame = max_frame_size
        self._num_tcs = num_tcs
        self._discovered = False
        self._connections: dict[str, TcConnection] = {}
        self._url_locks: dict[str, asyncio.Lock] = {}
        self._connect_lock = asyncio.Lock()
        self._owners: dict[int, str] = {}
        self._round_robin = itertools.count()
        self._closed = False

    @property
    def num_tcs(self) -> int:
        if self._num_tcs is None:
            raise RuntimeError("the number of TCs is known after connect()")
        return self._num_tcs

    async def connect(self) -> None:
        """Connect to the service URL and learn the number of TCs. Optional: every call connects first."""
        await self._ensure_connected(self._deadline())

    async def new_txn(self, ttl_ms: int, tc_id: int | None = None) -> TxnID:
        """Open a transaction on ``tc_id`` (round-robin over TCs when None). ``ttl_ms=0`` means the
        coordinator's default. The value travels in ``txn_ttl_seconds`` as milliseconds, as Pulsar's
        own clients send it."""
        check_ttl(ttl_ms)
        await self._ensure_connected(self._deadline())
        return await self.run_call(new_txn_call(ttl_ms, self.pick_tc(tc_id)))

    async def add_partitions(self, txn_id: TxnID, partitions: Sequence[str]) -> None:
        await self.run_call(add_partitions_call(txn_id, partitions))

    async def add_subscriptions(self, txn_id: TxnID, subscriptions: Sequence[tuple[str, str]]) -> None:
        """``subscriptions`` are (topic, subscription name) pairs."""
        await self.run_call(add_subscriptions_call(txn_id, subscriptions))

    async def end_txn(self, txn_id: TxnID, action: TxnAction, token: bytes | None = None) -> None:
        await self.run_call(end_txn_call(txn_id, action, token))

    async def run_call(self, call: TcCall[T], budget: float | None = None) -> T:
        """One coordinator call: connect, look the owner up, send, retry until the deadline (the
        operation timeout from now, or ``budget`` seconds: what a failed fast-path try left)."""
        deadline = self._deadline() if budget is None else asyncio.get_running_loop().time() + budget
        await self._ensure_connected(deadline)

        async def attempt() -> T:
            conn = await self._tc_connection(call.tc_id)
            request_id = conn.next_request_id()
            return call.parse(await conn.request(call.build(request_id), call.response_type, request_id))

        def forget_owner(exc: PulsarTxnError) -> None:
            if (
                isinstance(exc, ConnectionClosed)
                or exc.server_error == ServerError.TransactionCoordinatorNotFound
            ):
                hint = _OWNER_HINT.search(str(exc))
                if hint:
                    self._owners[call.tc_id] = hint.group(1)
                else:
                    self._owners.pop(call.tc_id, None)
                for conn in self._connections.values():
                    conn.tc_ready.discard(call.tc_id)

        return await self._retrying(f"{call.what} on TC {call.tc_id}", attempt, deadline, forget_owner)

    def pick_tc(self, tc_id: int | None) -> int:
        """``tc_id``, or the next TC round-robin (after connect())."""
        return tc_id if tc_id is not None else next(self._round_robin) % self.num_tcs

    def ready_connection(self, tc_id: int) -> TcConnection | None:
        """The open connection on which ``tc_id`` is connected, if there is one now. Safe from any
        thread: it only reads (single dict and set lookups are atomic)."""
        if self._closed or not self._discovered:
            return None
        owner = self._owners.get(tc_id)
        conn = self._connections.get(owner) if owner is not None else None
        if conn is None or conn.closed or tc_id not in conn.tc_ready:
            return None
        return conn

    @property
    def connected(self) -> bool:
        """connect() has succeeded (the number of TCs is known)."""
        return self._discovered

    @property
    def operation_timeout(self) -> float:
        return self._operation_timeout

    async def close(self) -> None:
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(conn.close() for conn in connections), return_exceptions=True)

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- plumbing ------------------------------------------------------------------------------------

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self._operation_timeout

    async def _retrying(
        self,
        what: str,
        attempt: Callable[[], Awaitable[T]],
        deadline: float,
        on_retry: Callable[[PulsarTxnError], None] | None = None,
    ) -> T:
        loop = asyncio.get_running_loop()
        backoff = INITIAL_BACKOFF
        last: PulsarTxnError | None = None
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Timeout(f"{what} timed out after {self._operation_timeout}s" + _last(last))
            try:
                async with asyncio.timeout(remaining):
                    return await attempt()
            except TimeoutError:
                raise Timeout(f"{what} timed out after {self._operation_timeout}s" + _last(last)) from None
            except PulsarTxnError as exc:
                if self._closed or not exc.retriable or isinstance(exc, Timeout):
                    raise
                last = exc
                log.debug("%s failed, retrying in %.2fs: %s", what, backoff, exc)
                if on_retry is not None:
                    on_retry(exc)
            await asyncio.sleep(max(0.0, min(backoff, deadline - loop.time())))
            backoff = min(backoff * 2, self._max_backoff)

    async def _ensure_connected(self, deadline: float) -> None:
        if self._discovered:
            return
        try:
            async with asyncio.timeout_at(deadline):
                await self._connect_lock.acquire()
        except TimeoutError:
            raise Timeout(
                f"connect to {self.service_url} timed out after {self._operation_timeout}s"
            ) from None
        try:
            if self._discovered:
                return
            if self._num_tcs is None:
                self._num_tcs = await self._retrying("TC discovery", self._discover, deadline)
            else:
                await self._retrying("connect", lambda: self._connection(self.service_url), deadline)
            self._discovered = True
        finally:
            self._connect_lock.release()

    async def _discover(self) -> int:
        """Count TCs by probing LOOKUPs on the service URL until one says TopicNotFound.

        Any Connect or Redirect answer means the TC exists; redirects are not followed here, so an
        unreachable owner of one TC does not stop the client from starting."""
        conn = await self._connection(self.service_url)
        count = 0
        while count < MAX_PROBED_TCS:
            request_id = conn.next_request_id()
            cmd = CommandLookupTopic(topic=tc_assign_topic(count), request_id=request_id)
            answer = await conn.request(wrap(cmd), CommandType.LOOKUP_RESPONSE, request_id)
            response = body(answer.lookup_topic_response)
            if response.response == LookupType.Connect and response.broker_service_url:
                self._owners[count] = response.broker_service_url
            elif response.response != LookupType.Redirect:
                if response.error == ServerError.TopicNotFound:
                    break
                if response.error != ServerError.ServiceNotReady:  # not ready yet still exists
                    raise_for(response.error, response.message)
                    raise ProtocolError(f"lookup of TC {count}: response {response.response}")
            count += 1
        if count == 0:
            raise TopicNotFound(f"{TC_ASSIGN_TOPIC} has no partitions at {self.service_url}")
        log.debug("%s has %d TCs", self.service_url, count)
        return count

    async def _lookup(self, tc_id: int) -> str:
        """The owner URL of ``tc_id``, asking the service URL and following Redirects."""
        url = self.service_url
        authoritative = False
        for _ in range(MAX_LOOKUP_REDIRECTS):
            conn = await self._connection(url)
            request_id = conn.next_request_id()
            cmd = CommandLookupTopic(
                topic=tc_assign_topic(tc_id), request_id=request_id, authoritative=authoritative
            )
            answer = await conn.request(wrap(cmd), CommandType.LOOKUP_RESPONSE, request_id)
            response = body(answer.lookup_topic_response)
            if response.response == LookupType.Connect:
                return response.broker_service_url or url
            if response.response == LookupType.Redirect and response.broker_service_url:
                url = response.broker_service_url
                authoritative = response.authoritative
                continue
            if response.error == ServerError.TopicNotFound:  # e.g. the TC of a made-up TxnID
                raise TransactionCoordinatorNotFoundError(
                    f"TC {tc_id} does not exist at {url} (its assign topic has no such partition)",
                    retriable=False,
                )
            raise_for(
                response.error if response.error is not None else ServerError.UnknownError, response.message
            )
            raise ProtocolError(f"lookup of TC {tc_id} at {url}: response {response.response}")
        raise ConnectionClosed(f"lookup of TC {tc_id}: more than {MAX_LOOKUP_REDIRECTS} redirects")

    async def _connection(self, url: str) -> TcConnection:
        if self._closed:
            raise ConnectionClosed("the TC client is closed", retriable=False)
        conn = self._connections.get(url)
        if conn is not None and not conn.closed:
            return conn
        async with self._url_locks.setdefault(url, asyncio.Lock()):
            conn = self._connections.get(url)
            if conn is not None and not conn.closed:
                return conn
            if conn is not None:
                await conn.close()
            host, port = service_host_port(url)
            conn = await TcConnection.open(
                host,
                port,
                url,
                self._token,
                self._connect_timeout,
                self._max_frame,
                self._keep_alive,
                # A frame's write never outlasts a call (it blocks its caller: maybe the event loop).
                write_timeout=min(self._connect_timeout, self._operation_timeout),
            )
            if self._closed:  # close() ran while we were connecting
                await conn.close()
                raise ConnectionClosed("the TC client is closed", retriable=False)
            self._connections[url] = conn
            return conn

    async def _tc_connection(self, tc_id: int) -> TcConnection:
        """A connection to the owner of ``tc_id`` on which TC_CLIENT_CONNECT has succeeded."""
        owner = self._owners.get(tc_id)
        known = self._connections.get(owner) if owner is not None else None
        if known is not None and known.closed:
            owner = None  # its connection went away (e.g. given up by the keep-alive): the TC may have moved
        if owner is None:
            owner = self._owners[tc_id] = await self._lookup(tc_id)
        conn = await self._connection(owner)
        if tc_id in conn.tc_ready:
            return conn
        async with conn.tc_lock:
            if tc_id not in conn.tc_ready:
                request_id = conn.next_request_id()
                cmd = CommandTcClientConnectRequest(request_id=request_id, tc_id=tc_id)
                answer = await conn.request(wrap(cmd), CommandType.TC_CLIENT_CONNECT_RESPONSE, request_id)
                response = body(answer.tc_client_connect_response)
                raise_for(response.error, response.message)
                conn.tc_ready.add(tc_id)
        return conn


def _last(error: PulsarTxnError | None) -> str:
    return f" (last error: {type(error).__name__}: {error})" if error is not None else ""


class SyncTcClient:
    """Blocking facade: a ``TcClient`` on a private event loop in a daemon thread.

    Once a TC's connection is ready, calls to it take a fast path: the request is written from the
    calling thread and the connection's reader thread completes it. Anything else (the first call,
    a lookup, a retriable failure) goes through the ``TcClient`` on the loop, with its lookups and
    retries."""

    def __init__(
        self,
        service_url: str,
        *,
        auth_token: str | None = None,
        operation_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        max_retries_backoff: float = 1.0,
        num_tcs: int | None = None,
        keep_alive_interval: float = DEFAULT_KEEP_ALIVE_S,
    ) -> None:
        self._client = TcClient(
            service_url,
            auth_token=auth_token,
            operation_timeout=operation_timeout,
            connect_timeout=connect_timeout,
            max_retries_backoff=max_retries_backoff,
            num_tcs=num_tcs,
            keep_alive_interval=keep_alive_interval,
        )
        self._loop = _loops.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="pulsar-txn-tc-client", daemon=True)
        self._thread.start()
        self._closed = False

    def _run_loop(self) -> None:
        mark_callback_thread()  # answers (and the futures' callbacks) come from here
        self._loop.run_forever()

    @property
    def num_tcs(self) -> int:
        return self._client.num_tcs

    def connect(self) -> None:
        self._run(self._client.connect())

    def new_txn(self, ttl_ms: int, tc_id: int | None = None) -> TxnID:
        call = self._new_txn_call(ttl_ms, tc_id)
        return self._run(self._client.new_txn(ttl_ms, tc_id)) if call is None else self._call(call)

    def new_txn_async(self, ttl_ms: int, tc_id: int | None = None) -> concurrent.futures.Future[TxnID]:
        call = self._new_txn_call(ttl_ms, tc_id)
        return self.submit(self._client.new_txn(ttl_ms, tc_id)) if call is None else self._call_async(call)

    def add_partitions(self, txn_id: TxnID, partitions: Sequence[str]) -> None:
        self._call(add_partitions_call(txn_id, partitions))

    def add_partitions_async(
        self, txn_id: TxnID, partitions: Sequence[str]
    ) -> concurrent.futures.Future[None]:
        return self._call_async(add_partitions_call(txn_id, partitions))

    def add_subscriptions(self, txn_id: TxnID, subscriptions: Sequence[tuple[str, str]]) -> None:
        self._call(add_subscriptions_call(txn_id, subscriptions))

    def add_subscriptions_async(
        self, txn_id: TxnID, subscriptions: Sequence[tuple[str, str]]
    ) -> concurrent.futures.Future[None]:
        return self._call_async(add_subscriptions_call(txn_id, subscriptions))

    def end_txn(self, txn_id: TxnID, action: TxnAction, token: bytes | None = None) -> None:
        self._call(end_txn_call(txn_id, action, token))

    def end_txn_async(
        self, txn_id: TxnID, action: TxnAction, token: bytes | None = None
    ) -> concurrent.futures.Future[None]:
        """``token``: the ending handle's (see ``CommandEndTxn.end_token``)."""
        return self._call_async(end_txn_call(txn_id, action, token))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self._client.close(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine of the underlying ``TcClient`` (``.aio``) without waiting for it."""
        if self._closed:
            coro.close()  # never started; closing it avoids a "never awaited" warning
            raise ConnectionClosed("the TC client is closed", retriable=False)
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @property
    def aio(self) -> TcClient:
        """The asyncio client this facade drives (its coroutines go through ``submit``)."""
        return self._client

    # -- the fast path -------------------------------------------------------------------------------

    def _new_txn_call(self, ttl_ms: int, tc_id: int | None) -> TcCall[TxnID] | None:
        """NEW_TXN's call once the number of TCs is known (else None: the loop's path learns it)."""
        check_ttl(ttl_ms)
        if tc_id is None and not self._client.connected:
            return None  # round-robin needs the number of TCs, which connect() learns
        return new_txn_call(ttl_ms, self._client.pick_tc(tc_id))

    def _send(self, call: TcCall[T]) -> concurrent.futures.Future[Any] | None:
        """The call's request written from this thread on its TC's ready connection, or None."""
        conn = None if self._closed else self._client.ready_connection(call.tc_id)
        if conn is None:
            return None
        request_id = conn.next_request_id()
        deadline = time.monotonic() + self._client.operation_timeout
        return conn.request_threadsafe(call.build(request_id), call.response_type, request_id, deadline)

    def _call(self, call: TcCall[T]) -> T:
        started = time.monotonic()
        sent = self._send(call)
        if sent is not None:
            try:
                return call.parse(checked_answer(sent, self._client.operation_timeout + 1.0))
            except PulsarTxnError as exc:
                if not _worth_the_slow_path(exc) or self._closed:
                    raise
                log.debug("%s on TC %d failed on the fast path, retrying: %s", call.what, call.tc_id, exc)
                return self._run(self._client.run_call(call, self._left(call, started, exc)))
        return self._run(self._client.run_call(call))

    def _left(self, call: TcCall[Any], started: float, failure: PulsarTxnError) -> float:
        """What the operation timeout leaves for the slow path after a failed fast-path try: the
        call as a whole ends within it (a fresh timeout there made it take up to twice as long)."""
        left = self._client.operation_timeout - (time.monotonic() - started)
        if left <= 0:
            raise Timeout(
                f"{call.what} on TC {call.tc_id} timed out after {self._client.operation_timeout}s"
                + _last(failure)
            )
        return left

    def _call_async(self, call: TcCall[T]) -> concurrent.futures.Future[T]:
        started = time.monotonic()
        sent = self._send(call)
        if sent is None:
            return self.submit(self._client.run_call(call))
        result: LazyFuture[T] = LazyFuture()

        def done(answer: concurrent.futures.Future[Any]) -> None:
            try:
                result.set_result(call.parse(checked_answer(answer, 0)))
            except PulsarTxnError as exc:
                if not _worth_the_slow_path(exc) or self._closed:
                    result.set_exception(exc)
                    return
                try:
                    left = self._left(call, started, exc)
                    relay(self.submit(self._client.run_call(call, left)), result, _same)
                except PulsarTxnError as closed:
                    result.set_exception(closed)
            except BaseException as exc:  # a bug in parsing must still end the future
                result.set_exception(exc)

        sent.add_done_callback(done)
        return result


def _worth_the_slow_path(exc: PulsarTxnError) -> bool:
    """A retriable failure other than the deadline passing: the loop's path looks up and retries."""
    return exc.retriable and not isinstance(exc, Timeout)


def _same(value: T) -> T:
    return value
