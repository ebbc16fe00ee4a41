"""The admin client's handling of odd answers and tokens: typed errors, never a raw decode error, and
a non-ASCII token sent as the server compares it (UTF-8)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest

from pulsar_txn import cli
from pulsar_txn.admin import TransactionsAdmin, fetch_admin
from pulsar_txn.admin_http import AdminHttpServer, AdminHttpThread
from pulsar_txn.errors import PulsarTxnError


@contextmanager
def serving(body: bytes, content_type: str = "application/json") -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("token", ["geheimnisä", "секрет"])
def test_a_non_ascii_token_the_server_accepts_is_accepted_from_our_client(token: str) -> None:
    server = AdminHttpThread(AdminHttpServer({"/x": lambda: {"ok": 1}}, auth_token=token))
    url = server.start()
    try:
        assert json.loads(fetch_admin(url, "/x", token, 5)) == {"ok": 1}
    finally:
        server.stop()


def test_metrics_that_are_not_utf8_are_a_typed_error_and_the_cli_shows_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with serving(b"pulsar_txn_x 1 \xff\n", "text/plain") as url:
        admin = TransactionsAdmin(cast(Any, None), admin_url=url)
        with pytest.raises(PulsarTxnError, match="not UTF-8"):
            admin.metrics()
        assert cli.main(["metrics", "--admin-url", url]) == 0
    assert "pulsar_txn_x 1" in capsys.readouterr().out


def test_coordinator_stats_keyed_by_something_else_than_tc_ids_are_a_typed_error() -> None:
    with (
        serving(b'{"coordinators": {"zero": {}}}') as url,
        pytest.raises(PulsarTxnError, match="unexpected coordinator stats"),
    ):
        TransactionsAdmin(cast(Any, None), admin_url=url).coordinator_stats()
