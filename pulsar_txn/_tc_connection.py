"""One connection from the TC client to one coordinator endpoint.

The connection lives on the TC client's event loop (handshake, reading, PONGs, expiry), but a
request can be written from any thread: ``request_threadsafe`` registers a future and writes the
frame on the caller's thread; the loop's reader completes the future. A blocking caller therefore
costs the loop one wake-up (the answer) instead of three (the hand-over, the task, the answer),
which on a VM that charges ~30 µs per wake-up is most of a coordinator call's client-side cost.

All writes go through one lock and a duplicate of the socket's descriptor that only this class
closes (under that lock), so a writer thread can never hit a descriptor the event loop has closed
and the system has handed to someone else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import select
import socket
import threading
import time
from concurrent.futures import Future
from typing import Protocol

from pulsar_txn._future import LazyFuture
from pulsar_txn.errors import ConnectionClosed, ProtocolError, PulsarTxnError, Timeout, error_from_server
from pulsar_txn.protocol import (
    PROTOCOL_VERSION,
    BaseCommand,
    CommandConnect,
    CommandConnected,
    CommandPong,
    CommandType,
    FrameDecoder,
    encode_command,
    type_name,
    wrap,
)

__all__ = ["CLIENT_VERSION", "TcConnection"]

log = logging.getLogger("pulsar_txn.tc_client")

CLIENT_VERSION = "pulsar-txn-tc-client-0.1"
_READ_SIZE = 64 * 1024
_PONG = encode_command(wrap(CommandPong()))


class _Waiter(Protocol):
    def done(self) -> bool: ...
    def set_result(self, result: BaseCommand, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


class TcConnection:
    """Handshake, request/response correlation by (response type, request id), PONGs, expiry."""

    def __init__(
        self,
        url: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        wsock: socket.socket,
        max_frame: int,
        write_timeout: float,
    ) -> None:
        self.url = url
        self._reader = reader
        self._writer = writer
        self._wsock = wsock  # our own descriptor of the socket: writes only, closed only by us
        self._write_timeout = write_timeout
        self._write_lock = threading.Lock()
        self._decoder = FrameDecoder(max_frame)
        self._ids = itertools.count()
        # Keyed by (response type, request_id): Pulsar correlates by kind as well as id. Entries are
        # added from any thread (under _state_lock, so close() cannot miss one) and popped by
        # whoever completes them; single dict operations are atomic.
        self._pending: dict[tuple[int, int], _Waiter] = {}
        self._deadlines: dict[tuple[int, int], float] = {}  # thread-safe requests only
        self._state_lock = threading.Lock()
        self._handshake: asyncio.Future[CommandConnected] = asyncio.get_running_loop().create_future()
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = False
        self.tc_ready: set[int] = set()
        self.tc_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls, host: str, port: int, url: str, token: str | None, connect_timeout: float, max_frame: int
    ) -> TcConnection:
        try:
            async with asyncio.timeout(connect_timeout):
                sock = await _connect_socket(host, port)
                reader, writer = await asyncio.open_connection(sock=sock)
        except (OSError, TimeoutError) as exc:
            raise ConnectionClosed(f"cannot connect to {url}: {exc or 'timed out'}") from exc
        conn = cls(url, reader, writer, sock.dup(), max_frame, connect_timeout)
        conn._tasks = [asyncio.create_task(conn._read_loop()), asyncio.create_task(conn._expire_loop())]
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
        return conn

    def next_request_id(self) -> int:
        return next(self._ids)  # itertools.count is atomic: any thread may take ids

    async def request(self, base: BaseCommand, response_type: CommandType, request_id: int) -> BaseCommand:
        """Send ``base`` and wait for its answer (on the loop); a CommandError answer is raised."""
        key = (int(response_type), request_id)
        future: asyncio.Future[BaseCommand] = asyncio.get_running_loop().create_future()
        self._register(key, future, None)
        try:
            self._send(encode_command(base))
            answer = await future
        finally:
            self._pending.pop(key, None)
        return _checked(answer)

    def request_threadsafe(
        self, base: BaseCommand, response_type: CommandType, request_id: int, deadline: float
    ) -> Future[BaseCommand]:
        """Send ``base`` from the calling thread; the future ends with the answer (a CommandError
        answer as its exception), with ``Timeout`` after ``deadline`` (``time.monotonic``), or with
        ``ConnectionClosed``. It is completed on the event loop's thread."""
        key = (int(response_type), request_id)
        future: LazyFuture[BaseCommand] = LazyFuture()
        try:
            self._register(key, future, deadline)  # closed meanwhile: the future says so
            self._send(encode_command(base))
        except PulsarTxnError as exc:
            self._pending.pop(key, None)
            self._deadlines.pop(key, None)
            _fail(future, exc)  # close() may have failed it already, from the loop's thread
        return future

    async def close(self) -> None:
        self._fail_all(ConnectionClosed(f"connection to {self.url} is closed"))
        self._writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    # -- internals -----------------------------------------------------------------------------------

    def _register(self, key: tuple[int, int], waiter: _Waiter, deadline: float | None) -> None:
        with self._state_lock:
            if self.closed:
                raise ConnectionClosed(f"connection to {self.url} is closed")
            self._pending[key] = waiter
            if deadline is not None:
                self._deadlines[key] = deadline

    def _send(self, data: bytes) -> None:
        """Write a whole frame from any thread. The socket is non-blocking (the loop reads it), so
        a full send buffer is waited out with select, bounded by the write timeout."""
        view = memoryview(data)
        with self._write_lock:
            if self._wsock.fileno() < 0:
                raise ConnectionClosed(f"connection to {self.url} is closed")
            deadline = 0.0
            while view:
                try:
                    view = view[self._wsock.send(view) :]
                    continue
                except BlockingIOError:
                    pass
                except OSError as exc:
                    raise ConnectionClosed(f"connection to {self.url} lost: {exc}") from exc
                now = time.monotonic()
                deadline = deadline or now + self._write_timeout
                if now >= deadline:
                    raise ConnectionClosed(
                        f"connection to {self.url}: no write progress in {self._write_timeout}s"
                    )
                select.select([], [self._wsock], [], deadline - now)

    def _close_wsock(self) -> None:
        with self._write_lock:
            self._wsock.close()

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
            self._writer.close()
            self._fail_all(ConnectionClosed(f"connection to {self.url} {reason}"))

    async def _expire_loop(self) -> None:
        """Ends thread-safe requests whose deadline passed (asyncio ones have their own timeouts)."""
        while True:
            await asyncio.sleep(0.05 if self._deadlines else 0.25)
            now = time.monotonic()
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
            if not self._handshake.done():
                self._handshake.set_result(base.connected)
        elif kind == CommandType.ERROR and base.error is not None:
            if not self._handshake.done():
                self._handshake.set_exception(error_from_server(base.error.error, base.error.message))
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
        if not waiter.done():
            waiter.set_result(answer)
        return True

    def _fail_all(self, exc: PulsarTxnError) -> None:
        with self._state_lock:
            self.closed = True
            pending, self._pending = self._pending, {}
            self._deadlines = {}
        self._close_wsock()
        if not self._handshake.done():
            self._handshake.set_exception(exc)
            self._handshake.exception()  # retrieved here: nobody may be waiting any more
        for waiter in pending.values():
            _fail(waiter, exc)


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
    """A connected non-blocking TCP socket (ours, so that writes can use a duplicate of it)."""
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
