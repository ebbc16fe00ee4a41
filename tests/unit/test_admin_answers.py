"""The admin client's handling of odd answers and tokens: typed errors, never a raw decode error, and
a non-ASCII token sent as the server compares it (UTF-8)."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any, cast

import pytest

from pulsar_txn import cli
from pulsar_txn.admin import TransactionsAdmin, fetch_admin
from pulsar_txn.admin_http import AdminHttpServer, AdminHttpThread
from pulsar_txn.errors import PulsarTxnError
from tests.unit.test_security_admin_http import _raw_server


def _answering(body: bytes, content_type: str = "application/json") -> AbstractContextManager[str]:
    """An HTTP server answering every request with 200 and ``body``."""
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return _raw_server(head.encode() + body)


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
    with _answering(b"pulsar_txn_x 1 \xff\n", "text/plain") as url:
        admin = TransactionsAdmin(cast(Any, None), admin_url=url)
        with pytest.raises(PulsarTxnError, match="not UTF-8"):
            admin.metrics()
        assert cli.main(["metrics", "--admin-url", url]) == 0
    assert "pulsar_txn_x 1" in capsys.readouterr().out


def test_coordinator_stats_keyed_by_something_else_than_tc_ids_are_a_typed_error() -> None:
    with (
        _answering(b'{"coordinators": {"zero": {}}}') as url,
        pytest.raises(PulsarTxnError, match="unexpected coordinator stats"),
    ):
        TransactionsAdmin(cast(Any, None), admin_url=url).coordinator_stats()
