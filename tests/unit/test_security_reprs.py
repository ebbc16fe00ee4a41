"""Objects that hold secrets (passed-through Kafka settings, the token, the marker secret) keep them
out of their repr: reprs end up in logs, tracebacks and Spark's task descriptions."""

from __future__ import annotations

import importlib.util
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from pulsar_txn.buffer.reader import BufferOptions
from pulsar_txn.buffer.state import TxnBufferState
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
