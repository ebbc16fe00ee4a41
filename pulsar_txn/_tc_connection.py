"""One connection from the TC client to one coordinator endpoint.

The connection is opened on the TC client's event loop (connect, handshake), then served by a reader
thread of its own that blocks in ``recv``, decodes frames, answers PINGs, completes waiters and
expires thread-safe requests. A request can be written from any thread: ``request_threadsafe``
registers a future and writes the frame on the caller's thread; the reader completes it. A blocking
caller therefore costs one thread wake-up for the answer and none of asyncio's per-read machinery
(a selector pass, a stream buffer, a task step), which on a VM that charges ~30 µs per wake-up is
most of a coordinator call's client-side cost. Waiters of the loop's own path (asyncio futures) are
completed on the loop, through ``call_soon_threadsafe``.

All writes go through one lock, and the writing socket is closed only under it; the reader has its
own socket object (a duplicate descriptor) that only the reader uses and closes. So no thread can
touch a descriptor that was closed and handed to someone else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from kafka_store import mark_callback_thread
from pulsar_txn._future import LazyFuture
from pulsar_txn.errors import (
    ConnectionClosed,
    NotAllowedError,
    ProtocolError,
    PulsarTxnError,
    Timeout,
    error_from_server,
)
from pulsar_txn.protocol import (
    PROTOCOL_VERSION,
    BaseCommand,
    CommandConnect,
    CommandConnected,
    CommandPing,
    CommandPong,
    CommandType,
    FrameDecoder,
    encode_command,
    type_name,
    wrap,
)

__all__ = ["CLIENT_VERSION", "DEFAULT_KEEP_ALIVE_S", "TcConnection"]

log = logging.getLogger("pulsar_txn.tc_client")

CLIENT_VERSION = "pulsar-txn-tc-client-0.1"
_READ_SIZE = 64 * 1024
_READ_WAKE_S = 0.25  # the reader checks for close and expiry at least this often
_EXPIRY_STEP_S = 0.05
# A write that makes no progress this long (the peer stopped reading and the kernel's send buffer is
# full) gives the connection up. It blocks its caller meanwhile, and that may be the client's event
# loop (every TC call of the client) or the reader thread (pings, expiry): with only the total limit
# (the connect timeout, 10 s) a stalled peer froze them that long. A peer that reads never comes
# near it: it bounds each wait for room, not the whole frame.
_WRITE_STALL_S = 2.0
_PONG = encode_command(wrap(CommandPong()))
_PING = encode_command(wrap(CommandPing()))
DEFAULT_KEEP_ALIVE_S = 30.0  # Pulsar's keepAliveIntervalSeconds


class _Waiter(Protocol):
    def done(self) -> bool: ...
    def set_result(self, result: BaseCommand, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


class TcConnection:
    """Handshake, request/response correlation by (response type, request id), PONGs, expiry."""

    def __init__(
        self, url: str, sock: socket.socket, max_frame: int, write_timeout: float, keep_alive: float
    ) -> None:
        self.url = url
        # Liveness, as Pulsar's ClientCnx: after ``keep_alive`` seconds without a byte from the peer
        # a PING goes out; after twice that the connection is given up (a frozen or half-open peer
        # would otherwise keep every call to its TCs timing out, the owner never looked up again).
        self._keep_alive = keep_alive
        self._last_received = time.monotonic()
        self._pinged = False
        self._loop = asyncio.get_running_loop()
        self._wsock = sock  # writes, under _write_lock; closed only by _close_sockets
        # A peer that stops reading cannot hold a writer: each wait for room is bounded
        # (_WRITE_STALL_S), and so is a whole frame (write_timeout), as a peer may read slowly.
        self._wsock.settimeout(min(write_timeout, _WRITE_STALL_S))
        self._write_timeout = write_timeout
        self._rsock = sock.dup()  # the reader thread's own object (its own timeout for recv)
        self._rsock.settimeout(_READ_WAKE_S)
        self._write_lock = threading.Lock()
        self._decoder = FrameDecoder(max_frame)
        self._max_request = max_frame  # and the server's max_message_size once CONNECTED says it
        self._ids = itertools.count()
        # Keyed by (response type, request_id): Pulsar correlates by kind as well as id. Entries are
        # added from any thread (under _state_lock, so close() cannot miss one) and popped by
        # whoever completes them; single dict operations are atomic.
        self._pending: dict[tuple[int, int], _Waiter] = {}
        self._deadlines: dict[tuple[int, int], float] = {}  # thread-safe requests only
        self._state_lock = threading.Lock()
        self._handshake: asyncio.Future[CommandConnected] = self._loop.create_future()
        self._reader = threading.Thread(target=self._read_main, name=f"pulsar-txn-tc-read {url}", daemon=True)
        self._connected = False  # CONNECTED seen (the reader's view; the handshake future lags)
        self.closed = False
        self.tc_ready: set[int] = set()
        self.tc_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        url: str,
        token: str | None,
        connect_timeout: float,
        max_frame: int,
        keep_alive: float = DEFAULT_KEEP_ALIVE_S,
        write_timeout: float | None = None,
    ) -> TcConnection:
        """``write_timeout``: the most one frame may take to write (default: ``connect_timeout``)."""
        try:
            async with asyncio.timeout(connect_timeout):
                sock = await _connect_socket(host, port)
        except (OSError, TimeoutError) as exc:
            raise ConnectionClosed(f"cannot connect to {url}: {exc or 'timed out'}") from exc
        conn = cls(url, sock, max_frame, write_timeout or connect_timeout, keep_alive)
        conn._reader.start()
        try:
            connect = CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
            if token is not None:
                connect.auth_method_name = "token"
                connect.auth_data = token.encode()
            conn._send(encode_command(wrap(connect)))
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
        if connected.max_message_size and connected.max_message_size > 0:
            conn._max_request = min(conn._max_request, connected.max_message_size)
        return conn

    def next_request_id(self) -> int:
        return next(self._ids)  # itertools.count is atomic: any thread may take ids

    async def request(self, base: BaseCommand, response_type: CommandType, request_id: int) -> BaseCommand:
        """Send ``base`` and wait for its answer (on the loop); a CommandError answer is raised."""
        data = self._encoded(base)
        key = (int(response_type), request_id)
        future: asyncio.Future[BaseCommand] = asyncio.get_running_loop().create_future()
        self._register(key, future, None)
        try:
            try:
                self._send(data)
            except BaseException:
                # Nobody awaits it now: the connection failing may still complete it (asyncio
                # would then log its exception as never retrieved).
                if future.done() and not future.cancelled():
                    future.exception()
                else:
                    future.cancel()
                raise
            answer = await future
        finally:
            self._pending.pop(key, None)
        return _checked(answer)

    def _encoded(self, base: BaseCommand) -> bytes:
        """The request's frame; ``NotAllowedError`` (not retriable) if it is larger than the server
        takes: it would close the connection, under every other call on it, at each retry."""
        data = encode_command(base)
        if len(data) > self._max_request:
            raise NotAllowedError(
                f"{type_name(base.type)} request of {len(data)} bytes exceeds the coordinator's limit "
                f"of {self._max_request} bytes"
            )
        return data

    def request_threadsafe(
        self, base: BaseCommand, response_type: CommandType, request_id: int, deadline: float
    ) -> Future[BaseCommand]:
        """Send ``base`` from the calling thread; the future ends with the answer (a CommandError
        answer as its exception), with ``Timeout`` after ``deadline`` (``time.monotonic``), or with
        ``ConnectionClosed``. It is completed on the connection's reader thread."""
        key = (int(response_type), request_id)
        future: LazyFuture[BaseCommand] = LazyFuture()
        try:
            data = self._encoded(base)
            self._register(key, future, deadline)  # closed meanwhile: the future says so
            self._send(data)
        except PulsarTxnError as exc:
            self._pending.pop(key, None)
            self._deadlines.pop(key, None)
            _fail(future, exc)  # close() may have failed it already, from the loop's thread
        return future

    async def close(self) -> None:
        self._fail_all(ConnectionClosed(f"connection to {self.url} is closed"))
        if self._reader.is_alive() and threading.current_thread() is not self._reader:
            await asyncio.to_thread(self._reader.join, 2 * _READ_WAKE_S + 1)

    # -- internals -----------------------------------------------------------------------------------

    def _register(self, key: tuple[int, int], waiter: _Waiter, deadline: float | None) -> None:
        with self._state_lock:
            if self.closed:
                raise ConnectionClosed(f"connection to {self.url} is closed")
            self._pending[key] = waiter
            if deadline is not None:
                self._deadlines[key] = deadline

    def _send(self, data: bytes) -> None:
        """Write a whole frame from any thread, within the write timeout."""
        failure: ConnectionClosed | None = None
        with self._write_lock:
            if self._wsock.fileno() < 0:
                raise ConnectionClosed(f"connection to {self.url} is closed")
            try:
                self._write_all(data)
            except TimeoutError:
                failure = ConnectionClosed(f"connection to {self.url}: no write progress in time")
            except OSError as exc:
                failure = ConnectionClosed(f"connection to {self.url} lost: {exc}")
        if failure is not None:
            # Part of the frame may be on the wire: the server would read the next request's bytes
            # as its rest. The connection is unusable; drop it (its waiters fail, callers reconnect).
            self._fail_all(failure)
            raise failure

    def _write_all(self, data: bytes) -> None:
        """``sendall`` with two bounds: ``send`` waits for room at most the socket's timeout (a
        ``sendall`` timeout bounds the whole call instead, since Python 3.5, which would give up on a
        peer reading a large frame steadily), and the frame at most ``write_timeout``."""
        view = memoryview(data)
        deadline = time.monotonic() + self._write_timeout
        while view:
            if time.monotonic() > deadline:
                raise TimeoutError("frame not written within the write timeout")
            view = view[self._wsock.send(view) :]

    def _close_sockets(self) -> None:
        with contextlib.suppress(OSError):
            self._wsock.shutdown(socket.SHUT_RDWR)  # wakes the reader at once
        with self._write_lock:
            self._wsock.close()

    def _read_main(self) -> None:
        """The reader thread: frames in, waiters completed, expired requests ended."""
        mark_callback_thread()
        reason = "closed by the server"
        next_expiry = time.monotonic() + _READ_WAKE_S
        try:
            while not self.closed:
                try:
                    data = self._rsock.recv(_READ_SIZE)
                except TimeoutError:
                    data = None
                now = time.monotonic()
                if data is not None:
                    if not data:
                        break
                    self._last_received, self._pinged = now, False
                    for frame in self._decoder.feed(data):
                        self._on_command(frame.command)
                elif now - self._last_received >= self._keep_alive:
                    if now - self._last_received >= 2 * self._keep_alive:
                        reason = f"gave no sign of life for {now - self._last_received:.1f}s (keep-alive)"
                        log.warning("connection to %s %s; closing it", self.url, reason)
                        break
                    if not self._pinged:
                        self._pinged = True
                        self._send(_PING)
                if self._deadlines and now >= next_expiry:
                    self._expire(now)
                    next_expiry = now + _EXPIRY_STEP_S
        except (OSError, ProtocolError) as exc:
            if not self.closed:
                reason = str(exc)
                log.warning("connection to %s failed: %s", self.url, exc)
        except Exception:  # a bug here must still fail the waiters, not strand them
            log.exception("TC connection reader for %s failed", self.url)
            reason = "failed"
        finally:
            self._fail_all(ConnectionClosed(f"connection to {self.url} {reason}"))
            self._rsock.close()

    def _expire(self, now: float) -> None:
        """End thread-safe requests whose deadline passed (asyncio ones have their own timeouts)."""
        for key, deadline in list(self._deadlines.items()):
            if deadline <= now and self._deadlines.pop(key, None) is not None:
                waiter = self._pending.pop(key, None)
                if waiter is not None:
                    _fail(waiter, Timeout(f"no answer from {self.url} in time"))

    def _on_command(self, base: BaseCommand) -> None:
        kind = base.type
        if kind == CommandType.PING:
            with contextlib.suppress(ConnectionClosed):
                self._send(_PONG)
        elif kind == CommandType.PONG:
            pass
        elif kind == CommandType.CONNECTED and base.connected is not None:
            self._connected = True
            self._on_loop(_resolve, self._handshake, base.connected)
        elif kind == CommandType.ERROR and base.error is not None:
            if not self._connected:
                error = error_from_server(base.error.error, base.error.message)
                self._on_loop(_fail, self._handshake, error)
                return
            # An ERROR answers whichever request has its id (ids are unique per connection here).
            for key in [k for k in list(self._pending) if k[1] == base.error.request_id]:
                self._complete(key, base)
        else:
            inner = base.inner()
            request_id = getattr(inner, "request_id", None)
            if not isinstance(request_id, int) or not self._complete((kind, request_id), base):
                log.debug("unexpected %s from %s", type_name(kind), self.url)

    def _complete(self, key: tuple[int, int], answer: BaseCommand) -> bool:
        waiter = self._pending.pop(key, None)
        if waiter is None:
            return False
        self._deadlines.pop(key, None)
        if isinstance(waiter, asyncio.Future):
            self._on_loop(_resolve, waiter, answer)
        elif not waiter.done():
            waiter.set_result(answer)
        return True

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` (which touches asyncio futures) on the event loop's thread."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:  # no loop runs in this thread
            on_loop = False
        if on_loop:
            fn(*args)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self._loop.call_soon_threadsafe(fn, *args)

    def _fail_all(self, exc: PulsarTxnError) -> None:
        with self._state_lock:
            if self.closed and not self._pending:
                return
            self.closed = True
            pending, self._pending = self._pending, {}
            self._deadlines = {}
        self._close_sockets()
        self._on_loop(_reject_quietly, self._handshake, exc)
        # A copy taken at once (atomic): the reader thread may still pop from the old dict.
        for waiter in list(pending.values()):
            if isinstance(waiter, asyncio.Future):
                self._on_loop(_fail, waiter, exc)
            else:
                _fail(waiter, exc)


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _reject_quietly(future: asyncio.Future[Any], exc: BaseException) -> None:
    """Fail the handshake if it is still pending, marking the error retrieved (nobody may wait)."""
    if not future.done():
        future.set_exception(exc)
        future.exception()


def _fail(waiter: _Waiter, exc: BaseException) -> None:
    """End ``waiter`` with ``exc`` unless it has ended: a thread-safe request can be failed by its
    writer and by close() at the same moment."""
    if not waiter.done():
        with contextlib.suppress(concurrent.futures.InvalidStateError, asyncio.InvalidStateError):
            waiter.set_exception(exc)


def _checked(answer: BaseCommand) -> BaseCommand:
    if answer.error is not None:
        raise error_from_server(answer.error.error, answer.error.message)
    return answer


def checked_answer(future: Future[BaseCommand], timeout: float) -> BaseCommand:
    """The answer of a thread-safe request, waited for at most ``timeout`` (a safety net: the
    connection's expiry ends the future at its deadline); a CommandError answer is raised."""
    try:
        return _checked(future.result(timeout))
    except TimeoutError:
        raise Timeout("no answer from the coordinator in time") from None


async def _connect_socket(host: str, port: int) -> socket.socket:
    """A connected TCP socket of our own (asyncio's streams would own theirs), with TCP_NODELAY."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError = OSError(f"{host}:{port} did not resolve")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise last
