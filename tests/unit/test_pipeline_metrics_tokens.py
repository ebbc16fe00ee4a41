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
