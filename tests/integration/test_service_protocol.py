"""The coordinator service over the Pulsar protocol: lookups across instances, auth, stats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.errors import AuthenticationError, InvalidTxnStatusError
from pulsar_txn.tc_client import SyncTcClient
from pulsar_txn.txnid import TxnAction
from tests.conftest import REPO, wait_until

pytestmark = pytest.mark.integration

Factory = Callable[..., EmbeddedCoordinator]
ConfigFactory = Callable[..., CoordinatorConfig]


def test_client_finds_each_tc_owner_and_follows_ownership_when_an_instance_leaves(
    embedded: Factory, coord_config: ConfigFactory
) -> None:
    cfg = coord_config(ownership="group", static_tc_ids=())
    a = embedded(cfg, serve=True)
    wait_until(lambda: len(a.owned_tcs()) == 4, 30)
    b = embedded(cfg, serve=True, wait=False)
    wait_until(lambda: b.owned_tcs() and len(a.owned_tcs()) + len(b.owned_tcs()) == 4, 45, what="split")
    assert a.url is not None
    with SyncTcClient(a.url, operation_timeout=30) as client:
        assert client.num_tcs == 4
        txns = [client.new_txn(60_000) for _ in range(8)]  # round-robin: half land on B via lookup
        assert sorted({t.most_bits for t in txns}) == [0, 1, 2, 3]
        for t in txns[:4]:
            client.end_txn(t, TxnAction.COMMIT)
        b.stop()
        # B's TCs move to A; the client re-looks them up and the open transactions are still there.
        for t in txns[4:]:
            client.end_txn(t, TxnAction.ABORT)
        with pytest.raises(InvalidTxnStatusError):
            client.end_txn(txns[0], TxnAction.ABORT)


def test_token_authentication_rejects_wrong_tokens_and_accepts_the_right_one(
    embedded: Factory, coord_config: ConfigFactory
) -> None:
    ec = embedded(coord_config(static_tc_ids=(0,), num_tcs=1, auth_token="s3cret-token"), serve=True)
    assert ec.url is not None
    with pytest.raises(AuthenticationError), SyncTcClient(ec.url, auth_token="wrong", operation_timeout=5):
        pass
    with SyncTcClient(ec.url, auth_token="s3cret-token", operation_timeout=10) as client:
        client.end_txn(client.new_txn(0), TxnAction.COMMIT)


def test_stats_are_readable_from_python_and_from_the_cli_as_json(
    embedded: Factory, coord_config: ConfigFactory
) -> None:
    ec = embedded(
        coord_config(static_tc_ids=(0,), num_tcs=1, admin_port=0, auth_token="t0k-9f2c"), serve=True
    )
    assert ec.url is not None and ec.admin_url is not None
    with SyncTcClient(ec.url, auth_token="t0k-9f2c", operation_timeout=10) as client:
        client.end_txn(client.new_txn(0), TxnAction.COMMIT)
        client.end_txn(client.new_txn(0), TxnAction.ABORT)
        client.new_txn(0)
    py = ec.stats()["coordinators"]["0"]
    assert (py["created_count"], py["committed_count"], py["aborted_count"], py["ongoing_txn_size"]) == (
        3,
        1,
        1,
        1,
    )
    cli = [sys.executable, "-m", "pulsar_txn.cli", "coordinator-stats", "--admin-url", ec.admin_url]
    env = dict(os.environ, PULSAR_TXN_AUTH_TOKEN="t0k-9f2c")
    out = subprocess.run(cli, capture_output=True, text=True, env=env, cwd=REPO, timeout=30, check=True)
    tc0 = json.loads(out.stdout)["coordinators"]["0"]
    assert tc0["committed_count"] == 1 and tc0["append_log_latency"]["count"] >= 5
    denied = subprocess.run(
        cli,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
        env={k: v for k, v in env.items() if k != "PULSAR_TXN_AUTH_TOKEN"},
    )
    assert denied.returncode == 2 and "missing or wrong auth token" in denied.stderr
    assert "t0k-9f2c" not in denied.stderr
