"""Recovery scenarios R1-R5 (SCENARIOS.md), on the public API only. Coordinator restarts go through
the harness (``restartable``); those tests skip where the deployment cannot be restarted."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

import pulsar_txn
from compat_tests._helpers import drain, publish, read_all, receive_n, values, wait_until
from compat_tests.conftest import Deployment

pytestmark = pytest.mark.integration

Clients = Callable[..., pulsar_txn.Client]
Admin = pulsar_txn.TransactionsAdmin


def test_R1_coordinator_restart_open_txns_keep_timeouts_committing_txns_complete(
    restartable: Deployment, clients: Clients, admin: Admin, uid: str
) -> None:
    client = clients(operation_timeout_seconds=2)
    ready, late = f"r1ready_{uid}", f"r1late_{uid}"
    client.create_topic(ready, 1)
    client.create_topic(late, 1)
    open_txn = client.transaction(8)
    deadline = admin.transaction_metadata(open_txn.txn_id)["deadline_ms"]
    txn = client.transaction(120)
    # The client's 2 s operation timeout is for the commit below; sends may take longer on a busy machine.
    client.create_producer(ready).send_async("r", txn=txn).result(60)
    client.create_producer(late).send_async("l", txn=txn).result(60)
    restartable.delete_topic(late)  # its marker cannot be written: the commit stays COMMITTING
    with pytest.raises(pulsar_txn.Timeout):
        txn.commit()
    assert admin.transaction_status(txn.txn_id) == "COMMITTING"
    restartable.stop_coordinator()
    client.create_topic(late, 1)
    restartable.start_coordinator()
    # No client drives it: the restarted coordinator finishes the commit by itself.
    wait_until(lambda: admin.transaction_status(txn.txn_id) == "COMMITTED", 30, "COMMITTED after restart")
    assert values(read_all(client.create_reader(ready), 500, expect=1)) == ["r"]
    wait_until(lambda: admin.transaction_status(open_txn.txn_id) == "ABORTED", 20, "the open txn's timeout")
    meta = admin.transaction_metadata(open_txn.txn_id)
    assert meta["deadline_ms"] == deadline and meta["timed_out"] is True
    assert meta["ended_at_ms"] >= deadline


def test_R2_buffer_recovery_after_restart_same_state_from_latest_snapshot(
    restartable: Deployment, client: pulsar_txn.Client, admin: Admin, uid: str
) -> None:
    topic = f"r2_{uid}"
    partition = f"persistent://public/default/{topic}-partition-0"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)
    for i in range(20):
        txn = client.transaction(60)
        producer.send(f"aborted-{i}", txn=txn)
        txn.abort()
    producer.send("plain")
    open_txn = client.transaction(600)
    producer.send("open", txn=open_txn)

    def stats() -> dict[str, object]:
        return admin.transaction_buffer_stats(topic)[partition]

    wait_until(lambda: (s := stats())["last_snapshot_offset"] == s["scanned_to"], 30, "a snapshot at the end")
    before = stats()
    restartable.restart_coordinator()
    after = stats()
    assert after["last_snapshot_offset"] == after["scanned_to"] and after["scanned_to"] > 0  # not from 0
    keys = ("max_read_position", "aborted_txn_size", "ongoing_txn_size", "scanned_to")
    assert {k: after[k] for k in keys} == {k: before[k] for k in keys}
    assert (after["aborted_txn_size"], after["ongoing_txn_size"]) == (20, 1)
    assert after["max_read_position"] == 41  # 20 x (message + marker), "plain", then the open txn
    assert values(read_all(client.create_reader(topic), 800)) == ["plain"]
    open_txn.commit()
    assert values(read_all(client.create_reader(topic), 500, expect=2)) == ["plain", "open"]


def test_R3_pending_acks_survive_consumer_restart_conflict_commit_and_abort(
    client: pulsar_txn.Client, clients: Clients, uid: str
) -> None:
    topic = f"r3_{uid}"
    publish(client, topic, 6)
    consumer = client.subscribe(topic, "r3", initial_position="Earliest")
    msgs = receive_n(consumer, 6)
    keep, drop = client.transaction(60), client.transaction(60)
    for m in msgs[:3]:
        consumer.acknowledge(m, txn=keep)
    for m in msgs[3:]:
        consumer.acknowledge(m, txn=drop)
    consumer.close()  # the consumer process goes away with both transactions open
    restarted = clients().subscribe(topic, "r3")
    assert drain(restarted, 1000) == []  # all six are pending: not redelivered
    other = client.transaction(60)
    with pytest.raises(pulsar_txn.TransactionConflict):
        restarted.acknowledge(msgs[0].message_id, txn=other)
    keep.commit()
    drop.abort()
    assert sorted(values(drain(restarted, 500, expect=3))) == sorted(values(msgs[3:]))


def test_R4_1000_txns_with_2s_timeouts_all_abort(client: pulsar_txn.Client, admin: Admin) -> None:
    with ThreadPoolExecutor(8) as pool:
        txns = list(pool.map(lambda _i: client.transaction(2), range(1000)))
    ids = {t.txn_id for t in txns}
    assert len(ids) == 1000

    def all_aborted() -> bool:
        metas = {}
        for tc in {t.most_bits for t in ids}:
            metas.update(admin.list_transactions(tc))
        mine = [metas.get(t) for t in ids]
        return all(m is not None and m["status"] == "ABORTED" and m["timed_out"] for m in mine)

    wait_until(all_aborted, 40, "1000 timeout aborts")


def test_R4_mixed_timeouts_abort_in_deadline_order(clients: Clients, admin: Admin) -> None:
    client = clients()
    ttls = [2.5, 0.5, 2.0, 1.0, 1.5]
    txns: list[pulsar_txn.Transaction] = []
    tc: int | None = None
    for ttl in ttls:  # all on one TC, whose timer decides the order (new txns go round-robin over TCs)
        for _attempt in range(64):
            txn = client.transaction(ttl)
            tc = txn.txn_id.most_bits if tc is None else tc
            if txn.txn_id.most_bits == tc:
                txns.append(txn)
                break  # the others on other TCs are left to time out too
    assert len(txns) == len(ttls)
    wait_until(
        lambda: all(admin.transaction_status(t.txn_id) == "ABORTED" for t in txns), 20, "all timed out"
    )
    metas = [admin.transaction_metadata(t.txn_id) for t in txns]
    assert all(m["timed_out"] for m in metas)
    assert all(m["ended_at_ms"] >= m["deadline_ms"] for m in metas)
    # Aborts are decided in deadline order; their last log write may complete a few ms out of order
    # when two overlap on a slow machine, so "in order" is checked with a tolerance far below the
    # 500 ms between deadlines.
    ordered = sorted(metas, key=lambda m: m["deadline_ms"])
    for earlier, later in itertools.pairwise(ordered):
        assert earlier["ended_at_ms"] <= later["ended_at_ms"] + 250, (earlier, later)


def test_R4_timeouts_survive_a_coordinator_restart(
    restartable: Deployment, clients: Clients, admin: Admin
) -> None:
    client = clients()
    short, long = client.transaction(10), client.transaction(120)
    deadline = admin.transaction_metadata(short.txn_id)["deadline_ms"]
    restartable.restart_coordinator()
    assert time.time() * 1000 < deadline, "the restart took longer than the transaction's timeout"
    assert admin.transaction_status(short.txn_id) == "OPEN"
    wait_until(lambda: admin.transaction_status(short.txn_id) == "ABORTED", 20, "the timeout after restart")
    meta = admin.transaction_metadata(short.txn_id)
    assert meta["deadline_ms"] == deadline and meta["timed_out"] is True and meta["ended_at_ms"] >= deadline
    assert admin.transaction_status(long.txn_id) == "OPEN"
    long.commit()


def test_R5_coordinator_not_ready_gives_retriable_error_and_client_retries(
    restartable: Deployment, clients: Clients, uid: str
) -> None:
    assert pulsar_txn.ServiceNotReady.retriable and pulsar_txn.ServiceNotReady("x").retriable
    client = clients(operation_timeout_seconds=60)
    topic = f"r5_{uid}"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)
    client.transaction(60).commit()  # connected before the outage
    restartable.stop_coordinator()
    restarter = threading.Timer(1.0, restartable.start_coordinator)
    restarter.start()
    started = time.monotonic()
    try:
        txn = client.transaction(60)  # refused / not ready while down and recovering: retried
        producer.send("after-restart", txn=txn)
        txn.commit()
    finally:
        restarter.join()
    assert time.monotonic() - started >= 0.9
    assert values(read_all(client.create_reader(topic), 500, expect=1)) == ["after-restart"]
