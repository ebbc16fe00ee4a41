"""Subscriptions and transactional acknowledgement against the real broker: A1-A8, E4, R3 and more."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

import pulsar_txn.consumer as consumer_module
from kafka_store import end_offsets
from pulsar_txn.consumer import Consumer, DeadLetterPolicy
from pulsar_txn.coordinator.endpoints import KafkaTxnEndpoints
from pulsar_txn.errors import (
    AlreadyClosed,
    ConfigError,
    ConsumerBusy,
    NotAllowedError,
    PulsarTxnError,
    Timeout,
    TransactionConflict,
    TransactionHasOperationFailed,
)
from pulsar_txn.message import EARLIEST, LATEST, Message, MessageId
from pulsar_txn.pendingack.log import PendingAckFold
from pulsar_txn.pendingack.stats import pending_ack_stats
from pulsar_txn.subscription.cursor import Cursor
from pulsar_txn.transaction import TransactionState
from pulsar_txn.txnid import TxnID
from tests.conftest import REPO, Cluster, fill_topic, read_all, receive_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _values(msgs: list[Message]) -> list[str]:
    return sorted(m.data.decode() for m in msgs)


_setup = functools.partial(fill_topic, keyed=True)  # keys spread messages over partitions


def _pending_total(consumer: Consumer) -> int:
    return sum(int(p["pending_ack_count"]) for p in consumer.stats()["partitions"].values())


def test_a1_pending_acks_are_not_redelivered_abort_redelivers_all_then_commit_holds_across_restart(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic, sub = f"a1_{uid}", f"sub_{uid}"
    _setup(c, topic, 1000)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(1000)]
    txn = c.client.transaction(120)
    for m in msgs:
        consumer.acknowledge(m, txn=txn)
    consumer.redeliver_unacknowledged_messages()  # nothing unacked outside the txn
    assert receive_all(consumer, 800) == []
    txn.abort()
    again = receive_all(consumer)
    assert len(again) == 1000 and _values(again) == _values(msgs)
    assert {m.redelivery_count for m in again} == {1}
    with c.client.transaction(120) as txn2:
        for m in again:
            consumer.acknowledge(m, txn=txn2)
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    assert receive_all(consumer, 800) == []
    consumer.close()
    restarted = c.client.subscribe(topic, sub)
    assert receive_all(restarted, 1000) == []


def test_a2_pending_count_goes_to_zero_on_commit_without_redelivery_and_on_abort_with_it(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"a2_{uid}"
    _setup(c, topic, 20)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(20)]
    committed, aborted = c.client.transaction(60), c.client.transaction(60)
    for m in msgs[:10]:
        consumer.acknowledge(m, txn=committed)
    committed._wait_ops()
    assert _pending_total(consumer) == 10
    committed.commit()
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    assert receive_all(consumer, 500) == []
    for m in msgs[10:]:
        consumer.acknowledge(m, txn=aborted)
    aborted._wait_ops()
    assert _pending_total(consumer) == 10
    aborted.abort()
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    assert _values(receive_all(consumer)) == _values(msgs[10:])


def test_a3_second_txn_acking_the_same_message_conflicts_until_the_first_aborts(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"a3_{uid}"
    _setup(c, topic, 1)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    m = consumer.receive(5000)
    a, b = c.client.transaction(60), c.client.transaction(60)
    consumer.acknowledge(m, txn=a)
    with pytest.raises(TransactionConflict):
        consumer.acknowledge(m, txn=b)
    a.abort()
    again = consumer.receive(5000)
    assert again.message_id == m.message_id
    c3 = c.client.transaction(60)
    consumer.acknowledge(again, txn=c3)
    c3.commit()
    assert receive_all(consumer, 500) == []


def test_a4_repeated_cumulative_ack_in_one_txn_conflicts_and_multiple_ids_are_not_allowed(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"a4_{uid}"
    _setup(c, topic, 5)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(5)]
    txn = c.client.transaction(60)
    consumer.acknowledge_cumulative(msgs[3], txn=txn)
    with pytest.raises(TransactionConflict):
        consumer.acknowledge_cumulative(msgs[3], txn=txn)
    with pytest.raises(TransactionConflict):
        consumer.acknowledge_cumulative(msgs[1], txn=txn)
    other = c.client.transaction(60)
    with pytest.raises(NotAllowedError):
        consumer.acknowledge_cumulative([msgs[0].message_id, msgs[1].message_id], txn=other)


def test_a5_cumulative_ack_blocks_other_txns_and_abort_redelivers_all_five(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"a5_{uid}"
    _setup(c, topic, 5)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(5)]
    a, b = c.client.transaction(60), c.client.transaction(60)
    consumer.acknowledge_cumulative(msgs[3], txn=a)
    with pytest.raises(TransactionConflict):
        consumer.acknowledge_cumulative(msgs[3], txn=b)
    with pytest.raises(TransactionConflict):
        consumer.acknowledge(msgs[2], txn=b)
    a.abort()
    consumer.redeliver_unacknowledged_messages()  # msgs[4] was never acked
    assert _values(receive_all(consumer)) == _values(msgs)


def test_a6_acking_committed_positions_conflicts_and_aborted_positions_are_ackable_again(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"a6_{uid}"
    _setup(c, topic, 4)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(4)]
    with c.client.transaction(60) as t1:
        consumer.acknowledge(msgs[0], txn=t1)
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    t2 = c.client.transaction(60)
    with pytest.raises(TransactionConflict):
        consumer.acknowledge(msgs[0], txn=t2)
    t3 = c.client.transaction(60)
    consumer.acknowledge(msgs[1], txn=t3)
    t3.abort()
    t4 = c.client.transaction(60)
    consumer.acknowledge(msgs[1], txn=t4)  # allowed again after the abort
    t4.commit()


def test_txn_acks_are_written_with_the_call_not_held_until_the_commit(
    cluster: ClusterFactory, uid: str
) -> None:
    """A list is a batch the application made: one pending-ack record, written with the call. A
    single ack is written with its call too (it used to wait in memory for the commit, so a
    consumer killed before the commit lost it for a commit made by another process)."""
    c = cluster()
    topic, sub = f"palist_{uid}", f"sub_{uid}"
    _setup(c, topic, 5)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(5)]
    txn = c.client.transaction(60)
    log_tp = (f"{topic}-{sub}__transaction_pending_ack", 0)

    def log_end() -> int:
        return end_offsets(c.client._admin.config, [log_tp])[log_tp]

    consumer.acknowledge(msgs[:3], txn=txn)
    assert log_end() == 1  # the list's record, stored before the call returned
    consumer.acknowledge(msgs[3], txn=txn)
    assert log_end() == 2
    txn.commit()
    assert log_end() == 3  # then the commit marker
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    consumer.redeliver_unacknowledged_messages()
    assert [m.data for m in receive_all(consumer, 800)] == [msgs[4].data]


def test_an_ack_in_a_partition_added_to_the_topic_is_ended_in_that_partition_of_the_log(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer of a one-partition topic registers the whole topic; once the topic grows, an ack in
    the new partition names that partition, so the coordinator (whose cached count of the log is one)
    ends it where it is instead of leaving it pending."""
    monkeypatch.setattr(consumer_module, "PARTITIONS_REFRESH_MS", 500)
    c = cluster()
    topic, sub = f"pagrow_{uid}", f"sub_{uid}"
    _setup(c, topic, 1)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    with c.client.transaction(60) as first:
        consumer.acknowledge(consumer.receive(5000), txn=first)  # the TC caches the log's count: 1
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    c.client._admin.add_partitions(topic, 2)
    # Another process's producer: this client's cached count of the topic stays 1.
    producer = Producer({"bootstrap.servers": c.client.kafka.bootstrap_servers})
    producer.produce(topic, b"in the new partition", partition=1)
    assert producer.flush(10) == 0
    msg = consumer.receive(20000)  # assigned within a metadata refresh, not librdkafka's 5 minutes
    assert msg.message_id.partition == 1
    txn = c.client.transaction(60)
    consumer.acknowledge(msg, txn=txn)
    txn._wait_ops()
    tc = c.coordinator.service.coordinator(txn.txn_id.most_bits)  # type: ignore[union-attr]
    full = f"persistent://public/default/{topic}-partition-1"
    assert tc.get(txn.txn_id).subscriptions == [(full, sub)]  # type: ignore[union-attr]
    log_topic = f"{topic}-{sub}__transaction_pending_ack"
    tps = [(log_topic, p) for p in range(2)]
    before = end_offsets(c.client._admin.config, tps)
    txn.commit()
    after = end_offsets(c.client._admin.config, tps)
    assert {tp[1]: after[tp] - before[tp] for tp in tps} == {0: 0, 1: 1}
    wait_until(lambda: _pending_total(consumer) == 0, 10)


