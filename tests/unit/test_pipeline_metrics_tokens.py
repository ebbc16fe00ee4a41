"""The pipeline's ``--metrics-port`` endpoint takes tokens as the coordinator's ``/metrics`` does:
the client's token and a scraper's read-only one (with both set, the client's got 401)."""

from __future__ import annotations

import argparse
import urllib.error
import urllib.request
from typing import Any, cast

import pytest

from pulsar_txn.pipeline.app import PipelineProgress
from pulsar_txn.pipeline.cli import _metrics_server


def _status(url: str, token: str | None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_both_the_client_token_and_the_metrics_token_open_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULSAR_TXN_AUTH_TOKEN", "client-token")
    monkeypatch.setenv("PULSAR_TXN_METRICS_TOKEN", "scrape-token")
    args = argparse.Namespace(
        metrics_port=0, metrics_host="127.0.0.1", instance_id="p", input="in", output="out"
    )
    pipeline = cast(Any, argparse.Namespace(progress=PipelineProgress()))
    server = _metrics_server(args, pipeline)
    assert server is not None
    try:
        url = f"{server.server.url}/metrics"
        assert _status(url, "client-token") == 200
        assert _status(url, "scrape-token") == 200
        assert _status(url, None) == 401
        assert _status(url, "wrong") == 401
    finally:
        server.stop()


@pytest.mark.parametrize("name", ["PULSAR_TXN_AUTH_TOKEN", "PULSAR_TXN_METRICS_TOKEN"])
def test_a_token_no_request_could_carry_is_refused_before_the_pipeline_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """As the coordinator refuses it: with a trailing line break (as secret files end) the token
    could never match, and every scrape was answered 401."""
    from pulsar_txn import cli

    monkeypatch.setenv(name, "scrape-token\n")
    rc = cli.main(
        [
            "pipeline",
            "--service-url",
            "pulsar://127.0.0.1:1",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--input",
            "in",
            "--output",
            "out",
            "--metrics-port",
            "0",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{name} holds a control character" in err
    assert "scrape-token" not in err


def test_standalone_refuses_a_kafka_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    from pulsar_txn import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["standalone", "--kafka-port", "70000"])
    assert exited.value.code == 2
    assert "port 70000 is not in 0-65535" in capsys.readouterr().err
