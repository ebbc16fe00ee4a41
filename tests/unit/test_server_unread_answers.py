"""A client that floods requests and never reads the answers cannot hold the coordinator's server:
its connection is dropped once it has been silent for two ping intervals (the keep-alive never waits
for it to read), and ``stop()`` does not wait for it to read either."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import pytest

import pulsar_txn.server as server_module
from pulsar_txn.protocol import CommandConnect, CommandLookupTopic, encode_command, wrap
from pulsar_txn.server import CoordinatorServer
from tests.unit.test_protocol_server import FakeApi

LOOKUP = encode_command(wrap(CommandLookupTopic(topic="u" * 300, request_id=7)))


def _flooder() -> tuple[socket.socket, Callable[[int], None]]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)

    def flood(port: int) -> None:
        """Connect, send requests until the server stops reading them, then go silent (never read)."""
        sock.connect(("127.0.0.1", port))
        sock.sendall(encode_command(wrap(CommandConnect(client_version="flood", protocol_version=20))))
        sock.settimeout(1.0)
        try:
            for _ in range(10_000):
                sock.sendall(LOOKUP * 100)
        except (TimeoutError, ConnectionError):
            pass  # the server stopped reading us (or dropped us already)

    return sock, flood


async def _connections_left_after(server: CoordinatorServer, seconds: float) -> int:
    until = time.monotonic() + seconds
    while server._connections and time.monotonic() < until:
        await asyncio.sleep(0.05)
    return len(server._connections)


def test_a_client_that_never_reads_its_answers_is_dropped_after_the_silence_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_module, "_WRITE_HIGH_WATER", 4096)
    sock, flood = _flooder()

    async def scenario() -> int:
        server = CoordinatorServer(FakeApi(), ping_interval=0.2)
        await server.start()
        try:
            await asyncio.to_thread(flood, server.port)
            return await _connections_left_after(server, 4.0)  # the limit is 0.4 s
        finally:
            for conn in list(server._connections):
                conn._writer.transport.abort()
            await asyncio.wait_for(server.stop(), 10)

    try:
        assert asyncio.run(scenario()) == 0
    finally:
        sock.close()


def test_stop_does_not_wait_for_a_client_that_never_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "_WRITE_HIGH_WATER", 4096)
    sock, flood = _flooder()

    async def scenario() -> float:
        server = CoordinatorServer(FakeApi(), ping_interval=30.0)
        await server.start()
        await asyncio.to_thread(flood, server.port)
        started = time.monotonic()
        try:
            await asyncio.wait_for(server.stop(), 8)
        except TimeoutError:
            for conn in list(server._connections):
                conn._writer.transport.abort()
            await server.stop()
            return float("inf")
        return time.monotonic() - started

    try:
        assert asyncio.run(scenario()) < 8
    finally:
        sock.close()
