"""A transaction-coordinator client speaking Pulsar's binary protocol, like Pulsar's Java TC client.

Per TC it looks the owner up (LOOKUP of ``transaction_coordinator_assign-partition-N`` on the service
URL, following Redirects), keeps one connection per owner URL and sends TC_CLIENT_CONNECT once per
(connection, TC). Every call is bounded by ``operation_timeout``; retriable failures (ServiceNotReady,
TransactionCoordinatorNotFound, a dropped connection, ...) are retried with exponential back-off from
50 ms up to ``max_retries_backoff``, looking the owner up again when ownership may have moved.

The number of TCs is ``num_tcs`` when given; otherwise ``connect()`` probes LOOKUPs for partitions
0, 1, 2, ... until one answers Failed/TopicNotFound, and that index is the count.

``SyncTcClient`` runs a ``TcClient`` on a private event loop in a daemon thread for non-async callers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit

from pulsar_txn.errors import (
    ConfigError,
    ConnectionClosed,
    ProtocolError,
    PulsarTxnError,
    ServerError,
    Timeout,
    TopicNotFound,
    error_from_server,
)
from pulsar_txn.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    PROTOCOL_VERSION,
    TC_ASSIGN_TOPIC,
    BaseCommand,
    CommandAddPartitionToTxn,
    CommandAddSubscriptionToTxn,
    CommandConnect,
    CommandConnected,
    CommandEndTxn,
    CommandLookupTopic,
    CommandNewTxn,
    CommandPong,
    CommandTcClientConnectRequest,
    CommandType,
    FrameDecoder,
    LookupType,
    Subscription,
    encode_command,
    tc_assign_topic,
    type_name,
    wrap,
)
from pulsar_txn.txnid import TxnAction, TxnID

__all__ = ["CLIENT_VERSION", "SyncTcClient", "TcClient"]

log = logging.getLogger(__name__)

CLIENT_VERSION = "pulsar-txn-tc-client-0.1"
INITIAL_BACKOFF = 0.05
MAX_LOOKUP_REDIRECTS = 8
MAX_PROBED_TCS = 4096
_READ_SIZE = 64 * 1024
_OWNER_HINT = re.compile(r"is owned by (pulsar(?:\+ssl)?://\S+)")

T = TypeVar("T")


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme != "pulsar" or not parts.hostname:
        raise ConfigError(f"service URL {url!r}: expected pulsar://host:port")
    return parts.hostname, parts.port or 6650


class _Connection:
    """One connection to one endpoint: handshake, request/response correlation, PONGs."""

    def __init__(self, url: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_frame: int):
        self.url = url
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(max_frame)
        self._ids = itertools.count()
        # Keyed by (response type, request_id): Pulsar correlates by kind as well as id.
        self._pending: dict[tuple[int, int], asyncio.Future[BaseCommand]] = {}
        self._handshake: asyncio.Future[CommandConnected] = asyncio.get_running_loop().create_future()
        self._read_task: asyncio.Task[None] | None = None
        self.closed = False
        self.tc_ready: set[int] = set()
        self.tc_lock = asyncio.Lock()

    @classmethod
    async def open(cls, url: str, token: str | None, connect_timeout: float, max_frame: int) -> _Connection:
        host, port = _host_port(url)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise ConnectionClosed(f"cannot connect to {url}: {exc or 'timed out'}") from exc
        conn = cls(url, reader, writer, max_frame)
        conn._read_task = asyncio.create_task(conn._read_loop())
        try:
            connect = CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
            if token is not None:
                connect.auth_method_name = "token"
                connect.auth_data = token.encode()
            conn._write(wrap(connect))
            async with asyncio.timeout(connect_timeout):
                connected = await conn._handshake
        except TimeoutError:
            await conn.close()
            raise ConnectionClosed(f"no CONNECTED from {url} within {connect_timeout}s") from None
        except BaseException:
            await conn.close()
            raise
        log.debug(
            "connected to %s (%r, protocol v%d)", url, connected.server_version, connected.protocol_version
        )
        return conn

    def next_request_id(self) -> int:
        return next(self._ids)

    async def request(self, base: BaseCommand, response_type: CommandType, request_id: int) -> BaseCommand:
        """Send ``base`` and wait for its answer; a CommandError answer is raised as its exception."""
        if self.closed:
            raise ConnectionClosed(f"connection to {self.url} is closed")
        key = (int(response_type), request_id)
        future: asyncio.Future[BaseCommand] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            self._write(base)
            await self._writer.drain()
            answer = await future
        except OSError as exc:
            raise ConnectionClosed(f"connection to {self.url} lost: {exc}") from exc
        finally:
            self._pending.pop(key, None)
        if answer.error is not None:
            raise error_from_server(answer.error.error, answer.error.message)
        return answer

    async def close(self) -> None:
        self.closed = True
        self._writer.close()
        if self._read_task is not None:
            self._read_task.cancel()
            await asyncio.gather(self._read_task, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    def _write(self, base: BaseCommand) -> None:
        if self._writer.is_closing():
            raise ConnectionClosed(f"connection to {self.url} is closed")
        self._writer.write(encode_command(base))

    async def _read_loop(self) -> None:
        reason = "closed by the server"
        try:
            while True:
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    break
                for frame in self._decoder.feed(data):
                    self._on_command(frame.command)
        except (OSError, ProtocolError) as exc:
            reason = str(exc)
            log.warning("connection to %s failed: %s", self.url, exc)
        finally:
            self.closed = True
            self._writer.close()
            self._fail_all(ConnectionClosed(f"connection to {self.url} {reason}"))

    def _on_command(self, base: BaseCommand) -> None:
        kind = base.type
        if kind == CommandType.PING:
            if not self._writer.is_closing():
                self._writer.write(encode_command(wrap(CommandPong())))
        elif kind == CommandType.PONG:
            pass
        elif kind == CommandType.CONNECTED and base.connected is not None:
            if not self._handshake.done():
                self._handshake.set_result(base.connected)
        elif kind == CommandType.ERROR and base.error is not None:
            if not self._handshake.done():
                self._handshake.set_exception(error_from_server(base.error.error, base.error.message))
                return
            # An ERROR answers whichever request has its id (ids are unique per connection here).
            for key in [k for k in self._pending if k[1] == base.error.request_id]:
                future = self._pending.pop(key)
                if not future.done():
                    future.set_result(base)
        else:
            inner = base.inner()
            request_id = getattr(inner, "request_id", None)
            waiter = self._pending.pop((kind, request_id), None) if isinstance(request_id, int) else None
            if waiter is None:
                log.debug("unexpected %s from %s", type_name(kind), self.url)
            elif not waiter.done():
                waiter.set_result(base)

    def _fail_all(self, exc: PulsarTxnError) -> None:
        if not self._handshake.done():
            self._handshake.set_exception(exc)
            self._handshake.exception()  # retrieved here: nobody may be waiting any more
        for future in self._pending.values():
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()


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
    ) -> None:
        _host_port(service_url)  # fail fast on a bad URL
        if operation_timeout <= 0 or connect_timeout <= 0 or max_retries_backoff <= 0:
            raise ConfigError("operation_timeout, connect_timeout and max_retries_backoff must be positive")
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
        self._connections: dict[str, _Connection] = {}
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
        if ttl_ms < 0:
            raise ConfigError(f"ttl_ms must not be negative, got {ttl_ms}")
        deadline = self._deadline()
        await self._ensure_connected(deadline)
        tc = tc_id if tc_id is not None else next(self._round_robin) % self.num_tcs

        async def op(conn: _Connection) -> TxnID:
            request_id = conn.next_request_id()
            cmd = CommandNewTxn(request_id=request_id, txn_ttl_seconds=ttl_ms, tc_id=tc)
            answer = await conn.request(wrap(cmd), CommandType.NEW_TXN_RESPONSE, request_id)
            response = _body(answer.new_txn_response)
            _raise_for(response.error, response.message)
            return TxnID(response.txnid_most_bits, response.txnid_least_bits)

        return await self._on_tc(tc, "NEW_TXN", op, deadline)

    async def add_partitions(self, txn_id: TxnID, partitions: Sequence[str]) -> None:
        async def op(conn: _Connection) -> None:
            request_id = conn.next_request_id()
            cmd = CommandAddPartitionToTxn(
                request_id=request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
                partitions=list(partitions),
            )
            answer = await conn.request(wrap(cmd), CommandType.ADD_PARTITION_TO_TXN_RESPONSE, request_id)
            response = _body(answer.add_partition_to_txn_response)
            _raise_for(response.error, response.message)

        await self._txn_call(txn_id, "ADD_PARTITION_TO_TXN", op)

    async def add_subscriptions(self, txn_id: TxnID, subscriptions: Sequence[tuple[str, str]]) -> None:
        """``subscriptions`` are (topic, subscription name) pairs."""

        async def op(conn: _Connection) -> None:
            request_id = conn.next_request_id()
            cmd = CommandAddSubscriptionToTxn(
                request_id=request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
                subscription=[Subscription(topic=t, subscription=s) for t, s in subscriptions],
            )
            answer = await conn.request(wrap(cmd), CommandType.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, request_id)
            response = _body(answer.add_subscription_to_txn_response)
            _raise_for(response.error, response.message)

        await self._txn_call(txn_id, "ADD_SUBSCRIPTION_TO_TXN", op)

    async def end_txn(self, txn_id: TxnID, action: TxnAction) -> None:
        async def op(conn: _Connection) -> None:
            request_id = conn.next_request_id()
            cmd = CommandEndTxn(
                request_id=request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
                txn_action=action,
            )
            answer = await conn.request(wrap(cmd), CommandType.END_TXN_RESPONSE, request_id)
            response = _body(answer.end_txn_response)
            _raise_for(response.error, response.message)

        await self._txn_call(txn_id, f"END_TXN({action.name})", op)

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

    async def _txn_call(self, txn_id: TxnID, what: str, op: Callable[[_Connection], Awaitable[None]]) -> None:
        deadline = self._deadline()
        await self._ensure_connected(deadline)
        await self._on_tc(txn_id.tc_id, what, op, deadline)

    async def _on_tc(
        self, tc_id: int, what: str, op: Callable[[_Connection], Awaitable[T]], deadline: float
    ) -> T:
        async def attempt() -> T:
            return await op(await self._tc_connection(tc_id))

        def forget_owner(exc: PulsarTxnError) -> None:
            if (
                isinstance(exc, ConnectionClosed)
                or exc.server_error == ServerError.TransactionCoordinatorNotFound
            ):
                hint = _OWNER_HINT.search(str(exc))
                if hint:
                    self._owners[tc_id] = hint.group(1)
                else:
                    self._owners.pop(tc_id, None)
                for conn in self._connections.values():
                    conn.tc_ready.discard(tc_id)

        return await self._retrying(f"{what} on TC {tc_id}", attempt, deadline, forget_owner)

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
            response = _body(answer.lookup_topic_response)
            if response.response == LookupType.Connect and response.broker_service_url:
                self._owners[count] = response.broker_service_url
            elif response.response != LookupType.Redirect:
                if response.error == ServerError.TopicNotFound:
                    break
                if response.error != ServerError.ServiceNotReady:  # not ready yet still exists
                    _raise_for(response.error, response.message)
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
            response = _body(answer.lookup_topic_response)
            if response.response == LookupType.Connect:
                return response.broker_service_url or url
            if response.response == LookupType.Redirect and response.broker_service_url:
                url = response.broker_service_url
                authoritative = response.authoritative
                continue
            _raise_for(
                response.error if response.error is not None else ServerError.UnknownError, response.message
            )
            raise ProtocolError(f"lookup of TC {tc_id} at {url}: response {response.response}")
        raise ConnectionClosed(f"lookup of TC {tc_id}: more than {MAX_LOOKUP_REDIRECTS} redirects")

    async def _connection(self, url: str) -> _Connection:
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
            conn = await _Connection.open(url, self._token, self._connect_timeout, self._max_frame)
            if self._closed:  # close() ran while we were connecting
                await conn.close()
                raise ConnectionClosed("the TC client is closed", retriable=False)
            self._connections[url] = conn
            return conn

    async def _tc_connection(self, tc_id: int) -> _Connection:
        """A connection to the owner of ``tc_id`` on which TC_CLIENT_CONNECT has succeeded."""
        owner = self._owners.get(tc_id)
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
                response = _body(answer.tc_client_connect_response)
                _raise_for(response.error, response.message)
                conn.tc_ready.add(tc_id)
        return conn


def _body(value: T | None) -> T:
    if value is None:
        raise ProtocolError("response without its command body")
    return value


def _raise_for(error: int | None, message: str | None) -> None:
    if error is not None:
        raise error_from_server(error, message or "")


def _last(error: PulsarTxnError | None) -> str:
    return f" (last error: {type(error).__name__}: {error})" if error is not None else ""


class SyncTcClient:
    """Blocking facade: a ``TcClient`` on a private event loop in a daemon thread."""

    def __init__(
        self,
        service_url: str,
        *,
        auth_token: str | None = None,
        operation_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        max_retries_backoff: float = 1.0,
        num_tcs: int | None = None,
    ) -> None:
        self._client = TcClient(
            service_url,
            auth_token=auth_token,
            operation_timeout=operation_timeout,
            connect_timeout=connect_timeout,
            max_retries_backoff=max_retries_backoff,
            num_tcs=num_tcs,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="pulsar-txn-tc-client", daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def num_tcs(self) -> int:
        return self._client.num_tcs

    def connect(self) -> None:
        self._run(self._client.connect())

    def new_txn(self, ttl_ms: int, tc_id: int | None = None) -> TxnID:
        return self._run(self._client.new_txn(ttl_ms, tc_id))

    def add_partitions(self, txn_id: TxnID, partitions: Sequence[str]) -> None:
        self._run(self._client.add_partitions(txn_id, partitions))

    def add_subscriptions(self, txn_id: TxnID, subscriptions: Sequence[tuple[str, str]]) -> None:
        self._run(self._client.add_subscriptions(txn_id, subscriptions))

    def end_txn(self, txn_id: TxnID, action: TxnAction) -> None:
        self._run(self._client.end_txn(txn_id, action))

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
