"""Ending, timeouts and states: scenarios E1-E9 (SCENARIOS.md), on the public API only."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

import pulsar_txn
from compat_tests._helpers import drain, pending_acks, publish, read_all, receive_n, values, wait_until
from compat_tests.conftest import Deployment

pytestmark = pytest.mark.integration

State = pulsar_txn.TransactionState
Clients = Callable[..., pulsar_txn.Client]


def test_E1_send_ack_commit_on_committed_txn_raise_invalid_txn_status(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"e1_{uid}"
    publish(client, topic, 1)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "e1", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = client.transaction(60)
    txn.commit()
    with pytest.raises(pulsar_txn.InvalidTxnStatusError):
        producer.send("late", txn=txn)
    with pytest.raises(pulsar_txn.InvalidTxnStatusError):
        consumer.acknowledge(msg, txn=txn)
    with pytest.raises(pulsar_txn.InvalidTxnStatusError):
        txn.commit()


def test_E2_client_side_timeout_gives_time_out_and_send_ack_raise_invalid_txn_status(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"e2_{uid}"
    publish(client, topic, 1)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "e2", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = client.transaction(1)
    time.sleep(1.1)
    assert txn.state is State.TIME_OUT
    with pytest.raises(pulsar_txn.InvalidTxnStatusError):
        producer.send("x", txn=txn)
    with pytest.raises(pulsar_txn.InvalidTxnStatusError):
        consumer.acknowledge(msg, txn=txn)


def _no_timeout_due(admin: pulsar_txn.TransactionsAdmin, within_ms: int) -> bool:
    """No transaction of an earlier test is about to time out (it would move the counters too)."""
    horizon = time.time() * 1000 + within_ms
    for tc in admin.coordinator_stats():
        for meta in admin.list_transactions(tc).values():
            if meta["status"] in ("OPEN", "ABORTING") and meta["deadline_ms"] < horizon:
                return False
    return True


@pytest.mark.usefixtures("coordinator_stats")
def test_E3_coordinator_timeout_aborts_commit_fails_state_error_timeout_count_plus_one(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin
) -> None:
    wait_until(lambda: _no_timeout_due(admin, 20_000), 30, "earlier tests' transactions to time out")
    before = {tc: s["timeout_count"] for tc, s in admin.coordinator_stats().items()}
    txn = client.transaction(1)
    # A second handle whose client-side timeout has not passed: only the coordinator can refuse.
    handle = client.resume_transaction(txn.txn_id, timeout_ms=60_000)
    wait_until(lambda: admin.transaction_status(txn.txn_id) == "ABORTED", 15, "the TC timeout abort")
    with pytest.raises((pulsar_txn.InvalidTxnStatusError, pulsar_txn.TransactionNotFound)) as err:
        handle.commit()
    assert "time" in str(err.value).lower()  # the error says why
    assert handle.state is State.ERROR
    tc = txn.txn_id.most_bits
    assert admin.coordinator_stats()[tc]["timeout_count"] == before[tc] + 1
    assert admin.transaction_metadata(txn.txn_id)["timed_out"] is True


def test_E4_ack_in_never_ending_3s_txn_redelivered_only_after_timeout_abort(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin, uid: str
) -> None:
    topic = f"e4_{uid}"
    publish(client, topic, 1)
    consumer = client.subscribe(topic, "e4", initial_position="Earliest")
    m = consumer.receive(5000)
    started = time.monotonic()
    txn = client.transaction(3)
    consumer.acknowledge(m, txn=txn)
    with pytest.raises(pulsar_txn.Timeout):
        consumer.receive(2000)
    again = consumer.receive(15_000)
    assert again.message_id == m.message_id and time.monotonic() - started >= 3
    meta = admin.transaction_metadata(txn.txn_id)
    assert meta["status"] == "ABORTED" and meta["timed_out"] is True


def test_E5_commit_waits_for_in_flight_sends_and_acks_of_30_threads_and_empty_txn_commits(
    client: pulsar_txn.Client, uid: str
) -> None:
    src, dst = f"e5in_{uid}", f"e5out_{uid}"
    publish(client, src, 30)
    client.create_topic(dst, 3)
    consumer = client.subscribe(src, "e5", initial_position="Earliest")
    msgs = receive_n(consumer, 30)
    producer = client.create_producer(dst)
    txn = client.transaction(60)

    acks: list[Any] = []

    def work(n: int) -> None:
        for i in range(10):
            producer.send_async(f"{n}-{i}", txn=txn, partition_key=str(n))
        acks.append(consumer.acknowledge_async(msgs[n], txn=txn))  # not waited for: in flight

    threads = [threading.Thread(target=work, args=(n,)) for n in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    txn.commit()  # returns only once every send and ack of the transaction is durable
    assert len(acks) == 30 and all(a.done() and a.exception() is None for a in acks)
    assert len(read_all(client.create_reader(dst), 500, expect=300)) == 300
    assert pending_acks(consumer) == 0
    consumer.redeliver_unacknowledged_messages()
    assert drain(consumer, 800) == []
    empty = client.transaction(60)
    empty.commit()
    assert empty.state is State.COMMITTED


def test_E6_failed_send_makes_commit_abort_and_raise_transaction_has_operation_failed(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"e6_{uid}"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)
    txn = client.transaction(60)
    producer.send_async("fine", txn=txn)
    failed = producer.send_async(b"x" * 3_000_000, txn=txn)  # larger than a broker accepts
    with pytest.raises(pulsar_txn.TransactionHasOperationFailed):
        txn.commit()
    assert isinstance(failed.exception(10), pulsar_txn.PulsarTxnError)
    assert txn.state is State.ABORTED
    assert read_all(client.create_reader(topic), 800) == []


def _by_tc(ids: list[pulsar_txn.TxnID]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for t in ids:
        out[t.most_bits].append(t.least_bits)
    return out


def test_E7_consecutive_txn_ids_have_tc_id_in_most_bits_and_least_bits_plus_one(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin
) -> None:
    txns = [client.transaction(60) for _ in range(16)]
    ids = [t.txn_id for t in txns]
    for tc, seqs in _by_tc(ids).items():
        assert tc >= 0
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"TC {tc}: {seqs}"
    assert len(set(ids)) == 16
    for t in ids:  # each is in the log of the TC its most bits name (TransactionNotFound otherwise)
        assert admin.transaction_metadata(t)["status"] == "OPEN"
    for txn in txns:
        txn.abort()


def test_E7_txn_ids_keep_increasing_across_a_coordinator_restart(
    restartable: Deployment, clients: Clients
) -> None:
    client = clients()
    before = _by_tc([client.transaction(60).txn_id for _ in range(8)])
    restartable.restart_coordinator()
    after = _by_tc([client.transaction(60).txn_id for _ in range(8)])
    for tc, seqs in after.items():
        if tc in before:
            assert min(seqs) > max(before[tc]), f"TC {tc}: {before[tc]} then {seqs}"
        assert seqs == sorted(seqs)


def test_E8_client_states_open_committed_aborted_time_out_error(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin
) -> None:
    txn = client.transaction(60)
    assert txn.state is State.OPEN
    txn.commit()
    assert txn.state is State.COMMITTED
    txn = client.transaction(60)
    txn.abort()
    assert txn.state is State.ABORTED
    timed_out = client.transaction(1)
    time.sleep(1.1)
    assert timed_out.state is State.TIME_OUT
    handle = client.resume_transaction(timed_out.txn_id, timeout_ms=60_000)
    wait_until(lambda: admin.transaction_status(timed_out.txn_id) == "ABORTED", 15, "the TC timeout abort")
    with pytest.raises(pulsar_txn.PulsarTxnError):
        handle.commit()
    assert handle.state is State.ERROR


def test_E8_client_states_committing_and_aborting_while_the_coordinator_is_unreachable(
    restartable: Deployment, clients: Clients
) -> None:
    client = clients(operation_timeout_seconds=60)
    seen: list[State] = []
    for end in ("commit", "abort"):
        txn = client.transaction(120)
        restartable.stop_coordinator()
        ender = threading.Thread(target=getattr(txn, end))
        ender.start()
        try:
            wait_until(lambda t=txn: t.state in (State.COMMITTING, State.ABORTING), 10, "the ending state")
            seen.append(txn.state)
        finally:
            restartable.start_coordinator()
            ender.join(60)
        seen.append(txn.state)
    assert seen == [State.COMMITTING, State.COMMITTED, State.ABORTING, State.ABORTED]


def test_E9_topic_stats_after_one_committed_one_aborted_one_open_txn(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin, uid: str
) -> None:
    topic = f"e9_{uid}"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)
    for action in ("commit", "abort", None):
        txn = client.transaction(60)
        producer.send("x", txn=txn)
        if action is not None:
            getattr(txn, action)()
    stats = admin.transaction_buffer_stats(topic)[f"persistent://public/default/{topic}-partition-0"]
    assert (stats["committed_txns"], stats["aborted_txns"], stats["ongoing_txn_size"]) == (1, 1, 1)
    assert values(read_all(client.create_reader(topic), 500)) == ["x"]
