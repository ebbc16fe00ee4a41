"""Connection limits on the endpoints we open: a connection over ``max_connections`` (or over
``max_connections_per_ip``) is closed at once and counted; closing one frees its place. The admin
endpoint answers a bounded number of connections at once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from pulsar_txn import admin_http
from pulsar_txn.admin_http import AdminHttpServer
from pulsar_txn.config import CoordinatorConfig
from tests.unit.test_protocol_server import RawClient, run
from tests.unit.test_security_server import serving_nothing


async def _closed_at_once(client: RawClient) -> bool:
    try:
        return await client.recv_until_closed(timeout=2) == []
    except TimeoutError:
        return False


def test_connections_over_max_connections_are_closed_and_a_freed_place_is_reused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pulsar_txn.server")

    async def scenario() -> None:
        async with serving_nothing(max_connections=2) as server:
            first, second = await RawClient.open(server), await RawClient.open(server)
            await first.handshake()
            await second.handshake()
            third = await RawClient.open(server)
            assert await _closed_at_once(third)
            assert server.refused_connections == 1
            await first.ping_pong()  # the admitted ones are untouched
            await first.close()
            await asyncio.sleep(0.2)
            fourth = await RawClient.open(server)
            await fourth.handshake()  # the freed place is taken
            for c in (second, third, fourth):
                await c.close()

    run(scenario())
    assert "max_connections (2)" in caplog.text


def test_connections_that_never_send_connect_give_way_to_new_ones_at_the_limit() -> None:
    """Anyone can open connections and never authenticate: at max_connections the oldest such one is
    closed for a new connection, so they cannot lock out clients with the token."""

    async def scenario() -> None:
        async with serving_nothing(max_connections=2) as server:
            silent = [await RawClient.open(server), await RawClient.open(server)]
            await asyncio.sleep(0.1)
            client = await RawClient.open(server)
            await client.handshake()  # admitted: the oldest silent one gave way
            assert await silent[0].recv_until_closed(timeout=2) == []
            assert server.evicted_connections == 1 and server.refused_connections == 0
            await client.ping_pong()
            late = await RawClient.open(server)  # the other silent one gives way now
            await late.handshake()
            assert await silent[1].recv_until_closed(timeout=2) == []
            refused = await RawClient.open(server)  # both are clients': refused
            assert await _closed_at_once(refused)
            assert server.refused_connections == 1
            for c in (*silent, client, late, refused):
                await c.close()

    run(scenario())


def test_a_connection_over_its_per_ip_limit_closes_no_other_connection() -> None:
    async def scenario() -> None:
        async with serving_nothing(max_connections=1, max_connections_per_ip=1) as server:
            other = await RawClient.open(server)  # has not sent CONNECT yet
            await asyncio.sleep(0.1)
            refused = await RawClient.open(server)  # over both limits: refused, evicting nobody
            assert await _closed_at_once(refused)
            assert server.evicted_connections == 0
            await other.handshake()  # untouched
            for c in (other, refused):
                await c.close()

    run(scenario())


def test_connections_over_the_per_ip_limit_are_closed() -> None:
    async def scenario() -> None:
        async with serving_nothing(max_connections_per_ip=1) as server:
            first = await RawClient.open(server)
            await first.handshake()
            second = await RawClient.open(server)
            assert await _closed_at_once(second)
            await first.ping_pong()
            await first.close()
            await second.close()

    run(scenario())


def test_limits_come_from_the_coordinator_config_and_refuse_negatives() -> None:
    config = CoordinatorConfig(max_connections=5, max_connections_per_ip=2)
    assert (config.max_connections, config.max_connections_per_ip) == (5, 2)
    assert CoordinatorConfig().max_connections == 10_000
    with pytest.raises(ValueError, match="max_connections"):
        CoordinatorConfig(max_connections=-1)


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 2) == b""
    except ConnectionResetError:  # aborted: an RST instead of a FIN
        return True


def test_the_admin_endpoint_answers_a_bounded_number_of_connections_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admin_http, "_MAX_OPEN", 2)
    big = admin_http.TextBody("x" * 50_000_000)  # far more than the socket buffers: drain waits

    async def scenario() -> None:
        server = AdminHttpServer({"/admin/v2/health": lambda: {"ok": True}, "/big": lambda: big})
        await server.start()
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        try:
            # Two clients being answered (neither reads its answer) hold both places.
            slow: list[Any] = [await asyncio.open_connection(host, int(port)) for _ in range(2)]
            for _, w in slow:
                w.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            await asyncio.sleep(0.3)
            reader, writer = await asyncio.open_connection(host, int(port))
            assert await _closed(reader)  # closed, nothing answered
            writer.close()
            assert server.refused_connections == 1
            for _, w in slow:
                w.transport.abort()
            await asyncio.sleep(0.2)  # their handlers end (the answer cannot be written)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /admin/v2/health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 200")
            writer.close()
        finally:
            await server.stop()

    run(scenario())


def test_connections_that_never_send_a_whole_request_give_way_to_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Anyone can open connections and send half a request (no token needed): at the limit, the one
    that waited longest is closed, so a client with a whole request (a health check) is answered."""
    monkeypatch.setattr(admin_http, "_MAX_OPEN", 2)

    async def scenario() -> None:
        server = AdminHttpServer({"/admin/v2/health": lambda: {"ok": True}}, auth_token="t0ken")
        await server.start()
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        try:
            idle: list[Any] = []
            for _ in range(2):
                idle.append(await asyncio.open_connection(host, int(port)))
                idle[-1][1].write(b"GET / HTTP/1.1\r\n")  # half a request, never finished
                await asyncio.sleep(0.05)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /admin/v2/health HTTP/1.1\r\nAuthorization: Bearer t0ken\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 200")
            assert await _closed(idle[0][0])  # the oldest gave way
            assert server.evicted_connections == 1 and server.refused_connections == 0
            idle[1][1].write(b"Host: x\r\n\r\n")  # the younger one is still served
            assert (await asyncio.wait_for(idle[1][0].read(), 5)).startswith(b"HTTP/1.1 401")
            for _, w in idle:
                w.close()
            writer.close()
        finally:
            await server.stop()

    run(scenario())
