"""The admin HTTP endpoint drops a client that does not read its answer within the write timeout:
it cannot hold the handler, its socket and a copy of a large answer for good."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

import pulsar_txn.admin_http as admin_http
from pulsar_txn.admin_http import AdminHttpServer, TextBody

BIG = 8 << 20


def _handlers() -> int:
    return sum(1 for t in asyncio.all_tasks() if "_handle" in t.get_coro().__qualname__)  # type: ignore[union-attr]


def test_a_client_that_never_reads_its_answer_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_http, "_WRITE_TIMEOUT_S", 1)

    async def scenario() -> int:
        server = AdminHttpServer({"/metrics": lambda: TextBody("x" * BIG)})
        await server.start()
        port = int(server.url.rsplit(":", 1)[1])
        socks = []
        try:
            for _ in range(2):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(("127.0.0.1", port))
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                socks.append(s)
            until = time.monotonic() + 4
            while _handlers() == 0 and time.monotonic() < until:  # both requests are being answered
                await asyncio.sleep(0.05)
            while _handlers() and time.monotonic() < until:
                await asyncio.sleep(0.1)
            return _handlers()
        finally:
            for s in socks:
                s.close()
            await asyncio.sleep(0.2)
            await server.stop()

    assert asyncio.run(scenario()) == 0


def test_stop_ends_every_answer_in_progress_and_closes_its_socket() -> None:
    """``stop()`` cancels the answers in progress and returns with their sockets closed. It used to
    leave them to the loop: a loop closed right after (AdminHttpThread) left a socket open or half
    closed, found as an unclosed-transport ResourceWarning in an unrelated test."""

    async def scenario() -> tuple[int, bytes | None]:
        server = AdminHttpServer({"/metrics": lambda: TextBody("x" * BIG)})
        await server.start()
        port = int(server.url.rsplit(":", 1)[1])
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            until = time.monotonic() + 4
            while _handlers() == 0 and time.monotonic() < until:  # the answer is being written
                await asyncio.sleep(0.05)
            await server.stop()
            left = _handlers()
            # The socket is closed, not waiting for the client: after what is buffered, the end.
            s.settimeout(5)
            end: bytes | None = None
            try:
                while await asyncio.to_thread(s.recv, 1 << 20):
                    pass
                end = b""
            except ConnectionResetError:
                end = b""
            except TimeoutError:
                end = None
            return left, end
        finally:
            s.close()

    assert asyncio.run(scenario()) == (0, b"")
