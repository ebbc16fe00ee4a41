"""The admin HTTP endpoint with a token: nothing is answered, revealed or run before authentication,
refusals are logged without the credentials, and the clients never send the token to another host."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import pytest

from pulsar_txn import cli
from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.admin_http import AdminHttpServer, TextBody
from pulsar_txn.errors import PulsarTxnError

T = TypeVar("T")
TOKEN = "adm1n-s3cret-token"
STATS = "/admin/v2/transactions/coordinatorStats"


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(15):
            return await coro

    return asyncio.run(bounded())


class Routes:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def table(self) -> dict[str, Any]:
        def stats() -> dict[str, Any]:
            self.calls.append(STATS)
            return {"coordinators": {"0": {"committed_count": 7}}}

        return {STATS: stats}


async def request(server: AdminHttpServer, head: str) -> tuple[int, dict[str, Any]]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode("latin-1"))
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    status_line, _, rest = raw.partition(b"\r\n")
    body = rest.split(b"\r\n\r\n", 1)[1]
    return int(status_line.split()[1]), json.loads(body)


async def ask(routes: Routes, head: str, token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
    server = AdminHttpServer(routes.table(), auth_token=token)
    await server.start()
    try:
        return await request(server, head)
    finally:
        await server.stop()


@pytest.mark.parametrize(
    "head",
    [
        f"POST {STATS} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        f"DELETE {STATS} HTTP/1.1\r\nHost: x\r\n\r\n",
        "BREW /pot\r\n\r\n",
        f"POST {STATS} HTTP/1.1\r\nAuthorization: Bearer wrong\r\n\r\n",
    ],
    ids=["post", "delete", "garbage-request-line", "post-wrong-token"],
)
def test_unauthenticated_requests_of_any_method_get_401_before_anything_else(head: str) -> None:
    routes = Routes()
    status, body = run(ask(routes, head))
    assert status == 401, body
    assert routes.calls == []


@pytest.mark.parametrize(
    "head",
    [
        f"GET {STATS} HTTP/1.1\r\nHost: x\r\n\r\n",
        f"GET {STATS} HTTP/1.1\r\nAuthorization: Bearer wrong\r\n\r\n",
        f"GET {STATS} HTTP/1.1\r\nAuthorization: {TOKEN}\r\n\r\n",  # no scheme
        f"GET {STATS} HTTP/1.1\r\nAuthorization: Bearer {TOKEN}x\r\n\r\n",
        "GET /no/such/path HTTP/1.1\r\n\r\n",  # a 404 would list the routes
    ],
    ids=["no-header", "wrong-token", "no-scheme", "token-prefix", "unknown-path"],
)
def test_unauthenticated_gets_reveal_no_stats_and_no_routes(head: str) -> None:
    routes = Routes()
    status, body = run(ask(routes, head))
    assert status == 401
    assert routes.calls == []
    assert "coordinator" not in json.dumps(body).lower()


def test_the_right_token_is_served_and_a_wrong_method_then_gets_405() -> None:
    routes = Routes()
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    assert run(ask(routes, f"GET {STATS}?x=1 HTTP/1.1\r\n{auth}\r\n")) == (
        200,
        {"coordinators": {"0": {"committed_count": 7}}},
    )
    assert run(ask(routes, f"POST {STATS} HTTP/1.1\r\n{auth}\r\n"))[0] == 405
    assert run(ask(routes, f"GET /nope HTTP/1.1\r\n{auth}\r\n"))[0] == 404
    assert routes.calls == [STATS]


def test_refused_requests_are_logged_without_the_credentials(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pulsar_txn.admin_http")
    presented = "Bearer forged-" + TOKEN[::-1]
    status, _ = run(ask(Routes(), f"GET {STATS} HTTP/1.1\r\nAuthorization: {presented}\r\n\r\n"))
    assert status == 401
    refusals = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert refusals and "bearer token" in refusals[0].getMessage()
    assert TOKEN not in caplog.text and TOKEN[::-1] not in caplog.text


# -- clients of the endpoint: the token goes only to admin_url ----------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET: the redirector with a 302 elsewhere, the elsewhere with stats."""

    location: str | None = None
    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers.items()))
        if self.location is not None:
            self.send_response(302)
            self.send_header("Location", self.location + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        payload = json.dumps({"coordinators": {"0": {"committed_count": 1}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def http_server(location: str | None = None) -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    handler = type("Handler", (_Recorder,), {"location": location, "seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def redirect_to_elsewhere() -> Iterator[tuple[str, list[dict[str, str]], list[dict[str, str]]]]:
    with http_server() as (elsewhere, seen_elsewhere), http_server(elsewhere) as (admin_url, seen_admin):
        yield admin_url, seen_admin, seen_elsewhere


def test_transactions_admin_does_not_follow_a_redirect_with_the_token() -> None:
    with redirect_to_elsewhere() as (admin_url, seen_admin, seen_elsewhere):
        admin = TransactionsAdmin(cast(Any, None), admin_url=admin_url, auth_token=TOKEN)
        with pytest.raises(PulsarTxnError, match="302"):
            admin.coordinator_stats()
    assert seen_admin and seen_admin[0].get("Authorization") == f"Bearer {TOKEN}"
    assert all(TOKEN not in json.dumps(h) for h in seen_elsewhere)


def test_cli_coordinator_stats_does_not_follow_a_redirect_with_the_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PULSAR_TXN_AUTH_TOKEN", TOKEN)
    with redirect_to_elsewhere() as (admin_url, seen_admin, seen_elsewhere):
        code = cli.main(["coordinator-stats", "--admin-url", admin_url])
    assert seen_admin and seen_admin[0].get("Authorization") == f"Bearer {TOKEN}"
    assert all(TOKEN not in json.dumps(h) for h in seen_elsewhere)
    assert code == 2 and "302" in capsys.readouterr().err


def test_a_read_only_metrics_token_opens_metrics_and_nothing_else() -> None:
    metrics_token = "scrape-only-7c1"
    calls: list[str] = []

    def metrics() -> TextBody:
        calls.append("/metrics")
        return TextBody("pulsar_txn_up 1\n")

    routes = Routes()
    table = {**routes.table(), "/metrics": metrics}

    async def go(path: str, token: str | None) -> int:
        server = AdminHttpServer(table, auth_token=TOKEN, path_tokens={"/metrics": metrics_token})
        await server.start()
        try:
            head = (
                f"GET {path} HTTP/1.1\r\n" + (f"Authorization: Bearer {token}\r\n" if token else "") + "\r\n"
            )
            host, port = server.url.removeprefix("http://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(head.encode())
            await writer.drain()
            raw = await reader.read()
            writer.close()
            await writer.wait_closed()
            return int(raw.split(b" ", 2)[1])
        finally:
            await server.stop()

    assert run(go("/metrics", metrics_token)) == 200
    assert run(go("/metrics", TOKEN)) == 200  # the full token works everywhere
    assert run(go("/metrics", None)) == 401
    assert run(go("/metrics", "wrong")) == 401
    assert run(go(STATS, metrics_token)) == 401  # read-only: not the coordinator's other routes
    assert routes.calls == [] and calls == ["/metrics", "/metrics"]


@contextmanager
def _raw_server(answer: bytes) -> Iterator[str]:
    """A TCP server that answers any request with ``answer`` and closes."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        thread.join(5)


@pytest.mark.parametrize(
    "answer",
    [b"SSH-2.0-OpenSSH_9.6\r\n", b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"owned'],
    ids=["not-http", "cut-short"],
)
def test_a_server_that_does_not_answer_http_is_a_typed_error_not_a_traceback(
    answer: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    with _raw_server(answer) as admin_url:
        admin = TransactionsAdmin(cast(Any, None), admin_url=admin_url)
        with pytest.raises(PulsarTxnError, match="not a valid HTTP answer"):
            admin.coordinator_stats()
        assert cli.main(["coordinator-stats", "--admin-url", admin_url]) == 2
    assert "not a valid HTTP answer" in capsys.readouterr().err


def test_an_admin_url_with_a_port_that_is_not_a_number_is_a_config_error() -> None:
    from pulsar_txn.errors import ConfigError

    admin = TransactionsAdmin(cast(Any, None), admin_url="http://127.0.0.1:notaport")
    with pytest.raises(ConfigError, match="admin URL"):
        admin.coordinator_stats()


@pytest.mark.parametrize("padding", [17_000, 70_000], ids=["over-our-limit", "over-the-stream-buffer"])
def test_a_request_head_too_large_is_refused_as_such_not_as_a_wrong_token(padding: int) -> None:
    """Cut at the limit, the right token after it read as a wrong one: a 401 counted (and logged) as
    a refused credential for a correct client (CLI review)."""
    routes = Routes()
    server = AdminHttpServer(routes.table(), auth_token=TOKEN)

    async def scenario() -> tuple[int, dict[str, Any]]:
        await server.start()
        try:
            head = f"GET {STATS} HTTP/1.1\r\nX-Pad: {'p' * padding}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
            return await request(server, head)
        finally:
            await server.stop()

    status, _body = run(scenario())
    assert status == 431
    assert server.refused_requests == 0
    assert routes.calls == []


def test_connections_dropped_unread_are_logged_once_per_hundred(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pulsar_txn.admin_http")
    server = AdminHttpServer(Routes().table(), auth_token=TOKEN)

    async def scenario() -> None:
        await server.start()
        try:
            host, port = server.url.removeprefix("http://").rsplit(":", 1)
            for _ in range(150):
                _reader, writer = await asyncio.open_connection(host, int(port))
                writer.close()
                await writer.wait_closed()
            while server.dropped_requests < 150:
                await asyncio.sleep(0.01)
        finally:
            await server.stop()

    run(scenario())
    assert len([r for r in caplog.records if "dropped: unreadable" in r.getMessage()]) == 2