def test_an_ack_on_one_partition_is_ended_in_that_partition_of_the_pending_ack_log_only(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic, sub = f"pa1_{uid}", f"sub_{uid}"
    _setup(c, topic, 30, partitions=3)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(30)]
    target = msgs[0].message_id.partition
    txn = c.client.transaction(60)
    consumer.acknowledge([m for m in msgs if m.message_id.partition == target], txn=txn)
    txn._wait_ops()  # the pending-ack record is written
    log_topic = f"{topic}-{sub}__transaction_pending_ack"
    tps = [(log_topic, p) for p in range(3)]
    before = end_offsets(c.client._admin.config, tps)
    tc = c.coordinator.service.coordinator(txn.txn_id.most_bits)  # type: ignore[union-attr]
    full = f"persistent://public/default/{topic}-partition-{target}"
    assert tc.get(txn.txn_id).subscriptions == [(full, sub)]  # type: ignore[union-attr]
    txn.commit()
    after = end_offsets(c.client._admin.config, tps)
    grown = {tp[1]: after[tp] - before[tp] for tp in tps}
    assert grown == {p: (1 if p == target else 0) for p in range(3)}  # the commit marker, there only
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    consumer.redeliver_unacknowledged_messages()
    assert {m.message_id.partition for m in receive_all(consumer, 800)} <= {0, 1, 2} - {target}


