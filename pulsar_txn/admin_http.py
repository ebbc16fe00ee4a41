"""A tiny read-only admin HTTP endpoint (stats as JSON), with optional bearer-token auth.

``GET /admin/v2/transactions/coordinatorStats`` answers like ``pulsar-admin transactions
coordinator-stats``; ``GET /metrics`` in Prometheus' text format. Plain asyncio, no web framework: it
serves a handful of GETs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulsar_txn import _args
from pulsar_txn._listen import start_server

log = logging.getLogger(__name__)

_MAX_REQUEST = 16 * 1024
_WRITE_TIMEOUT_S = 10  # an answer not read by then is dropped with its connection
_MAX_OPEN = 128  # connections answered at once; see _handle for who gives way to a new one
_HEAD_TIMEOUT_S = 10  # a request's head must have come whole by then


@dataclass(frozen=True)
class TextBody:
    """A route's answer sent as is (not as JSON), e.g. Prometheus' exposition format."""

    text: str
    content_type: str = "text/plain; charset=utf-8"


class AdminHttpServer:
    def __init__(
        self,
        routes: dict[str, Callable[[], Any]],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        auth_token: str | None = None,
        path_tokens: dict[str, str] | None = None,
    ) -> None:
        """``auth_token``: required on every path (if set). ``path_tokens``: a further token accepted on
        one path (e.g. a read-only scraper's on ``/metrics``); a path with either needs one of them."""
        _args.integer(port, "port", minimum=0, maximum=65535)  # a ConfigError, not bind()'s error
        self._routes = routes
        self._host = host
        self._port = port
        self._token = auth_token
        self._path_tokens = dict(path_tokens or {})
        self._server: asyncio.Server | None = None
        self._answering: set[asyncio.Task[Any]] = set()  # connections being answered
        # Connections whose request has not come whole yet, oldest first: the first to give way.
        self._reading: dict[asyncio.StreamWriter, None] = {}
        self.refused_connections = 0
        self.evicted_connections = 0
        self.refused_requests = 0  # answered 401
        self.dropped_requests = 0  # closed before a whole request head arrived

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("admin server not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        self._server = await start_server(self._handle, self._host, self._port, "the admin endpoint")

    async def stop(self) -> None:
        """Stop listening and end the answers in progress; returns with their sockets closed."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # asyncio's Server leaves its connections to their handlers (before 3.12 wait_closed() does
        # not wait for them): a loop closed right after would leave their sockets open or half closed.
        tasks = list(self._answering)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A socket closed or aborted is released by a callback on the next iteration: let it run.
        await asyncio.sleep(0)
        await server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._answering) >= _MAX_OPEN and self._reading:
            # Full: the connection that has waited longest for its request gives way. Refusing the
            # new one instead let anyone who never sends a whole request (no token needed) hold
            # every place by reconnecting, and lock out health checks and scrapes with the token.
            oldest = next(iter(self._reading))
            del self._reading[oldest]
            oldest.transport.abort()  # its handler ends on the reset (it counts until then)
            self.evicted_connections += 1
            if self.evicted_connections % 100 == 1:
                log.warning(
                    "admin connection without a whole request closed for a new one: %d open "
                    "(%d closed so far)",
                    _MAX_OPEN,
                    self.evicted_connections,
                )
        elif len(self._answering) >= _MAX_OPEN:
            # Stats and metrics are cheap to ask again; a flood must not pin sockets and tasks.
            self.refused_connections += 1
            if self.refused_connections % 100 == 1:
                log.warning(
                    "admin connection refused: %d open (%d refused so far)",
                    _MAX_OPEN,
                    self.refused_connections,
                )
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None  # asyncio runs each connection's handler as a task
        self._answering.add(task)
        try:
            await self._answer(reader, writer)
        except asyncio.CancelledError:  # stop(): never leave the socket open or half closed
            writer.transport.abort()
            raise
        finally:
            self._answering.discard(task)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(writer.get_extra_info("peername"))
        self._reading[writer] = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:  # over the stream's buffer: answered as over our own limit
            head = b"x" * (_MAX_REQUEST + 1)
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError) as exc:
            self.dropped_requests += 1
            if self.dropped_requests % 100 == 1:  # a peer may connect and hang up in a loop
                log.info(
                    "admin request from %s dropped: unreadable (%s; %d so far)",
                    peer,
                    type(exc).__name__,
                    self.dropped_requests,
                )
            writer.close()
            return
        finally:
            self._reading.pop(writer, None)
        if len(head) > _MAX_REQUEST:
            # Refused as such: cut short, a credential past the cut would read as a wrong one (401).
            status, body = (
                "431 Request Header Fields Too Large",
                {"error": f"request head over {_MAX_REQUEST} bytes"},
            )
        else:
            status, body = self._respond(head, peer)
        if isinstance(body, TextBody):
            payload, content_type = body.text.encode(), body.content_type
        else:
            payload, content_type = json.dumps(body, indent=2, sort_keys=True).encode(), "application/json"
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + payload
        )
        writer.transport.set_write_buffer_limits(0)  # drain() returns once all of it is handed over
        try:
            await asyncio.wait_for(writer.drain(), _WRITE_TIMEOUT_S)
        except TimeoutError:
            # A client that does not read must not hold the answer, the socket and this task.
            log.info("admin answer to %s dropped: not read within %ds", peer, _WRITE_TIMEOUT_S)
            writer.transport.abort()
            return
        except ConnectionError:
            pass
        writer.close()

    def _respond(self, head: bytes, peer: str = "?") -> tuple[str, Any]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        # Authentication comes first: an unauthenticated request learns nothing, not even which
        # methods or paths exist.
        path = parts[1].split("?", 1)[0] if len(parts) == 3 else ""
        tokens = [t for t in (self._token, self._path_tokens.get(path)) if t is not None]
        if tokens:
            auth = next(
                (
                    ln.split(":", 1)[1].strip(" \t")
                    for ln in lines[1:]
                    if ln.lower().startswith("authorization:")
                ),
                "",
            ).encode("latin-1")  # the header's own bytes (decoded as latin-1 above), e.g. a UTF-8 token
            # Every candidate compared (no early exit): the time taken says nothing about which matched.
            matches = [hmac.compare_digest(auth, f"Bearer {t}".encode()) for t in tokens]
            if not any(matches):
                self.refused_requests += 1
                if self.refused_requests % 100 == 1:  # a flood must not flood the log too
                    log.warning(
                        "admin request from %s refused: missing or wrong bearer token (%d so far)",
                        peer,
                        self.refused_requests,
                    )
                return "401 Unauthorized", {"error": "missing or wrong bearer token"}
        if len(parts) != 3 or parts[0] != "GET":
            log.info("admin request from %s refused: not a GET (%r)", peer, lines[0][:80])
            return "405 Method Not Allowed", {"error": "only GET is served"}
        route = self._routes.get(path)
        if route is None:
            return "404 Not Found", {"error": f"no such path; try one of {sorted(self._routes)}"}
        try:
            return "200 OK", route()
        except Exception as exc:  # an admin read must never take the service down
            log.exception("admin route %s failed", parts[1])
            return "500 Internal Server Error", {"error": type(exc).__name__}


class AdminHttpThread:
    """An ``AdminHttpServer`` on an event loop of its own, in a daemon thread: for processes without
    an event loop (the pipeline). ``start`` returns once it listens; ``stop`` closes it."""

    def __init__(self, server: AdminHttpServer) -> None:
        self.server = server
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> str:
        loop = self._loop = asyncio.new_event_loop()
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.server.start())
            except BaseException as exc:  # e.g. the port is taken: the caller hears of it
                started.set_exception(exc)
                loop.close()
                return
            started.set_result(None)
            loop.run_forever()
            loop.run_until_complete(self.server.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="admin-http", daemon=True)
        self._thread.start()
        started.result(timeout)
        return self.server.url

    def stop(self, timeout: float = 5.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
