"""The coordinator's network face: Pulsar's binary protocol on asyncio, calling into a ``CoordinatorApi``.

Each connection must open with CONNECT (token-checked when a token is configured). After that every
request runs as its own task, so a slow END_TXN never holds up a PING, and responses go out in the
order they finish. Client input never crashes the server: a malformed stream gets an ERROR and is
closed, an unknown command gets an ERROR and the connection carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pulsar_txn._listen import start_server
from pulsar_txn.coordinator.api import CoordinatorApi
from pulsar_txn.errors import ProtocolError, PulsarTxnError, ServerError, TransactionCoordinatorNotFoundError
from pulsar_txn.naming import WILDCARD_HOSTS
from pulsar_txn.protocol import (
    PROTOCOL_VERSION,
    TC_ASSIGN_TOPIC,
    TC_CONNECT_MIN_PROTOCOL_VERSION,
    BaseCommand,
    CommandAddPartitionToTxnResponse,
    CommandAddSubscriptionToTxnResponse,
    CommandConnected,
    CommandEndTxnResponse,
    CommandError,
    CommandLookupTopicResponse,
    CommandNewTxnResponse,
    CommandPartitionedTopicMetadataResponse,
    CommandPing,
    CommandPong,
    CommandTcClientConnectResponse,
    CommandType,
    Frame,
    FrameDecoder,
    FrameTooLargeError,
    LookupType,
    Message,
    PartitionedMetadataResult,
    encode_command,
    parse_tc_assign_topic,
    type_name,
    wrap,
)
from pulsar_txn.txnid import TxnAction, TxnID

__all__ = ["SERVER_VERSION", "CoordinatorServer"]

log = logging.getLogger(__name__)

SERVER_VERSION = "pulsar-txn-0.1"
TTL_FIELD_UNIT_MS = 1
"""CommandNewTxn.txn_ttl_seconds carries *milliseconds*, despite its name: that is what Pulsar's own
clients send (``Commands.newTxn(tcId, requestId, unit.toMillis(timeout))``), so we read it the same way."""

_READ_SIZE = 64 * 1024
_WRITE_HIGH_WATER = 1 << 20  # bytes buffered for a client before a response waits for it to read
_INT32_MAX = (1 << 31) - 1
_INTERNAL_ERROR = "internal error in the transaction coordinator"
_MAX_PRE_CONNECT_BYTES = 64 * 1024
_CLOSE_FLUSH_S = 2.0  # a closing connection's last answers get this long to be read
"""Bytes buffered from a peer that has not yet CONNECTed. A CONNECT (even with a large token) is far
smaller; without this an unauthenticated peer could make us hold a whole max-size frame per connection."""
_MAX_IN_FLIGHT = 1024
"""Requests of one connection being handled at once; reading waits below it (and while the answers
wait for the client to read them), so a client that sends without reading cannot grow our memory."""
_MAX_IN_FLIGHT_BYTES = 16 * 1024 * 1024
"""And the bytes of those requests: 1,024 requests of a whole frame each (an END_TXN waiting for a
missing topic's grace, repeated) held gigabytes."""
COORDINATOR_MAX_FRAME_SIZE = 1024 * 1024
"""The coordinator's default frame limit (Pulsar's 5 MB is for messages): its commands are ~100
bytes, an ADD_PARTITION_TO_TXN of thousands of partitions fits, and decoding one frame holds the
event loop (~0.5 s per MB), so a larger one stalls every connection and the coordinator."""
_END_TOKEN_MAX = 64  # bytes of END_TXN's end_token (ours: 8), kept until the transaction retires
_ECHO_MAX = 256  # characters of a client's topic name quoted back in an error

T = TypeVar("T")
_Handler = Callable[[BaseCommand], Awaitable[BaseCommand]]


class CoordinatorServer:
    """Serves one coordinator instance's TCs over TCP."""

    def __init__(
        self,
        api: CoordinatorApi,
        host: str = "127.0.0.1",
        port: int = 0,
        auth_token: str | None = None,
        advertised_url: str | None = None,
        max_frame_size: int = COORDINATOR_MAX_FRAME_SIZE,
        ping_interval: float = 30.0,
        max_connections: int = 0,
        max_connections_per_ip: int = 0,
    ) -> None:
        """``max_connections`` / ``max_connections_per_ip``: 0 means no limit (Pulsar's
        brokerMaxConnections / maxConnectionsPerIp); a connection over a limit is closed at once."""
        if ping_interval <= 0:
            raise ValueError("ping_interval must be positive")
        if max_connections < 0 or max_connections_per_ip < 0:
            raise ValueError("connection limits must be >= 0 (0: no limit)")
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._per_ip: Counter[str] = Counter()
        self.refused_connections = 0
        self.evicted_connections = 0  # closed without CONNECT to make room for a new connection
        self.failed_authentications = 0
        self.api = api
        self.host = host
        self.max_frame_size = max_frame_size
        self.ping_interval = ping_interval
        self._requested_port = port
        self._token = auth_token.encode() if auth_token is not None else None
        self._advertised_url = advertised_url
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._connections: dict[_Connection, asyncio.Task[Any]] = {}

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def url(self) -> str:
        """The ``pulsar://host:port`` clients are sent to for TCs this instance owns. Bound to every
        interface without an advertised URL: this machine's host name, as Pulsar's broker
        advertises (``0.0.0.0`` reaches no one else)."""
        if self._advertised_url:
            return self._advertised_url
        host = socket.gethostname() if self.host in WILDCARD_HOSTS else self.host
        return f"pulsar://{host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the server is already started")
        self._server = await start_server(self._accept, self.host, self._requested_port, "the coordinator")
        self._port = self._server.sockets[0].getsockname()[1]
        log.info(
            "transaction coordinator listening on %s:%d (advertised %s)", self.host, self._port, self.url
        )

    async def stop(self) -> None:
        """Stop listening and close every connection; in-flight requests are cancelled."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = list(self._connections.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A socket aborted by a connection's clean-up is released by a callback on the next loop
        # iteration: let it run, so stop() returns with every socket closed (a loop ended right
        # after stop() left them open: unclosed-transport warnings when collected).
        await asyncio.sleep(0)
        await server.wait_closed()
        log.info("transaction coordinator on %s stopped", self.url)

    def token_matches(self, auth_method_name: str | None, auth_data: bytes | None) -> bool:
        if self._token is None:
            return True
        if auth_method_name != "token" or auth_data is None:
            return False
        return hmac.compare_digest(auth_data, self._token)

    def _over_limit(self, ip: str) -> str | None:
        """Which connection limit a new connection from ``ip`` would pass, or None."""
        # The per-IP limit first: a connection refused anyway must not close another one.
        if self.max_connections_per_ip and self._per_ip[ip] >= self.max_connections_per_ip:
            return f"max_connections_per_ip ({self.max_connections_per_ip})"
        if (
            self.max_connections
            and len(self._connections) >= self.max_connections
            and not self._evict_unconnected()
        ):
            return f"max_connections ({self.max_connections})"
        return None

    def _evict_unconnected(self) -> bool:
        """Close the oldest connection that has not sent CONNECT yet, to make room for a new one;
        False if every connection is a client's. Refusing the new one instead let anyone (no token
        needed) hold every place with connections that never authenticate, locking clients out."""
        for conn in self._connections:  # oldest first
            if not conn.connected and not conn.evicted:
                conn.evict()
                self.evicted_connections += 1
                if self.evicted_connections % 100 == 1:
                    log.warning(
                        "connection from %s closed for a new one: max_connections (%d) reached and "
                        "it sent no CONNECT (%d closed so far)",
                        conn.peer,
                        self.max_connections,
                        self.evicted_connections,
                    )
                return True
        return False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        limit = self._over_limit(ip)
        if limit is not None:
            self.refused_connections += 1
            # One line per 100 refusals: a line for each would let a flood fill the log.
            if self.refused_connections % 100 == 1:
                log.warning(
                    "connection from %s refused: %s reached (%d refused so far)",
                    ip,
                    limit,
                    self.refused_connections,
                )
            writer.transport.abort()
            return
        conn = _Connection(self, reader, writer)
        task = asyncio.current_task()
        assert task is not None
        self._connections[conn] = task
        self._per_ip[ip] += 1
        try:
            await conn.run()
        except asyncio.CancelledError:
            pass  # stop() cancelled us; conn.run() has cleaned up
        except Exception:
            log.exception("connection from %s failed", conn.peer)
        finally:
            self._connections.pop(conn, None)
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]


class _Connection:
    """One client connection: handshake, dispatch, keep-alive and clean-up."""

    def __init__(self, server: CoordinatorServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._server = server
        self._api = server.api
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(server.max_frame_size)
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        self._last_received = self._loop.time()
        self._connected = False
        self.evicted = False  # closed to make room (see CoordinatorServer._evict_unconnected)
        self._protocol_version = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight_bytes = 0  # of the requests in ``_tasks``
        self.peer = str(writer.get_extra_info("peername"))
        self._handlers: dict[int, _Handler] = {
            CommandType.TC_CLIENT_CONNECT_REQUEST: self._tc_client_connect,
            CommandType.NEW_TXN: self._new_txn,
            CommandType.ADD_PARTITION_TO_TXN: self._add_partition_to_txn,
            CommandType.ADD_SUBSCRIPTION_TO_TXN: self._add_subscription_to_txn,
            CommandType.END_TXN: self._end_txn,
            CommandType.LOOKUP: self._lookup,
            CommandType.PARTITIONED_METADATA: self._partitioned_metadata,
        }

    @property
    def connected(self) -> bool:
        """Whether the client sent an accepted CONNECT."""
        return self._connected

    def evict(self) -> None:
        self.evicted = True
        self._writer.transport.abort()  # the read loop ends on it, and the clean-up runs

    async def run(self) -> None:
        keepalive = asyncio.create_task(self._keepalive())
        try:
            await self._read_loop()
        finally:
            # Close before any await: stop() may cancel us mid-clean-up.
            self._flush()  # e.g. the ERROR that explains why we close
            self._writer.close()
            keepalive.cancel()
            for task in self._tasks:
                task.cancel()
            try:
                # stop() may cancel us here too: then the socket is aborted below, never left
                # closing with unsent answers (an unclosed-transport warning once the loop is gone).
                await asyncio.gather(keepalive, *self._tasks, return_exceptions=True)
                # close() waits for what is buffered to be written: a peer that does not read would
                # hold the socket (and stop()) for good, so the flush gets a bounded time.
                async with asyncio.timeout(_CLOSE_FLUSH_S):
                    await self._writer.wait_closed()
            except TimeoutError:
                log.info("connection from %s: answers left unread; dropping them", self.peer)
                self._writer.transport.abort()
            except asyncio.CancelledError:  # stop() while flushing: do not leave it half closed
                self._writer.transport.abort()
                raise
            except Exception:  # the peer reset the connection: closed either way
                pass
            log.debug("connection from %s closed", self.peer)

    async def _read_loop(self) -> None:
        while True:
            await self._backpressure()
            try:
                data = await self._reader.read(_READ_SIZE)
            except OSError as exc:
                log.info("connection from %s lost: %s", self.peer, exc)
                return
            if not data:
                return
            self._last_received = self._loop.time()
            try:
                frames = self._decoder.feed(data)
            except FrameTooLargeError as exc:
                log.warning("closing connection from %s: %s", self.peer, exc)
                return
            except ProtocolError as exc:
                log.warning("closing connection from %s: malformed frame: %s", self.peer, exc)
                await self._send_error(0, ServerError.UnknownError, f"malformed frame: {exc}")
                return
            for frame in frames:
                if not await self._dispatch(frame):
                    return
            if not self._connected and self._decoder.buffered > _MAX_PRE_CONNECT_BYTES:
                log.warning(
                    "closing connection from %s: over %d bytes before CONNECT",
                    self.peer,
                    _MAX_PRE_CONNECT_BYTES,
                )
                return

    async def _backpressure(self) -> None:
        """Read on only once the client reads its answers and its requests in hand are few."""
        while self._tasks and (
            len(self._tasks) >= _MAX_IN_FLIGHT or self._in_flight_bytes >= _MAX_IN_FLIGHT_BYTES
        ):
            await asyncio.wait(set(self._tasks), return_when=asyncio.FIRST_COMPLETED)
        if self._writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            try:
                await self._writer.drain()
            except OSError:
                return  # the read that follows sees the connection gone

    async def _dispatch(self, frame: Frame) -> bool:
        """Handle one frame; False means close the connection."""
        base = frame.command
        name = type_name(base.type)
        if base.inner() is None and base.type in _WITH_BODY:
            log.warning("closing connection from %s: %s without its command body", self.peer, name)
            await self._send_error(0, ServerError.UnknownError, f"malformed frame: {name} without its body")
            return False
        if not self._connected:
            if base.type != CommandType.CONNECT:
                log.info("closing connection from %s: %s before CONNECT", self.peer, name)
                await self._send_error(0, ServerError.NotAllowedError, f"expected CONNECT, got {name}")
                return False
            return await self._connect(base)
        if base.type == CommandType.PING:
            await self._send(wrap(CommandPong()))
            return True
        if base.type == CommandType.PONG:
            return True
        handler = self._handlers.get(base.type)
        if handler is None or frame.payload is not None:
            log.info("unsupported command %s from %s", name, self.peer)
            await self._send_error(0, ServerError.NotAllowedError, f"unsupported command {name}")
            return True
        task = asyncio.create_task(self._respond(handler, base))
        self._tasks.add(task)
        self._in_flight_bytes += frame.size
        task.add_done_callback(functools.partial(self._handled, frame.size))
        return True

    def _handled(self, size: int, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._in_flight_bytes -= size

    async def _connect(self, base: BaseCommand) -> bool:
        cmd = _need(base.connect)
        if not self._server.token_matches(cmd.auth_method_name, cmd.auth_data):
            # Say nothing about the credentials, not even to the log; a flood must not flood the log.
            self._server.failed_authentications += 1
            if self._server.failed_authentications % 100 == 1:
                log.warning(
                    "authentication failed for %s (auth method %r; %d so far)",
                    self.peer,
                    (cmd.auth_method_name or "")[:100],
                    self._server.failed_authentications,
                )
            await self._send_error(0, ServerError.AuthenticationError, "authentication failed")
            return False
        self._protocol_version = max(0, min(cmd.protocol_version, PROTOCOL_VERSION))
        self._connected = True
        log.debug(
            "%s connected: client %r, protocol v%d", self.peer, cmd.client_version, self._protocol_version
        )
        await self._send(
            wrap(
                CommandConnected(
                    server_version=SERVER_VERSION,
                    protocol_version=self._protocol_version,
                    max_message_size=min(self._server.max_frame_size, _INT32_MAX),
                )
            )
        )
        return True

    async def _keepalive(self) -> None:
        interval = self._server.ping_interval
        while True:
            await asyncio.sleep(interval)
            if not self._connected:
                # As Pulsar's handler: a handshake not done by the first check closes the connection
                # (a peer trickling bytes without CONNECT would otherwise hold it for good).
                log.info("closing connection from %s: no CONNECT within %.1fs", self.peer, interval)
                self._writer.transport.abort()  # the read loop then sees the end and cleans up
                return
            if self._loop.time() - self._last_received >= 2 * interval:
                log.info("closing connection from %s: silent for %.1fs", self.peer, 2 * interval)
                self._writer.transport.abort()  # not close(): that would wait for it to read
                return
            # Never wait here for the peer to read (a _send may): this task must reach the checks.
            self._queue(wrap(CommandPing()))

    # -- sending -------------------------------------------------------------------------------------

    def _queue(self, base: BaseCommand) -> bool:
        """Queue ``base`` for the next write; False if the connection is closing."""
        # Responses finished in one loop iteration go out in one write (one syscall, not one each).
        if self._writer.is_closing():
            return False
        self._out.append(encode_command(base))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        return True

    async def _send(self, base: BaseCommand) -> None:
        if not self._queue(base):
            return
        if self._writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            try:
                await self._writer.drain()  # a client that does not read holds us back, not our memory
            except OSError as exc:
                log.debug("send to %s failed: %s", self.peer, exc)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self._writer.is_closing():
            self._writer.write(b"".join(self._out))
        self._out.clear()

    async def _send_error(self, request_id: int, error: ServerError, message: str) -> None:
        await self._send(wrap(CommandError(request_id=request_id, error=error, message=message)))

    async def _respond(self, handler: _Handler, base: BaseCommand) -> None:
        try:
            response = await handler(base)
        except Exception:
            # Handlers map errors themselves; this is a bug, not a client's doing.
            log.exception("handler for %s from %s failed", type_name(base.type), self.peer)
            return
        await self._send(response)

    # -- requests ------------------------------------------------------------------------------------

    def _error_of(self, exc: Exception, what: str, tc_id: int | None) -> tuple[ServerError, str]:
        """The ServerError and message to answer with for an exception from the api."""
        if not isinstance(exc, PulsarTxnError):
            log.error("%s from %s failed", what, self.peer, exc_info=exc)
            return ServerError.UnknownError, _INTERNAL_ERROR
        message = str(exc)
        if exc.server_error == ServerError.TransactionCoordinatorNotFound and tc_id is not None:
            # Tell the client where to go, so it can skip a lookup.
            owner = exc.owner_url if isinstance(exc, TransactionCoordinatorNotFoundError) else None
            with contextlib.suppress(Exception):
                owner = owner or self._api.owner_url(tc_id)
            if owner and owner != self._server.url:
                message = f"TC {tc_id} is owned by {owner}"
        log.debug("%s from %s: %s", what, self.peer, exc)
        return exc.server_error, message

    async def _tc_client_connect(self, base: BaseCommand) -> BaseCommand:
        cmd = _need(base.tc_client_connect_request)
        if self._protocol_version < TC_CONNECT_MIN_PROTOCOL_VERSION:
            return wrap(
                CommandError(
                    request_id=cmd.request_id,
                    error=ServerError.UnsupportedVersionError,
                    message=f"TC_CLIENT_CONNECT needs protocol version {TC_CONNECT_MIN_PROTOCOL_VERSION} "
                    f"or later; this connection speaks v{self._protocol_version}",
                )
            )
        try:
            self._api.check_serving(cmd.tc_id)
        except Exception as exc:
            error, message = self._error_of(exc, "TC_CLIENT_CONNECT", cmd.tc_id)
            return wrap(
                CommandTcClientConnectResponse(request_id=cmd.request_id, error=error, message=message)
            )
        return wrap(CommandTcClientConnectResponse(request_id=cmd.request_id))

    async def _new_txn(self, base: BaseCommand) -> BaseCommand:
        cmd = _need(base.new_txn)
        try:
            txn_id = await self._api.new_txn(cmd.tc_id, cmd.txn_ttl_seconds * TTL_FIELD_UNIT_MS)
        except Exception as exc:
            error, message = self._error_of(exc, "NEW_TXN", cmd.tc_id)
            return wrap(CommandNewTxnResponse(request_id=cmd.request_id, error=error, message=message))
        return wrap(
            CommandNewTxnResponse(
                request_id=cmd.request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
            )
        )

    async def _add_partition_to_txn(self, base: BaseCommand) -> BaseCommand:
        cmd = _need(base.add_partition_to_txn)
        txn_id = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        return await self._txn_op(
            "ADD_PARTITION_TO_TXN",
            CommandAddPartitionToTxnResponse,
            cmd.request_id,
            txn_id,
            lambda: self._api.add_partitions(txn_id, list(cmd.partitions)),
        )

    async def _add_subscription_to_txn(self, base: BaseCommand) -> BaseCommand:
        cmd = _need(base.add_subscription_to_txn)
        txn_id = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        subscriptions = [(s.topic, s.subscription) for s in cmd.subscription]
        return await self._txn_op(
            "ADD_SUBSCRIPTION_TO_TXN",
            CommandAddSubscriptionToTxnResponse,
            cmd.request_id,
            txn_id,
            lambda: self._api.add_subscriptions(txn_id, subscriptions),
        )

    async def _end_txn(self, base: BaseCommand) -> BaseCommand:
        cmd = _need(base.end_txn)
        txn_id = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        action, token = cmd.txn_action, cmd.end_token
        # proto2 would default a missing action to COMMIT; committing by omission is too dangerous.
        if not isinstance(action, TxnAction):
            refused = f"END_TXN needs txn_action COMMIT or ABORT, got {action}"
        elif token is not None and len(token) > _END_TOKEN_MAX:
            refused = f"END_TXN's end_token takes at most {_END_TOKEN_MAX} bytes, got {len(token)}"
        else:
            return await self._txn_op(
                "END_TXN",
                CommandEndTxnResponse,
                cmd.request_id,
                txn_id,
                lambda: self._api.end_txn(txn_id, action, token),
            )
        return wrap(
            CommandEndTxnResponse(
                request_id=cmd.request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
                error=ServerError.NotAllowedError,
                message=refused,
            )
        )

    async def _txn_op(
        self,
        what: str,
        response: Callable[..., Message],
        request_id: int,
        txn_id: TxnID,
        call: Callable[[], Awaitable[None]],
    ) -> BaseCommand:
        ids = {
            "request_id": request_id,
            "txnid_least_bits": txn_id.least_bits,
            "txnid_most_bits": txn_id.most_bits,
        }
        try:
            await call()
        except Exception as exc:
            error, message = self._error_of(exc, what, txn_id.tc_id)
            return wrap(response(**ids, error=error, message=message))
        return wrap(response(**ids))

    async def _partitioned_metadata(self, base: BaseCommand) -> BaseCommand:
        """Pulsar's clients learn how many TCs there are from the TC-assign topic's partitions."""
        cmd = _need(base.partition_metadata)
        if cmd.topic.strip() == TC_ASSIGN_TOPIC:
            return wrap(
                CommandPartitionedTopicMetadataResponse(
                    request_id=cmd.request_id,
                    partitions=self._api.num_tcs,
                    response=PartitionedMetadataResult.Success,
                )
            )
        return wrap(
            CommandPartitionedTopicMetadataResponse(
                request_id=cmd.request_id,
                response=PartitionedMetadataResult.Failed,
                error=ServerError.TopicNotFound,
                message=(
                    f"topic {_echo(cmd.topic)} is not served here: "
                    f"a coordinator serves {TC_ASSIGN_TOPIC} only"
                ),
            )
        )

    async def _lookup(self, base: BaseCommand) -> BaseCommand:
        cmd = _need(base.lookup_topic)
        response = CommandLookupTopicResponse(request_id=cmd.request_id)
        try:
            tc_id = parse_tc_assign_topic(cmd.topic)
            if tc_id is None or tc_id >= self._api.num_tcs:
                response.response = LookupType.Failed
                response.error = ServerError.TopicNotFound
                response.message = f"topic {_echo(cmd.topic)} not found"
            elif tc_id in self._api.owned_tcs():
                response.response = LookupType.Connect
                response.broker_service_url = self._server.url
                response.authoritative = True
            elif (owner := self._api.owner_url(tc_id)) and owner != self._server.url:
                response.response = LookupType.Redirect
                response.broker_service_url = owner
                response.authoritative = True
            else:
                # Nobody, or this very instance still recovering: redirecting would loop.
                response.response = LookupType.Failed
                response.error = ServerError.ServiceNotReady
                response.message = f"TC {tc_id} has no ready owner yet"
        except Exception as exc:
            response.response = LookupType.Failed
            response.error, response.message = self._error_of(exc, "LOOKUP", None)
        return wrap(response)


def _echo(text: str) -> str:
    """A client's string as quoted back in an error: bounded, so an answer is never as large as the
    request that provoked it."""
    return text if len(text) <= _ECHO_MAX else f"{text[:_ECHO_MAX]}... ({len(text)} characters)"


# Types that carry a sub-command we read; a frame of such a type without it is malformed.
_WITH_BODY = frozenset(
    {
        CommandType.CONNECT,
        CommandType.TC_CLIENT_CONNECT_REQUEST,
        CommandType.NEW_TXN,
        CommandType.ADD_PARTITION_TO_TXN,
        CommandType.ADD_SUBSCRIPTION_TO_TXN,
        CommandType.END_TXN,
        CommandType.LOOKUP,
        CommandType.PARTITIONED_METADATA,
    }
)


def _need(value: T | None) -> T:
    if value is None:  # _dispatch checks first; this only narrows the type
        raise ProtocolError("missing command body")
    return value