def test_a7_one_txn_acks_on_two_subscriptions_and_both_commit_together(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"a7_{uid}"
    _setup(c, topic, 1)
    s1 = c.client.subscribe(topic, f"s1_{uid}", initial_position="Earliest")
    s2 = c.client.subscribe(topic, f"s2_{uid}", initial_position="Earliest")
    m1, m2 = s1.receive(5000), s2.receive(5000)
    txn = c.client.transaction(60)
    s1.acknowledge(m1, txn=txn)
    s2.acknowledge(m2, txn=txn)
    txn._wait_ops()
    tc = c.coordinator.service.coordinator(txn.txn_id.most_bits)  # type: ignore[union-attr]
    full = f"persistent://public/default/{topic}"
    assert sorted(tc.get(txn.txn_id).subscriptions) == [(full, f"s1_{uid}"), (full, f"s2_{uid}")]  # type: ignore[union-attr]
    txn.commit()
    wait_until(lambda: _pending_total(s1) == 0 and _pending_total(s2) == 0, 10)
    assert receive_all(s1, 500) == [] and receive_all(s2, 500) == []


def test_a8_consume_process_produce_in_one_txn_survives_crashes_exactly_once(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    src, dst = f"a8in_{uid}", f"a8out_{uid}"
    _setup(c, src, 30)
    c.client.create_topic(dst, 1)
    producer = c.client.create_producer(dst)
    attempt = 0
    while True:
        consumer = c.client.subscribe(src, "pipeline", initial_position="Earliest")
        batch = receive_all(consumer, 800)[:10]
        if not batch:
            consumer.close()
            break
        txn = c.client.transaction(60)
        for m in batch:
            producer.send(m.data.decode().upper(), txn=txn)
            consumer.acknowledge(m, txn=txn)
        attempt += 1
        if attempt % 2 == 1:
            txn.abort()  # "crash" before commit: nothing of this attempt may survive
        else:
            txn.commit()
        consumer.close()
    out = sorted(m.data.decode() for m in _read_committed(c, dst))
    assert out == sorted(f"M{i:04d}" for i in range(30))


def _read_committed(c: Cluster, topic: str) -> list[Message]:
    from tests.conftest import read_all

    return read_all(c.client.create_reader(topic))


def test_e4_ack_in_a_txn_that_never_ends_is_redelivered_only_after_the_timeout_abort(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"e4_{uid}"
    _setup(c, topic, 1)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    m = consumer.receive(5000)
    started = time.monotonic()
    txn = c.client.transaction(3)
    consumer.acknowledge(m, txn=txn)
    with pytest.raises(Timeout):
        consumer.receive(2000)
    again = consumer.receive(10_000)
    assert again.message_id == m.message_id and time.monotonic() - started >= 3
    assert txn.state is TransactionState.TIME_OUT


def test_r3_pending_acks_survive_a_consumer_restart_with_conflicts_commits_and_aborts(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"r3_{uid}"
    _setup(c, topic, 6)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(6)]
    keep, drop = c.client.transaction(60), c.client.transaction(60)
    for m in msgs[:3]:
        consumer.acknowledge(m, txn=keep)
    for m in msgs[3:]:
        consumer.acknowledge(m, txn=drop)
    keep._wait_ops()
    drop._wait_ops()
    consumer.close()
    restarted = c.client.subscribe(topic, f"sub_{uid}")
    assert receive_all(restarted, 800) == []  # all six are pending, not redelivered
    with pytest.raises(TransactionConflict):
        restarted.acknowledge(msgs[0].message_id, txn=c.client.transaction(60))
    keep.commit()
    drop.abort()
    assert _values(receive_all(restarted)) == _values(msgs[3:])


def test_committed_txn_acks_beyond_the_cursors_metadata_room_are_redone_after_a_restart(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cursor's commit metadata has room for only so many acked ranges (Kafka caps it); the
    latest ones are left out. Plain acks there may come back after a restart, but a committed
    transaction's acks must not (invariant 3): replay of the pending-ack log starts early enough to
    redo them. The room is made small here (60 characters) so that a few dozen ranges overflow it."""
    real = Cursor.encode_ranges
    monkeypatch.setattr(Cursor, "encode_ranges", lambda self, max_chars=3500: real(self, 60))
    c = cluster()
    topic = f"cursorcap_{uid}"
    _setup(c, topic, 300)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(300)), key=lambda m: m.message_id.offset)
    rng = random.Random(5)
    acked = [m for m in msgs[1:] if rng.random() < 0.5]  # irregular ranges: they compress poorly
    for i in range(0, len(acked), 40):
        txn = c.client.transaction(60)
        consumer.acknowledge(acked[i : i + 40], txn=txn)
        txn.commit()
    ranges, dropped = consumer._parts[(topic, 0)].cursor.encode_ranges()
    assert dropped > 0 and ranges  # the case under test: some ranges do not fit
    consumer.close()
    restarted = c.client.subscribe(topic, f"sub_{uid}")
    again = {m.message_id.offset for m in receive_all(restarted)}
    assert again == {m.message_id.offset for m in msgs} - {m.message_id.offset for m in acked}
    restarted.close()


def test_committed_txn_acks_pushed_out_of_the_cursor_after_a_restart_are_not_redelivered_after_the_next(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, across two restarts. A consumer that recovered the partition used to know the
    committed transactions below the stored replay start only as the cursor's acked ranges; once
    later plain acks pushed those ranges out of the metadata, nothing redid the commit, and its
    messages came back after the next restart (invariant 3). Recovery now reads the log from where the
    committing consumer's knowledge started (``read_from`` in the metadata), so it knows them too."""
    real = Cursor.encode_ranges
    monkeypatch.setattr(Cursor, "encode_ranges", lambda self, max_chars=3500: real(self, 60))
    c = cluster()
    topic, sub = f"cursorcap2_{uid}", f"sub_{uid}"
    _setup(c, topic, 300)
    first = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((first.receive(5000) for _ in range(300)), key=lambda m: m.message_id.offset)
    high = msgs[-20:][::2]  # above everything acked later; message 0 holds the mark-delete back
    with c.client.transaction(60) as txn:
        first.acknowledge(high, txn=txn)
    assert first._parts[(topic, 0)].cursor.encode_ranges()[1] == 0  # all of them fit, for now
    first.close()

    second = c.client.subscribe(topic, sub)
    back = sorted(receive_all(second), key=lambda m: m.message_id.offset)
    assert not {m.message_id.offset for m in back} & {m.message_id.offset for m in high}
    rng = random.Random(7)
    plain = [m for m in back[1:] if m.message_id.offset < high[0].message_id.offset and rng.random() < 0.5]
    second.acknowledge(plain)
    ranges, dropped = second._parts[(topic, 0)].cursor.encode_ranges()
    assert dropped > 0 and ranges  # the txn's ranges (the highest) no longer fit
    second.close()

    third = c.client.subscribe(topic, sub)
    again = {m.message_id.offset for m in receive_all(third)}
    assert not again & {m.message_id.offset for m in high}
    third.close()


@pytest.mark.parametrize("recovered_pending", [False, True], ids=["released-at-recovery", "pending-at-seek"])
def test_a_commit_answered_before_its_marker_is_not_applied_again_after_a_recovery_and_a_seek(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch, recovered_pending: bool
) -> None:
    """END_TXN answered after the decision: the consumer applies the commit and commits its cursor
    while the COMMIT marker is still on its way to the pending-ack log. The next owner, recovering
    from below the replay start, found the transaction's ack record without a marker and held it
    pending; a seek back then carried it over, and the late marker acked message 50 on the sought
    cursor, which the seek had made deliverable again (found by review, session 31). Recovery now
    releases it; and should it still be pending at the seek (its record at or past the replay
    start: the committing consumer's tail had not read it yet), the seek looks it up in the TC's
    log first (``recovered_pending`` makes recovery keep it pending, to test that)."""
    if recovered_pending:
        monkeypatch.setattr(PendingAckFold, "settle_ended_before", lambda self, replay_start: None)
    gate = threading.Event()
    gate.set()
    real = KafkaTxnEndpoints.end_on_subscription

    async def gated(self: KafkaTxnEndpoints, *args: Any, **kwargs: Any) -> None:
        while not gate.is_set():
            await asyncio.sleep(0.01)
        await real(self, *args, **kwargs)

    monkeypatch.setattr(KafkaTxnEndpoints, "end_on_subscription", gated)
    c = cluster(end_txn_reply="after_decision")
    topic, sub = f"seekad_{uid}", f"sub_{uid}"
    _setup(c, topic, 100)
    a = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((a.receive(5000) for _ in range(100)), key=lambda m: m.message_id.offset)
    with c.client.transaction(60) as first:  # the pending-ack log exists and A's tail reads it
        a.acknowledge(msgs[99], txn=first)
    gate.clear()  # the next transaction's marker to the pending-ack log is held back
    with c.client.transaction(60) as txn:
        a.acknowledge(msgs[50], txn=txn)
    part = a._parts[(topic, 0)]
    pa = (part.pa_topic, 0)
    end = end_offsets(c.client.kafka, [pa])[pa]
    wait_until(lambda: part.fold.next_offset >= end, 20)  # A's replay start is past the ack record
    a.close()

    b = c.client.subscribe(topic, sub)
    wait_until(lambda: (topic, 0) in b._parts, 20)
    assert b._parts[(topic, 0)].pending.pending_txns() == ({txn.txn_id: 1} if recovered_pending else {})
    b.seek(msgs[10].message_id)
    gate.set()  # the marker lands now
    time.sleep(1.0)  # B's tail reads it
    again = {m.message_id.offset for m in receive_all(b)}
    b.close()
    assert 50 in again
    assert again == set(range(10, 100))  # a seek forgets every ack beyond its position


def test_a_failover_consumer_cannot_join_an_exclusive_subscription(cluster: ClusterFactory, uid: str) -> None:
    """As in Pulsar ("Subscription is of different type"): ConsumerBusy, and the Exclusive consumer
    keeps every partition (a Failover consumer used to join and take half of them)."""
    c = cluster()
    topic, sub = f"mixed_{uid}", f"sub_{uid}"
    _setup(c, topic, 10, partitions=2)
    exclusive = c.client.subscribe(topic, sub, initial_position="Earliest")
    assert len(exclusive.assigned_partitions()) == 2
    with pytest.raises(ConsumerBusy, match="different type"):
        c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    wait_until(lambda: len(exclusive.assigned_partitions()) == 2, what="the Exclusive consumer holds both")
    assert len(receive_all(exclusive)) == 10
    exclusive.close()


def test_acking_a_message_of_a_topic_not_subscribed_says_so(cluster: ClusterFactory, uid: str) -> None:
    """NotAllowedError naming the real reason (it used to say the partition had moved to another
    consumer, which would redeliver it: there is no such consumer)."""
    c = cluster()
    topic, other = f"acked_{uid}", f"other_{uid}"
    _setup(c, topic, 1)
    _setup(c, other, 1)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    foreign = c.client.create_reader(other).read_next(5000)
    with pytest.raises(NotAllowedError, match="is not subscribed by"):
        consumer.acknowledge(foreign)
    consumer.close()


def test_acking_past_the_readable_end_is_refused_and_loses_no_later_message(
    cluster: ClusterFactory, uid: str
) -> None:
    """An id naming no message yet (past the partition's end), individually, cumulatively or in a
    transaction: NotAllowedError. These acks used to be stored, and the messages later written
    there were never delivered."""
    c = cluster()
    topic, sub = f"pastend_{uid}", f"sub_{uid}"
    _setup(c, topic, 5)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    consumer.acknowledge(receive_all(consumer))
    with pytest.raises(NotAllowedError, match="no readable message there"):
        consumer.acknowledge(MessageId(topic, 0, 7))
    with pytest.raises(NotAllowedError, match="no readable message there"):
        consumer.acknowledge_cumulative(MessageId(topic, 0, 1000))
    txn = c.client.transaction(60)
    with pytest.raises(NotAllowedError, match="no readable message there"):
        consumer.acknowledge(MessageId(topic, 0, 8), txn=txn)
    txn.abort()
    producer = c.client.create_producer(topic)
    for i in range(5, 10):
        producer.send(f"m{i:04d}")
    assert _values(receive_all(consumer)) == [f"m{i:04d}" for i in range(5, 10)]
    consumer.close()


def test_exclusive_rejects_a_second_consumer_and_failover_moves_partitions(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"fo_{uid}"
    _setup(c, topic, 40, partitions=4)
    first = c.client.subscribe(topic, f"ex_{uid}", initial_position="Earliest")
    with pytest.raises(ConsumerBusy):
        c.client.subscribe(topic, f"ex_{uid}")
    first.close()
    f1 = c.client.subscribe(topic, f"fo_{uid}", consumer_type="Failover", initial_position="Earliest")
    f2 = c.client.subscribe(topic, f"fo_{uid}", consumer_type="Failover", initial_position="Earliest")
    wait_until(
        lambda: (
            f1.assigned_partitions()
            and f2.assigned_partitions()
            and len(f1.assigned_partitions()) + len(f2.assigned_partitions()) == 4
        ),
        30,
        what="split",
    )
    lost = f2.assigned_partitions()[0]
    got = receive_all(f2, 800)
    mine = next(m for m in got if (m.message_id.topic, m.message_id.partition) == lost)
    f1_msgs = receive_all(f1, 800)
    for m in f1_msgs:
        f1.acknowledge(m)
    f2.close()
    wait_until(lambda: len(f1.assigned_partitions()) == 4, 30, what="f1 takes over")
    with pytest.raises(AlreadyClosed):  # a NotAllowedError; closed, it no longer holds the partition
        f2.acknowledge(mine)
    # f2 acked nothing: f1 now gets exactly f2's messages; together 40, none lost, none twice.
    taken_over = receive_all(f1)
    assert _values(taken_over) == _values(got)
    assert len({m.message_id for m in f1_msgs + taken_over}) == 40


def test_plain_acks_persist_across_restart_and_unacked_ones_come_back(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"persist_{uid}"
    _setup(c, topic, 10)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(10)]
    for m in msgs[::2]:
        consumer.acknowledge(m)
    consumer.close()
    again = c.client.subscribe(topic, f"sub_{uid}")
    assert _values(receive_all(again)) == _values(msgs[1::2])
    again.acknowledge_cumulative(msgs[-1])
    again.close()
    assert receive_all(c.client.subscribe(topic, f"sub_{uid}"), 800) == []


def test_nack_ack_timeout_and_dead_letter_after_max_redeliveries(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"dlq_{uid}"
    _setup(c, topic, 1)
    consumer = c.client.subscribe(
        topic,
        f"sub_{uid}",
        initial_position="Earliest",
        negative_ack_redelivery_delay_ms=100,
        ack_timeout_millis=1000,  # Pulsar's minimum
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2),
    )
    m = consumer.receive(5000)
    consumer.negative_acknowledge(m)
    assert consumer.receive(5000).redelivery_count == 1
    # not acked: the ack timeout redelivers it
    assert consumer.receive(5000).redelivery_count == 2
    with pytest.raises(Timeout):
        consumer.receive(2500)  # third redelivery goes to the DLQ instead
    dlq = c.client.subscribe(f"{topic}-sub_{uid}-DLQ", "dlq-reader", initial_position="Earliest")
    dead = dlq.receive(10_000)
    assert dead.data == m.data and dead.properties["ORIGIN_MESSAGE_ID"] == str(m.message_id)


def test_seek_and_unsubscribe(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"seek_{uid}"
    _setup(c, topic, 5)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(5)]
    for m in msgs:
        consumer.acknowledge(m)
    consumer.seek(msgs[2].message_id)
    assert _values(receive_all(consumer)) == _values(msgs[2:])
    consumer.unsubscribe()
    fresh = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    assert len(receive_all(fresh)) == 5


def test_a_subscription_made_again_after_unsubscribe_takes_transactional_acks(
    cluster: ClusterFactory, uid: str
) -> None:
    """unsubscribe deletes the pending-ack log; the subscription made again under the name creates
    it again. The client's Kafka producer had written to the old log, and its sequence numbers were
    out of order on the new one (a fatal error): the first transactional ack failed and its
    transaction aborted with TransactionHasOperationFailed."""
    c = cluster()
    topic, sub = f"resub_{uid}", f"sub_{uid}"
    _setup(c, topic, 4)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted(receive_all(consumer), key=lambda m: m.message_id.offset)
    with c.client.transaction(60) as t:
        consumer.acknowledge(msgs[0], txn=t)
    consumer.unsubscribe()
    again = c.client.subscribe(topic, sub, initial_position="Earliest")
    got = receive_all(again)
    assert _values(got) == _values(msgs)
    with c.client.transaction(60) as t2:
        again.acknowledge(got, txn=t2)
    assert t2.state is TransactionState.COMMITTED
    again.close()
    with c.client.subscribe(topic, sub) as third:
        assert receive_all(third, 800) == []


def test_seek_to_a_publish_time_goes_to_the_first_message_published_at_or_after_it(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"seekt_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(6):
        producer.send(f"m{i}", partition_key=f"k{i}")
        time.sleep(0.02)  # distinct publish times (ms)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = sorted(receive_all(consumer), key=lambda m: m.publish_timestamp)
    assert len(msgs) == 6 and len({m.message_id.partition for m in msgs}) == 2
    for m in msgs:
        consumer.acknowledge(m)
    since = msgs[3].publish_timestamp
    consumer.seek(since)  # Pulsar's seek(timestamp), on every partition
    assert _values(receive_all(consumer)) == _values(msgs[3:])
    consumer.seek(msgs[-1].publish_timestamp + 60_000)  # after everything: nothing until new ones
    assert receive_all(consumer) == []
    reader = c.client.create_reader(topic, EARLIEST)
    assert len(read_all(reader)) == 6
    reader.seek(since)
    assert _values(read_all(reader)) == _values(msgs[3:])
    with pytest.raises(ConfigError, match="publish time"):
        consumer.seek("yesterday")  # type: ignore[arg-type]


def test_shared_subscriptions_say_not_supported_yet(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    c.client.create_topic(f"sh_{uid}", 1)
    with pytest.raises(NotAllowedError, match="not supported yet"):
        c.client.subscribe(f"sh_{uid}", f"sub_{uid}", consumer_type="Shared")


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_sigkill_of_consumer_between_txn_ack_and_end(cluster: ClusterFactory, uid: str, outcome: str) -> None:
    c = cluster()
    topic = f"kill_{outcome}_{uid}"
    _setup(c, topic, 5)
    cfg = {
        "url": c.coordinator.url,
        "bootstrap": c.client.kafka.bootstrap_servers,
        "num_tcs": c.config.num_tcs,
        "snapshot_topic": c.config.snapshot_topic,
        "topic": topic,
        "subscription": f"sub_{uid}",
        "n": 5,
        "instance_id": f"worker-{uid}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration._ack_then_wait", json.dumps(cfg)],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        txn_id = json.loads(line)["txn"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
    handle = c.client.resume_transaction(txn_id)
    if outcome == "commit":
        handle.commit()
    else:
        handle.abort()
    # What a new consumer recovers: the cursor committed by the dead consumer plus the pending-ack log.
    stats = pending_ack_stats(c.client, topic, f"sub_{uid}")[
        f"persistent://public/default/{topic}-partition-0"
    ]
    assert stats["pending_ack_count"] == 0
    if outcome == "commit":
        assert stats["mark_delete"] == 5  # offsets 0-4 acked: nothing is redelivered
    else:
        assert stats["mark_delete"] == 0 and stats["acked_ranges"] == []  # all five come back, once
    # And a restarted consumer with the dead one's instance id takes over at once (static membership).
    with c.client.subscribe(topic, f"sub_{uid}", instance_id=f"worker-{uid}", subscribe_timeout=30) as again:
        seen = []
        with contextlib.suppress(Timeout):
            while True:
                seen.append(again.receive(1500).message_id.offset)
        assert seen == ([] if outcome == "commit" else [0, 1, 2, 3, 4])


def test_restarted_consumer_with_same_instance_id_is_not_busy(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"inst_{uid}"
    _setup(c, topic, 3)
    first = c.client.subscribe(topic, f"sub_{uid}", instance_id="a", initial_position="Earliest")
    assert first.receive(5000).message_id.offset == 0
    with pytest.raises(ConsumerBusy):
        c.client.subscribe(topic, f"sub_{uid}", instance_id="b", subscribe_timeout=10)
    first.close()  # a static member stays in the group until its session expires ...
    # ... but its successor with the same instance id is welcome at once and resumes unacked work.
    with c.client.subscribe(topic, f"sub_{uid}", instance_id="a", initial_position="Earliest") as second:
        assert second.receive(5000).message_id.offset == 0


def _try_subscribe(c: Cluster, topic: str, sub: str) -> Consumer | None:
    try:
        return c.client.subscribe(topic, sub, subscribe_timeout=60)
    except ConsumerBusy:
        return None


def test_a_failed_dead_letter_send_does_not_swallow_the_next_ready_message(
    cluster: ClusterFactory, uid: str
) -> None:
    """A is due for the DLQ and B is queued behind it; A's dead-letter send fails: receive raises, and
    B (not picked in that call) is still delivered afterwards."""
    c = cluster()
    topic, sub = f"dlf_{uid}", f"sub_{uid}"
    _setup(c, topic, 1)
    consumer = c.client.subscribe(
        topic,
        sub,
        initial_position="Earliest",
        negative_ack_redelivery_delay_ms=50,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    a = consumer.receive(5000)
    consumer.negative_acknowledge(a)
    a = consumer.receive(5000)  # redelivered once: the next redelivery goes to the DLQ
    assert a.redelivery_count == 1
    c.client.create_producer(topic).send("m0001")
    # B must be queued before A's redelivery is due
    wait_until(lambda: (consumer._fill(0.05), len(consumer._incoming) > 0)[1], 10, what="B queued")
    consumer.negative_acknowledge(a)
    time.sleep(0.2)
    real = consumer._dead_letter
    calls = []

    def failing(msg: Message, part: object) -> None:
        calls.append(msg.message_id)
        if len(calls) == 1:
            raise RuntimeError("DLQ send failed (injected)")
        real(msg, part)  # type: ignore[arg-type]

    consumer._dead_letter = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="injected"):
        consumer.receive(1000)
    got = receive_all(consumer, 3000)
    consumer.close()
    assert _values(got) == ["m0001"]  # B; A went to the DLQ on the retry
    assert calls == [a.message_id, a.message_id]


def test_acks_of_a_timed_out_txn_are_never_written_after_its_abort_marker(
    cluster: ClusterFactory, uid: str
) -> None:
    """The TC aborts a txn on timeout while its ack is still batched: the batch is dropped, not written
    after the marker on close (where it would keep the message pending forever after a restart)."""
    c = cluster()
    topic, sub = f"tob_{uid}", f"sub_{uid}"
    consumer, m = _one_message_received(c, topic, sub)
    txn = c.client.transaction(2)
    consumer.acknowledge(m, txn=txn)
    again = consumer.receive(15_000)  # released by the timeout abort's marker
    assert again.message_id == m.message_id
    consumer.close()  # not acked: it must come back after a restart
    pending, redelivered = _after_a_restart(c, topic, sub)
    assert pending == [0]
    assert redelivered == [m.message_id]


def _one_message_received(c: Cluster, topic: str, sub: str) -> tuple[Consumer, Message]:
    """A one-message topic and a consumer on ``sub`` that has received that message."""
    _setup(c, topic, 1)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    return consumer, consumer.receive(5000)


def _after_a_restart(c: Cluster, topic: str, sub: str) -> tuple[list[int], list[MessageId]]:
    """Once the subscription's consumers are closed: the pending-ack count per partition, and what a
    restarted consumer receives."""
    pending = [p["pending_ack_count"] for p in pending_ack_stats(c.client, topic, sub).values()]
    restarted = c.client.subscribe(topic, sub)
    got = [x.message_id for x in receive_all(restarted, 3000)]
    restarted.close()
    return pending, got


def _split_between(c1: Consumer, c2: Consumer, n: int) -> None:
    wait_until(
        lambda: (
            c1.assigned_partitions()
            and c2.assigned_partitions()
            and len(c1.assigned_partitions()) + len(c2.assigned_partitions()) == n
        ),
        30,
        what="partitions split between the two consumers",
    )


def test_batched_txn_acks_move_with_their_partition_in_a_rebalance(cluster: ClusterFactory, uid: str) -> None:
    """C1 acks one message per partition in T (still batched) and the rest plainly; C2 joins and takes
    a partition. T's acks are written on revocation, so C2 holds them pending, and T's commit (read by
    C2's tail) acks them: neither message is delivered again, before or after the commit."""
    c = cluster()
    topic, sub = f"rbt_{uid}", f"sub_{uid}"
    _setup(c, topic, 20, partitions=2)
    c1 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    msgs = receive_all(c1)
    assert len(msgs) == 20
    txn = c.client.transaction(60)
    in_txn: dict[tuple[str, int], Message] = {}
    for m in msgs:
        tp = (m.message_id.topic, m.message_id.partition)
        if tp not in in_txn:
            in_txn[tp] = m
            c1.acknowledge(m, txn=txn)
        else:
            c1.acknowledge(m)
    for p in list(c1._parts.values()):
        c1._flush_part(p, force=True)
    c2 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    _split_between(c1, c2, 2)
    time.sleep(1.0)
    assert _pending_total(c2) == 1  # the moved partition's txn ack came along
    before = receive_all(c1, 1000) + receive_all(c2, 1000)
    txn.commit()
    wait_until(lambda: _pending_total(c1) + _pending_total(c2) == 0, 10, what="commit applied")
    after = receive_all(c1, 1500) + receive_all(c2, 1500)
    c1.close()
    c2.close()
    assert before == [] and after == []
    stats = pending_ack_stats(c.client, topic, sub)
    assert [p["pending_ack_count"] for p in stats.values()] == [0, 0]


def test_a_retained_cursor_never_overwrites_newer_acks_of_another_owner(
    cluster: ClusterFactory, uid: str
) -> None:
    """C1's revocation commit fails (on noida it does during a rebalance), so C1 retains the cursor. C2
    owns the partition meanwhile and acks all but its first message. When the partition comes back,
    C1 sees the newer commit and recovers instead of reusing its stale cursor."""
    c = cluster()
    topic, sub = f"ret_{uid}", f"sub_{uid}"
    _setup(c, topic, 20, partitions=2)
    c1 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    assert len(receive_all(c1)) == 20  # nothing acked
    c2 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    _split_between(c1, c2, 2)
    moved = c2.assigned_partitions()[0]
    got2 = sorted(receive_all(c2), key=lambda m: m.message_id.offset)
    assert got2
    for m in got2[1:]:
        c2.acknowledge(m)
    c2.close()  # commits its cursor: the first offset, ranges for the rest
    wait_until(lambda: len(c1.assigned_partitions()) == 2, 30, what="C1 takes the partition back")
    back = [m for m in receive_all(c1, 2000) if (m.message_id.topic, m.message_id.partition) == moved]
    c1.close()
    assert sorted(m.message_id.offset for m in back) == [got2[0].message_id.offset]


def test_an_ack_racing_with_commit_is_part_of_the_commit_not_left_out(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An acknowledgement on another thread that has passed the OPEN check when ``commit`` begins: the
    commit waits for its pending-ack write, so the ack is durable and never redelivered (before, the
    commit could go out without it, and the ack record was written after the marker or never)."""
    c = cluster()
    topic, sub = f"ackrace_{uid}", f"sub_{uid}"
    consumer, m = _one_message_received(c, topic, sub)
    txn = c.client.transaction(60)
    in_ack, go = threading.Event(), threading.Event()
    real = consumer._ensure_pa_topic

    def paused(part: Any) -> None:
        in_ack.set()
        go.wait(10)  # the commit begins on the main thread meanwhile
        real(part)

    monkeypatch.setattr(consumer, "_ensure_pa_topic", paused)
    acker = threading.Thread(target=consumer.acknowledge, args=(m,), kwargs={"txn": txn})
    acker.start()
    assert in_ack.wait(10)
    done = txn.commit_async()
    time.sleep(0.3)
    assert not done.done()  # waits for the ack in flight
    go.set()
    acker.join(10)
    done.result(30)
    assert txn.state is TransactionState.COMMITTED
    consumer.close()
    pending, redelivered = _after_a_restart(c, topic, sub)
    assert pending == [0]
    assert m.message_id not in redelivered


def test_a_replaced_consumer_cannot_commit_its_txn_acks_and_its_successor_owns_the_messages(
    cluster: ClusterFactory, uid: str
) -> None:
    """A consumer replaced while it held acks in an open transaction (a long pause; here a newer
    consumer with its instance id) must not commit them: its ownership check is refused by the
    group, so the transaction aborts. Its successor recovered those acks as pending (they were
    stored when ``acknowledge`` returned), so it delivers the messages only after that abort, and
    its own acks of them are what counts."""
    c = cluster()
    topic, sub = f"repl_{uid}", f"sub_{uid}"
    _setup(c, topic, 5)
    old = c.client.subscribe(topic, sub, instance_id="a", initial_position="Earliest")
    msgs = receive_all(old)
    assert len(msgs) == 5
    txn = c.client.transaction(60)
    for m in msgs:
        old.acknowledge(m, txn=txn)
    new = c.client.subscribe(topic, sub, instance_id="a", initial_position="Earliest")
    assert receive_all(new, 1000) == []  # pending in the old consumer's transaction
    with pytest.raises(TransactionHasOperationFailed) as refused:
        txn.commit()
    assert isinstance(refused.value.__cause__, TransactionConflict), repr(refused.value.__cause__)
    assert txn.state is TransactionState.ABORTED
    again = receive_all(new)
    assert _values(again) == _values(msgs)
    with c.client.transaction(60) as txn2:
        for m in again:
            new.acknowledge(m, txn=txn2)
    wait_until(lambda: _pending_total(new) == 0, 10, what="the acks committed")
    assert receive_all(new, 1000) == []
    with contextlib.suppress(PulsarTxnError):
        old.close()
    new.close()
    with c.client.subscribe(topic, sub, instance_id="a", initial_position="Earliest") as restarted:
        assert receive_all(restarted, 1000) == []


def test_a_prepared_commit_checks_ownership_once_unless_an_ack_came_after_the_prepare(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``prepare_async`` writes the acks and runs the ownership check ahead of the commit (the
    pipeline overlaps it with the previous batch's commit); the commit then does not check again,
    unless an ack was added after the prepare."""
    c = cluster()
    topic, sub = f"prep_{uid}", f"sub_{uid}"
    _setup(c, topic, 3)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = receive_all(consumer)
    assert len(msgs) == 3
    checks: list[object] = []
    real = consumer._ownership_check

    def counted(txn_id: Any) -> Any:
        checks.append(txn_id)
        return real(txn_id)

    monkeypatch.setattr(consumer, "_ownership_check", counted)
    txn = c.client.transaction(60)
    consumer.acknowledge(msgs[0], txn=txn)
    txn.prepare_async().result(10)
    consumer.acknowledge(msgs[1], txn=txn)
    txn.commit()
    assert len(checks) == 2  # the ack after the prepare was checked too
    txn2 = c.client.transaction(60)
    consumer.acknowledge(msgs[2], txn=txn2)
    txn2.prepare_async().result(10)
    txn2.commit()
    assert len(checks) == 3
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    assert receive_all(consumer, 800) == []
    consumer.close()
    with c.client.subscribe(topic, sub) as restarted:
        assert receive_all(restarted, 1000) == []


def _ack_written_after_its_abort_marker(c: Cluster, topic: str, sub: str) -> tuple[TxnID, list[Message]]:
    """A transaction's ack record that lands after the TC's abort marker (the write raced the
    abort), after the replay start the subscription stored: its next consumer sees only the record."""
    from kafka_store import Appender
    from pulsar_txn.naming import TopicName, pending_ack_topic
    from pulsar_txn.pendingack.log import encode_pending_ack
    from pulsar_txn.pendingack.state import AckKind

    _setup(c, topic, 3)
    first = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = receive_all(first)
    txn = c.client.transaction(60)
    first.acknowledge(msgs[0], txn=txn)
    txn.abort()  # its ABORT marker is in the pending-ack log
    for m in msgs[1:]:
        first.acknowledge(m)
    pa_topic = pending_ack_topic(TopicName.parse(topic), sub)
    # The tail reads past the marker, so the stored replay start is after it.
    wait_until(
        lambda: (
            end_offsets(c.client.kafka, [(pa_topic, 0)])[(pa_topic, 0)]
            <= first._parts[(topic, 0)].fold.next_offset
        ),
        10,
        what="the pending-ack tail past the marker",
    )
    first.close()
    value, headers = encode_pending_ack(txn.txn_id, AckKind.INDIVIDUAL, [msgs[0].message_id.offset])
    appender = Appender(c.client.kafka)
    appender.append(pa_topic, 0, value, headers=headers).result(10)
    appender.close()
    return txn.txn_id, msgs


def test_acks_written_after_their_txns_abort_marker_are_released_once_the_tc_log_says_it_aborted(
    cluster: ClusterFactory, uid: str
) -> None:
    """A commit's ack record that lands after the TC's timeout abort (the write raced the abort) is
    ignored by a fold that saw the marker. A consumer whose replay starts after the marker sees only
    the record; before, it held the message pending until a later marker of the same TC covered the
    transaction with its low watermark, and with no more traffic, for good. It now asks the TC's
    log about transactions that have stayed pending without being its own, and releases them."""
    c = cluster()
    topic, sub = f"late_{uid}", f"sub_{uid}"
    _txn_id, msgs = _ack_written_after_its_abort_marker(c, topic, sub)
    second = c.client.subscribe(topic, sub, pending_ack_check_after_ms=500)
    assert _pending_total(second) == 1  # the late record, seen without its marker
    again = second.receive(15_000)
    assert again.message_id == msgs[0].message_id
    assert _pending_total(second) == 0
    second.close()


def test_the_pipeline_fencing_off_a_previous_run_releases_its_late_acks_at_once(
    cluster: ClusterFactory, uid: str
) -> None:
    """The exactly-once pipeline waits, at start, until the previous run's transactions no longer
    hold its input. An ack record written after its transaction's abort marker was released only by
    the consumer's own look-up after a minute, longer than that wait: every session failed and the
    next consumer started its minute again (found in review). The fencing now looks them up itself."""
    from pulsar_txn.pipeline.fencing import abort_leftovers

    c = cluster()
    topic, sub = f"latefence_{uid}", f"sub_{uid}"
    txn_id, msgs = _ack_written_after_its_abort_marker(c, topic, sub)
    second = c.client.subscribe(topic, sub)  # the default pending_ack_check_after_ms: a minute
    assert _pending_total(second) == 1
    started = time.monotonic()
    abort_leftovers(c.client, second, {txn_id}, timeout=10)  # aborted already: a repeated abort is fine
    assert time.monotonic() - started < 5 and _pending_total(second) == 0
    assert second.receive(5000).message_id == msgs[0].message_id
    second.close()


def test_read_uncommitted_subscription_delivers_open_and_aborted_messages_never_markers(
    cluster: ClusterFactory, uid: str
) -> None:
    """PIP-298: a READ_UNCOMMITTED subscription reads past max_read_position, aborted messages
    included; a READ_COMMITTED one on the same partition stops at the open transaction."""
    c = cluster()
    topic = f"iso_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send(b"p1")
    still_open = c.client.transaction(60)
    producer.send(b"open-1", txn=still_open)
    with pytest.raises(RuntimeError), c.client.transaction(60) as aborted:
        producer.send(b"aborted-1", txn=aborted)
        raise RuntimeError("abort it")
    producer.send(b"p2")
    with c.client.transaction(60) as committed:
        producer.send(b"committed-1", txn=committed)

    committed_reader = c.client.subscribe(topic, f"rc_{uid}", initial_position="Earliest")
    assert [m.data for m in receive_all(committed_reader)] == [b"p1"]
    uncommitted = c.client.subscribe(
        topic, f"ru_{uid}", initial_position="Earliest", subscription_isolation_level="READ_UNCOMMITTED"
    )
    got = receive_all(uncommitted)
    assert [m.data for m in got] == [b"p1", b"open-1", b"aborted-1", b"p2", b"committed-1"]
    assert [m.txn_id for m in got] == [None, still_open.txn_id, aborted.txn_id, None, committed.txn_id]
    # Acks persist as for any subscription: nothing comes back after a restart.
    uncommitted.acknowledge_cumulative(got[-1])
    uncommitted.close()
    again = c.client.subscribe(
        topic, f"ru_{uid}", initial_position="Earliest", subscription_isolation_level="READ_UNCOMMITTED"
    )
    producer.send(b"p3")
    assert [m.data for m in receive_all(again)] == [b"p3"]
    # Latest is the partition's end for this level, not max_read_position (still pinned by the open
    # transaction, which would hand a new subscriber everything written since).
    latest = c.client.subscribe(topic, f"rul_{uid}", subscription_isolation_level="READ_UNCOMMITTED")
    assert receive_all(latest) == []
    producer.send(b"p4")
    assert [m.data for m in receive_all(latest)] == [b"p4"]
    latest.seek(EARLIEST)
    assert [m.data for m in receive_all(latest)][:2] == [b"p1", b"open-1"]
    latest.seek(LATEST)
    producer.send(b"p5")
    assert [m.data for m in receive_all(latest)] == [b"p5"]
    still_open.commit()
    assert [m.data for m in receive_all(committed_reader)] == [
        b"open-1",
        b"p2",
        b"committed-1",
        b"p3",
        b"p4",
        b"p5",
    ]
    with pytest.raises(ConfigError, match="subscription_isolation_level"):
        c.client.subscribe(topic, f"bad_{uid}", subscription_isolation_level="DIRTY")


def test_a_txn_ack_refused_because_its_partition_moved_makes_the_commit_abort(
    cluster: ClusterFactory, uid: str
) -> None:
    """Pulsar registers every transactional ack with its transaction, so one that fails fails the
    commit. Here too, even when the application catches the ack's error: C1's ack of a message whose
    partition moved to C2 is refused, and C1's commit of its output aborts instead. The same for an
    ack of a topic the consumer does not subscribe to (a typed error, not a KeyError)."""
    c = cluster()
    topic, sub, out = f"mvack_{uid}", f"sub_{uid}", f"mvout_{uid}"
    _setup(c, topic, 20, partitions=2)
    c.client.create_topic(out, 1)
    c1 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    msgs = receive_all(c1)
    assert len(msgs) == 20
    c2 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    _split_between(c1, c2, 2)
    moved = next(m for m in msgs if (m.message_id.topic, m.message_id.partition) in c2.assigned_partitions())
    producer = c.client.create_producer(out)
    txn = c.client.transaction(60)
    producer.send(b"output of " + moved.data, txn=txn)
    with pytest.raises(NotAllowedError):
        c1.acknowledge(moved, txn=txn)
    with pytest.raises(TransactionHasOperationFailed):
        txn.commit()
    assert read_all(c.client.create_reader(out)) == []
    foreign = MessageId(f"other_{uid}", 0, 0)
    txn2 = c.client.transaction(60)
    producer.send(b"more output", txn=txn2)
    with pytest.raises(NotAllowedError, match="not subscribed"):
        c1.acknowledge(foreign, txn=txn2)
    with pytest.raises(NotAllowedError, match="not subscribed"):
        c1.acknowledge_cumulative(foreign, txn=txn2)
    with pytest.raises(TransactionHasOperationFailed):
        txn2.commit()
    assert read_all(c.client.create_reader(out)) == []
    c1.close()
    c2.close()


def test_a_partition_whose_opening_failed_is_retried_not_left_unread(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka assigned the partition to this consumer; a storage error while recovering its state
    must not leave it assigned and read by nobody: the consumer retries, then delivers."""
    import pulsar_txn.subscription._membership as membership_module
    from kafka_store import StoreError

    c = cluster()
    topic, sub = f"reopen_{uid}", f"sub_{uid}"
    _setup(c, topic, 5)
    real = membership_module.recover_partition
    calls = [0]

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= 2:
            raise StoreError("simulated fetch time-out", retriable=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(membership_module, "recover_partition", flaky)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    got = receive_all(consumer, 5000)
    consumer.close()
    assert sorted(m.data for m in got) == [f"m{i:04d}".encode() for i in range(5)] and calls[0] == 3


def test_a_seek_survives_a_restart_while_a_transaction_is_open_across_it(
    cluster: ClusterFactory, uid: str
) -> None:
    """O acks m9 and stays open; T acks m0-m4 and commits; then the consumer seeks back to the start.
    O pins the pending-ack log's replay start before T's records, so recovery used to apply T's
    commit to the sought cursor again: m0-m4 were lost after a restart. The seek carries the pending
    acks over to the log's end, so the restarted subscription delivers what the live one did."""
    c = cluster()
    topic, sub = f"seekpin_{uid}", f"sub_{uid}"
    _setup(c, topic, 10)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(10)), key=lambda m: m.message_id.offset)
    o = c.client.transaction(120)
    consumer.acknowledge(msgs[9], txn=o)
    o.prepare_async().result(30)  # O's ack record is written; O stays open
    t = c.client.transaction(120)
    for m in msgs[:5]:
        consumer.acknowledge(m, txn=t)
    t.commit()
    consumer.seek(EARLIEST)
    live = sorted(m.data for m in receive_all(consumer))
    assert live == [f"m{i:04d}".encode() for i in range(9)]  # m9 stays pending in O
    consumer.close()
    again = c.client.subscribe(topic, sub, initial_position="Earliest")
    assert sorted(m.data for m in receive_all(again)) == live
    again.close()
    o.abort()


def test_a_seek_right_after_a_commit_survives_a_restart(cluster: ClusterFactory, uid: str) -> None:
    """T acks m0-m4 and commits; the consumer seeks back to the start at once and closes. Nothing is
    pending, and the pending-ack tail had not read T's records yet: the replay start persisted was
    before them, so recovery applied T's commit to the sought cursor again and m0-m4 were lost.
    The seek now reads the log to its end first."""
    c = cluster()
    topic, sub = f"seekfresh_{uid}", f"sub_{uid}"
    _setup(c, topic, 10)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(10)), key=lambda m: m.message_id.offset)
    t = c.client.transaction(60)
    consumer.acknowledge(msgs[:5], txn=t)
    t.commit()
    consumer.seek(EARLIEST)
    consumer.close()
    again = c.client.subscribe(topic, sub, initial_position="Earliest")
    assert sorted(m.data for m in receive_all(again)) == [f"m{i:04d}".encode() for i in range(10)]
    again.close()


def test_aborting_a_cumulative_ack_redelivers_every_unacked_message_of_the_partition(
    cluster: ClusterFactory, uid: str
) -> None:
    """Pulsar's pending-ack handle redelivers the consumer's unacknowledged messages when a
    transaction holding a cumulative ack aborts, each counted as a redelivery. Only the acked
    position used to come back: m0-m2 stayed with the application, never counted."""
    c = cluster()
    topic, sub = f"cumabort_{uid}", f"sub_{uid}"
    _setup(c, topic, 5)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted(receive_all(consumer), key=lambda m: m.message_id.offset)
    t = c.client.transaction(60)
    consumer.acknowledge_cumulative(msgs[3], txn=t)
    t.abort()
    again = receive_all(consumer, 1500)
    assert _values(again) == _values(msgs)
    assert all(m.redelivery_count == 1 for m in again)
    consumer.close()


def test_a_committed_txn_leaves_nothing_of_its_messages_in_the_consumers_bookkeeping(
    cluster: ClusterFactory, uid: str
) -> None:
    """A transactional cumulative ack acks every lower message, and redelivered messages acked in a
    transaction are done: neither stays counted as unacked (or in the redelivery counts) for ever."""
    c = cluster()
    topic, sub = f"leak_{uid}", f"sub_{uid}"
    _setup(c, topic, 40)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(40)), key=lambda m: m.message_id.offset)
    t0 = c.client.transaction(60)
    consumer.acknowledge(msgs[20:], txn=t0)
    t0.abort()  # redelivered, counted once
    again = [consumer.receive(5000) for _ in range(20)]
    assert all(m.redelivery_count == 1 for m in again)
    t = c.client.transaction(60)
    consumer.acknowledge_cumulative(msgs[19], txn=t)
    consumer.acknowledge(again, txn=t)
    t.commit()
    assert consumer.stats()["unacked"] == 0
    assert not consumer._redelivery_counts and not consumer._in_txn
    consumer.close()


def test_a_txn_ack_is_stored_when_acknowledge_returns_and_async_acks_share_records(
    cluster: ClusterFactory, uid: str
) -> None:
    """``acknowledge(msg, txn)`` returns once its pending ack is stored (Pulsar's broker answers a
    transactional ack after storing it), so the admin view, which reads only the log, already
    shows it. ``acknowledge_async`` returns at once with the write's future; acks made while a
    write of the same transaction and partition is in flight go out together, in one record."""
    c = cluster()
    topic = f"stored_{uid}"
    _setup(c, topic, 201)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(201)]
    log_key = f"persistent://public/default/{topic}-partition-0"
    pa_topic = f"{topic}-sub_{uid}__transaction_pending_ack"

    txn = c.client.transaction(60)
    consumer.acknowledge(msgs[0], txn=txn)
    assert pending_ack_stats(c.client, topic, f"sub_{uid}")[log_key]["pending_ack_count"] == 1
    records_before = end_offsets(c.client.kafka, [(pa_topic, 0)])[(pa_topic, 0)]

    futures = [consumer.acknowledge_async(m, txn=txn) for m in msgs[1:]]
    for fut in futures:
        assert fut.result(30) is None
    records = end_offsets(c.client.kafka, [(pa_topic, 0)])[(pa_topic, 0)] - records_before
    assert 1 <= records <= 100  # 200 acks, written while earlier writes were in flight
    assert pending_ack_stats(c.client, topic, f"sub_{uid}")[log_key]["pending_ack_count"] == 201
    txn.commit()
    consumer.close()
    stats = pending_ack_stats(c.client, topic, f"sub_{uid}")[log_key]
    assert stats["pending_ack_count"] == 0 and stats["mark_delete"] == 201


def test_a_forged_ack_record_is_ignored_when_marker_authentication_is_on(
    cluster: ClusterFactory, uid: str
) -> None:
    """A plain Kafka producer writes an ack record naming a real transaction (here before that
    transaction acks anything). It was folded as that transaction's acks: once it committed, a
    restarted consumer found three messages acked that nobody processed. With the marker secret
    set, ack records are signed and an unsigned one is ignored."""
    from kafka_store import Appender
    from pulsar_txn.pendingack.log import encode_pending_ack
    from pulsar_txn.pendingack.state import AckKind

    c = cluster(marker_secret="correct horse battery staple")
    topic, sub = f"forgeack_{uid}", f"sub_{uid}"
    _setup(c, topic, 5)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = receive_all(consumer)
    assert len(msgs) == 5
    txn = c.client.transaction(60)
    consumer.acknowledge(msgs[0], txn=txn)  # the log exists and the tail reads it
    pa_topic = f"{topic}-{sub}__transaction_pending_ack"
    value, headers = encode_pending_ack(txn.txn_id, AckKind.INDIVIDUAL, [1, 2, 3])  # no secret
    app = Appender(c.client.kafka)
    try:
        app.append(pa_topic, 0, value, headers=headers).result(10)
    finally:
        app.close()
    time.sleep(0.5)  # the consumer's tail reads it
    txn.commit()
    consumer.close()
    stats = pending_ack_stats(c.client, topic, sub)[f"persistent://public/default/{topic}-partition-0"]
    assert stats["mark_delete"] == 1 and stats["pending_ack_count"] == 0
    with c.client.subscribe(topic, sub) as again:
        assert [m.message_id.offset for m in receive_all(again)] == [1, 2, 3, 4]


def test_cancelling_an_ack_future_leaves_the_other_acks_and_the_commit_alone(
    cluster: ClusterFactory, uid: str
) -> None:
    """acknowledge_async handed out the write's own future, shared by every ack of its record and
    tracked by the transaction: cancelling it (as an asyncio wait_for timing out does) broke the
    delivery callback, the acks gathered meanwhile were never written and the commit aborted."""
    c = cluster(tb_service_enabled=False)
    topic, sub = f"cxl_{uid}", f"sub_{uid}"
    _setup(c, topic, 5)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = receive_all(consumer)
    txn = c.client.transaction(60)
    consumer.acknowledge(msgs[0], txn=txn)
    consumer.acknowledge_async(msgs[1], txn=txn).cancel()  # the caller gives up; the ack stands
    others = [consumer.acknowledge_async(m, txn=txn) for m in msgs[2:]]
    for fut in others:
        assert fut.result(10) is None
    txn.commit()
    consumer.close()
    stats = pending_ack_stats(c.client, topic, sub)[f"persistent://public/default/{topic}-partition-0"]
    assert stats["mark_delete"] == 5


def test_a_txn_ack_in_a_send_callback_does_not_wait_on_the_thread_that_completes_it(
    cluster: ClusterFactory, uid: str
) -> None:
    """Consume-transform-produce: ack the input in the output's send callback. That callback runs
    on the client's delivery thread, and a waiting acknowledge waited there for a delivery report
    only that thread serves: every ack took the whole operation timeout, then raised Timeout."""
    c = cluster(tb_service_enabled=False)
    topic, out, sub = f"cbin_{uid}", f"cbout_{uid}", f"sub_{uid}"
    _setup(c, topic, 3)
    c.client.create_topic(out, 1)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = receive_all(consumer)
    producer = c.client.create_producer(out)
    txn = c.client.transaction(60)
    results: list[object] = []
    took: list[float] = []
    done = threading.Event()

    def acking(msg: Message) -> Callable[[Any, Any], None]:
        def callback(_result: Any, _mid: Any) -> None:
            started = time.monotonic()
            try:
                consumer.acknowledge(msg, txn=txn)
                results.append("ok")
            except PulsarTxnError as exc:
                results.append(exc)
            took.append(time.monotonic() - started)
            if len(results) == len(msgs):
                done.set()

        return callback

    for msg in msgs:
        producer.send_async(msg.data, txn=txn, callback=acking(msg))
    assert done.wait(60)
    assert results == ["ok"] * 3 and max(took) < 3, (results, took)
    txn.commit()
    wait_until(lambda: _pending_total(consumer) == 0, 10)
    consumer.redeliver_unacknowledged_messages()
    assert receive_all(consumer, 800) == []


def test_a_revocation_waits_for_ack_writes_in_flight_so_the_transaction_still_commits(
    cluster: ClusterFactory, uid: str
) -> None:
    """A revocation wrote the acks still batched and waited for them (the next owner then recovers
    them as pending: the transaction may commit), but not for writes already in flight, which every
    acknowledge_async is: a rebalance during such a write made the commit abort."""
    c = cluster()
    topic, sub = f"rvin_{uid}", f"sub_{uid}"
    _setup(c, topic, 20, partitions=2)
    first = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    msgs = receive_all(first)
    assert len(msgs) == 20
    by_partition: dict[int, list[Message]] = {}
    for m in msgs:
        by_partition.setdefault(m.message_id.partition, []).append(m)
    txn = c.client.transaction(60)
    for part_msgs in by_partition.values():
        first.acknowledge(part_msgs[0], txn=txn)  # the log exists and the subscription is registered
    appender = c.client._appender()
    real = appender.append_cb

    def slow(topic_: str, partition: int, value: bytes, **kw: Any) -> None:  # a slow broker
        if topic_.endswith("__transaction_pending_ack"):
            threading.Timer(3.0, real, args=(topic_, partition, value), kwargs=kw).start()
        else:
            real(topic_, partition, value, **kw)

    appender.append_cb = slow  # type: ignore[method-assign]
    try:
        flying = [first.acknowledge_async(part_msgs[1], txn=txn) for part_msgs in by_partition.values()]
        second = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
        wait_until(lambda: first.assigned_partitions() and second.assigned_partitions(), 30, what="split")
        for fut in flying:
            fut.result(15)
    finally:
        appender.append_cb = real  # type: ignore[method-assign]
    txn.commit()
    first.close()
    second.close()
