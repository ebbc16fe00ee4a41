"""A coordinator process killed with SIGKILL recovers from its log; clients ride through restarts."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable

import pytest

from kafka_store import REGISTRY, KafkaConfig, TopicAdmin, free_port, read_range
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.records import TXN_META
from pulsar_txn.errors import InvalidTxnStatusError, Timeout
from pulsar_txn.tc_client import SyncTcClient
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import CoordinatorProcess, wait_until
from tests.integration.test_coordinator import _markers

pytestmark = pytest.mark.integration

ProcFactory = Callable[[CoordinatorConfig], CoordinatorProcess]
ConfigFactory = Callable[..., CoordinatorConfig]


def _latest_status(kafka: KafkaConfig, log_topic: str, txn: TxnID) -> str | None:
    status = None
    for rec in read_range(kafka, log_topic, txn.most_bits):
        if rec.key and rec.key.startswith(f"txn/{txn.most_bits}/{txn.least_bits}@".encode()) and rec.value:
            status = REGISTRY.decode_as(TXN_META, rec.value)["status"]
    return status


def test_sigkill_between_committing_and_committed_then_restart_completes_the_commit(
    coordinator_process: ProcFactory,
    coord_config: ConfigFactory,
    kafka: KafkaConfig,
    admin: TopicAdmin,
    uid: str,
) -> None:
    cfg = coord_config(static_tc_ids=(0,), num_tcs=1, port=free_port(), log_write_timeout_ms=1500)
    proc = coordinator_process(cfg).start()
    ready, late = f"ready_{uid}", f"late_{uid}"
    admin.ensure_topic(ready, 1)
    with SyncTcClient(proc.url, operation_timeout=3, num_tcs=1) as client:
        txn = client.new_txn(120_000)
        # ``late`` does not exist yet: its marker cannot be written, so the commit stays COMMITTING.
        client.add_partitions(txn, [ready, late])
        with pytest.raises(Timeout):
            client.end_txn(txn, TxnAction.COMMIT)
    assert _latest_status(kafka, cfg.log_topic, txn) == "COMMITTING"
    wait_until(lambda: len(_markers(kafka, ready, 0)) == 1, 10, what="marker on the ready partition")
    proc.kill()  # SIGKILL, between COMMITTING and COMMITTED
    admin.ensure_topic(late, 1)
    proc.start()
    # No client is needed: recovery drives the transaction to the end by itself.
    wait_until(lambda: _latest_status(kafka, cfg.log_topic, txn) == "COMMITTED", 30, what="COMMITTED")
    assert [(m[1], m[2]) for m in _markers(kafka, late, 0)] == [(txn, TxnAction.COMMIT)]
    # Recovery checks the partition before re-writing: still exactly one marker there.
    assert [(m[1], m[2]) for m in _markers(kafka, ready, 0)] == [(txn, TxnAction.COMMIT)]
    with SyncTcClient(proc.url, operation_timeout=10, num_tcs=1) as client:
        client.end_txn(txn, TxnAction.COMMIT)  # idempotent: the outcome is known
        with pytest.raises(InvalidTxnStatusError):
            client.end_txn(txn, TxnAction.ABORT)


def test_open_txn_keeps_its_deadline_across_sigkill(
    coordinator_process: ProcFactory, coord_config: ConfigFactory, kafka: KafkaConfig
) -> None:
    cfg = coord_config(static_tc_ids=(0,), num_tcs=1, port=free_port())
    proc = coordinator_process(cfg).start()
    with SyncTcClient(proc.url, operation_timeout=10, num_tcs=1) as client:
        short = client.new_txn(3_000)
        long = client.new_txn(120_000)
    opened = time.time()
    proc.kill()
    proc.start()
    wait_until(lambda: _latest_status(kafka, cfg.log_topic, short) == "ABORTED", 30, what="timeout abort")
    assert time.time() - opened >= 2.5  # aborted at its original deadline, not a fresh one
    with SyncTcClient(proc.url, operation_timeout=10, num_tcs=1) as client:
        with pytest.raises(InvalidTxnStatusError, match="timed out"):
            client.end_txn(short, TxnAction.COMMIT)
        client.end_txn(long, TxnAction.COMMIT)
        assert client.new_txn(0) == TxnID(0, 2)  # sequences continue after the crash


def test_client_retries_while_the_coordinator_restarts_and_recovers(
    coordinator_process: ProcFactory, coord_config: ConfigFactory, admin: TopicAdmin, uid: str
) -> None:
    admin.ensure_topic(f"retry_{uid}", 1)
    cfg = coord_config(static_tc_ids=(0,), num_tcs=1, port=free_port())
    proc = coordinator_process(cfg).start()
    assert proc.info["event_loop"] == "uvloop"  # the service runs on uvloop (a declared dependency)
    with SyncTcClient(proc.url, operation_timeout=60, num_tcs=1) as client:
        txn = client.new_txn(120_000)
        proc.kill()
        restarter = threading.Timer(1.0, proc.start)
        restarter.start()
        try:
            # Connection refused, then ServiceNotReady while recovering: all retried within the timeout.
            client.add_partitions(txn, [f"retry_{uid}"])
        finally:
            restarter.join()
        client.end_txn(txn, TxnAction.ABORT)


def test_a_coordinator_restarted_with_its_group_instance_id_takes_its_tb_partitions_back_at_once(
    coordinator_process: ProcFactory, coord_config: ConfigFactory, admin: TopicAdmin, uid: str
) -> None:
    topic = f"static_{uid}"
    admin.ensure_topic(topic, 2, {})
    cfg = coord_config(
        static_tc_ids=(0,),
        num_tcs=1,
        port=free_port(),
        admin_port=free_port(),
        tb_service_enabled=True,
        tb_topic_refresh_ms=300,
        group_session_timeout_ms=30_000,  # a dead dynamic member would hold its partitions this long
        group_instance_id=f"coordinator-{uid}",
    )
    url = f"http://127.0.0.1:{cfg.admin_port}/admin/v2/transactions/transactionBufferStats"
    want = {f"{topic}-partition-0", f"{topic}-partition-1"}

    def served() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return want <= set(json.loads(response.read())["partitions"])
        except OSError:
            return False

    proc = coordinator_process(cfg).start()
    wait_until(served, 30, what="the TB service serving the topic")
    proc.kill()
    proc.start()
    restarted = time.monotonic()
    wait_until(served, 30, what="the restarted TB service serving the topic again")
    # Static membership: the restart replaced its dead member instead of waiting out its session (on
    # the embedded broker a dead dynamic member is never evicted at all).
    assert time.monotonic() - restarted < 15
