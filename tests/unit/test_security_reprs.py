"""Objects that hold secrets (passed-through Kafka settings, the token, the marker secret) keep them
out of their repr: reprs end up in logs, tracebacks and Spark's task descriptions."""

from __future__ import annotations

import importlib.util
import urllib.error
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pulsar_txn.admin import fetch_admin
from pulsar_txn.admin_http import AdminHttpServer, AdminHttpThread
from pulsar_txn.buffer.reader import BufferOptions
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.errors import ConfigError
from spark._options import parse_options
from spark._write_task import ClientSettings
from tests.unit.test_security_admin_http import TOKEN, redirect_to_elsewhere

PASSWORD = "hunter2-sasl-password"
SECRET = "marker-secret-7f3a"


def test_spark_source_options_keep_kafka_passwords_and_the_marker_secret_out_of_their_repr() -> None:
    opts = parse_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:9092",
            "kafka.sasl.password": PASSWORD,
            "subscribe": "t",
            "markerSecret": SECRET,
        },
        streaming=False,
    )
    assert opts.kafka_conf["sasl.password"] == PASSWORD and opts.marker_secret == SECRET.encode()
    assert PASSWORD not in repr(opts) and SECRET not in repr(opts)


def test_spark_client_settings_keep_secrets_out_of_their_repr_and_stay_hashable() -> None:
    settings = ClientSettings(
        "pulsar://127.0.0.1:6650",
        "127.0.0.1:9092",
        kafka=(("sasl.password", PASSWORD),),
        authentication=TOKEN,
        marker_secret=SECRET,
    )
    text = repr(settings)
    assert PASSWORD not in text and TOKEN not in text and SECRET not in text
    assert hash(settings) == hash(ClientSettings(**settings.__dict__))  # still a cache key


def test_buffer_options_and_state_keep_the_marker_secret_out_of_their_repr() -> None:
    options = BufferOptions(marker_secret=SECRET.encode())
    state = TxnBufferState("t", 0, marker_secret=SECRET.encode())
    assert SECRET not in repr(options) and SECRET not in repr(state)


def _healthcheck() -> Any:
    path = Path(__file__).resolve().parents[2] / "docker" / "healthcheck.py"
    spec = importlib.util.spec_from_file_location("_healthcheck", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_container_healthcheck_does_not_follow_a_redirect_with_the_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    healthcheck = _healthcheck()
    monkeypatch.setenv("PULSAR_TXN_AUTH_TOKEN", TOKEN)
    with redirect_to_elsewhere() as (admin_url, seen_admin, seen_elsewhere):
        monkeypatch.setenv("PULSAR_TXN_HEALTH_URL", f"{admin_url}/admin/v2/health")
        assert healthcheck.main() == 1
    assert seen_admin and seen_admin[0].get("Authorization") == f"Bearer {TOKEN}"
    assert not seen_elsewhere
    assert "302" in capsys.readouterr().err
    assert issubclass(urllib.error.HTTPError, urllib.error.URLError)  # what main() catches


LEAKY = "s3cr3tTOKEN"


@pytest.mark.parametrize("token", [LEAKY + "\n", "s3\x00cr3tTOKEN", " " + LEAKY])
def test_coordinator_config_refuses_a_token_no_http_client_can_send(token: str) -> None:
    """A trailing line break (a token read from a secret file), a NUL or an edge space: no HTTP
    client can send it (or the server strips it), so the admin endpoint would lock everyone out.
    Refused at start, without quoting the token."""
    for name in ("auth_token", "metrics_token"):
        with pytest.raises(ValidationError) as info:
            CoordinatorConfig(**{name: token})
        assert LEAKY not in str(info.value)


def test_fetch_admin_refuses_a_token_with_a_line_break_without_printing_it() -> None:
    """It used to reach http.client, whose ValueError (a traceback in the CLI) quoted the token."""
    with pytest.raises(ConfigError) as info:
        fetch_admin("http://127.0.0.1:9", "/admin/v2/health", LEAKY + "\n", 5)
    assert LEAKY not in str(info.value)


def test_container_healthcheck_never_prints_the_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Docker keeps a health check's output (docker inspect): a bad token is named, not shown."""
    healthcheck = _healthcheck()
    monkeypatch.setenv("PULSAR_TXN_AUTH_TOKEN", LEAKY + "\n")
    monkeypatch.setenv("PULSAR_TXN_HEALTH_URL", "http://127.0.0.1:9/admin/v2/health")
    assert healthcheck.main() == 1
    out = capsys.readouterr()
    assert LEAKY not in out.out + out.err


def test_container_healthcheck_sends_a_non_latin1_token_as_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server compares the header's UTF-8 bytes (as fetch_admin sends them); a str header went
    out as latin-1 and failed to encode, so a healthy coordinator was reported unhealthy."""
    token = "токен-s3cret"
    thread = AdminHttpThread(
        AdminHttpServer({"/admin/v2/health": lambda: {"owned_tcs": [0]}}, auth_token=token)
    )
    url = thread.start()
    try:
        assert b"owned_tcs" in fetch_admin(url, "/admin/v2/health", token, 5)
        monkeypatch.setenv("PULSAR_TXN_AUTH_TOKEN", token)
        monkeypatch.setenv("PULSAR_TXN_HEALTH_URL", f"{url}/admin/v2/health")
        assert _healthcheck().main() == 0
    finally:
        thread.stop()
