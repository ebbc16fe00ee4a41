"""The client's transaction side when the coordinator is down, frozen or slow, and the ``with``
block's end: found in review (session 26)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import wait

import pytest

from kafka_store import KafkaConfig, free_port
from pulsar_txn.client import Client
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.errors import InvalidTxnStatusError, PulsarTxnError, TransactionHasOperationFailed
from pulsar_txn.tc_client import SyncTcClient
from pulsar_txn.transaction import TransactionState
from pulsar_txn.txnid import TxnAction
from tests.conftest import Cluster

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _tc_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("pulsar-txn-tc-client"))


def test_failed_coordinator_connects_leave_no_thread_or_loop_behind(kafka: KafkaConfig) -> None:
    client = Client(f"pulsar://127.0.0.1:{free_port()}", kafka=kafka, num_tcs=4, operation_timeout_seconds=1)
    before = _tc_threads()
    try:
        for _ in range(4):
            with pytest.raises(PulsarTxnError):
                client.transaction(10)
        # Each failed connect used to leave its client's loop thread running, for good.
        assert _tc_threads() == before
    finally:
        client.close()


def test_a_plain_send_does_not_wait_for_a_transaction_connecting_to_a_dead_coordinator(
    kafka: KafkaConfig, uid: str
) -> None:
    client = Client(f"pulsar://127.0.0.1:{free_port()}", kafka=kafka, num_tcs=4, operation_timeout_seconds=5)
    try:
        topic = f"plain_{uid}"
        client.create_topic(topic, 1)
        producer = client.create_producer(topic)
        producer.send(b"warm-up")
        failed: list[BaseException] = []

        def begin() -> None:
            try:
                client.transaction(30)
            except PulsarTxnError as exc:
                failed.append(exc)

        txn_thread = threading.Thread(target=begin, daemon=True)
        txn_thread.start()
        time.sleep(0.5)  # the transaction is connecting (and retrying) now
        started = time.monotonic()
        producer.send(b"plain")  # needs no coordinator
        took = time.monotonic() - started
        txn_thread.join(15)
        assert failed, "the transaction should have failed: nothing listens there"
        # It waited for the connect's lock, up to the whole operation timeout (5 s).
        assert took < 2.0, took
    finally:
        client.close()


def test_a_coordinator_call_ends_within_its_operation_timeout_when_the_coordinator_freezes_then_dies(
    coordinator_process: Callable[[CoordinatorConfig], object], coord_config: Callable[..., CoordinatorConfig]
) -> None:
    proc = coordinator_process(coord_config(static_tc_ids=(0,), num_tcs=1, port=free_port())).start()  # type: ignore[attr-defined]
    op = 3.0
    client = SyncTcClient(proc.url, operation_timeout=op, num_tcs=1)
    try:
        client.connect()
        txn = client.new_txn(60_000)
        os.kill(proc.proc.pid, signal.SIGSTOP)
        killer = threading.Timer(op - 0.5, proc.kill)
        killer.start()
        started = time.monotonic()
        with pytest.raises(PulsarTxnError):
            client.end_txn(txn, TxnAction.COMMIT)
        took = time.monotonic() - started
        killer.join()
        # The fast path's failure (the connection closed) fell back to a slow path with a fresh
        # operation timeout: up to twice as long.
        assert took <= op + 1.0, took
    finally:
        client.close()


@pytest.mark.parametrize("end", ["commit_async", "abort_async"])
def test_a_with_block_that_began_its_own_end_exits_without_error(
    cluster: ClusterFactory, uid: str, end: str
) -> None:
    c = cluster()
    topic = f"blockend_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with c.client.transaction(60) as txn:
        producer.send(b"m", txn=txn)
        ending = getattr(txn, end)()
    ending.result(30)
    expected = TransactionState.COMMITTED if end == "commit_async" else TransactionState.ABORTED
    assert txn.state is expected


def test_a_sub_millisecond_transaction_timeout_is_not_the_coordinators_default(
    cluster: ClusterFactory,
) -> None:
    c = cluster(default_txn_timeout_ms=600_000, max_txn_timeout_ms=900_000)
    txn = c.client.transaction(0.0005)
    tc = c.coordinator.service.coordinator(txn.txn_id.most_bits)  # type: ignore[union-attr]
    meta = tc.get(txn.txn_id)
    assert meta is not None
    # 0 ms on the wire asked for the coordinator's default: 10 minutes here.
    assert meta.timeout_ms == txn.timeout_ms == 1


def test_ending_a_transaction_that_cannot_end_gives_a_failed_future(cluster: ClusterFactory) -> None:
    """As Pulsar's ``commit()`` / ``abort()`` (a failed CompletableFuture): ``commit_async`` and
    ``abort_async`` raised at the call (transaction review of session 43)."""
    c = cluster(tb_service_enabled=False)
    txn = c.client.transaction(60)
    txn.commit()
    for end in (txn.commit_async, txn.abort_async):
        assert isinstance(end().exception(5), InvalidTxnStatusError)


def test_a_commit_turned_abort_refused_as_ended_elsewhere_does_not_say_it_was_not_committed(
    cluster: ClusterFactory, uid: str
) -> None:
    """A failed send makes the commit abort instead; the abort is refused because another client
    committed the transaction by id. The error said it 'was not committed' and would be aborted at
    its timeout, while its message was committed and readable (transaction review)."""
    c = cluster(tb_service_enabled=False)
    topic = f"ended_elsewhere_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send(b"good", txn=txn)
    failed = producer.send_async(b"z" * 3_000_000, txn=txn)  # over the record limit
    wait([failed], 10)
    other = c.other_client()
    try:
        other.resume_transaction(txn.txn_id).commit()
    finally:
        other.close()
    with pytest.raises(TransactionHasOperationFailed) as caught:
        txn.commit()
    assert "ended elsewhere" in str(caught.value) and "at its timeout" not in str(caught.value)
    assert txn.state is TransactionState.ERROR
