"""A subscription's pending-ack log is trimmed (Kafka DeleteRecords) below what any replay can still
need, once a cursor holding the acks of the records there is committed: the log stays bounded without
time-based retention, which could delete acks a restart must replay (pending-ack logs are created
with ``retention.ms=-1``)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

import pulsar_txn.pendingack.stats as stats_module
import pulsar_txn.subscription._commits as commits_module
from kafka_store import PartitionReader, StoreError, group_offsets
from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.consumer import Consumer, ConsumerType
from pulsar_txn.message import Message
from pulsar_txn.naming import TopicName, pending_ack_topic
from pulsar_txn.pendingack.stats import split_metadata
from pulsar_txn.subscription.cursor import Cursor
from tests.conftest import Cluster, fill_topic, receive_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _pa_watermarks(c: Cluster, topic: str, sub: str, partition: int) -> tuple[int, int]:
    reader = PartitionReader(c.client.kafka)
    try:
        return reader.watermarks(pending_ack_topic(TopicName.parse(topic), sub), partition)
    finally:
        reader.close()


def _log_start(c: Cluster, topic: str, sub: str) -> int:
    return _pa_watermarks(c, topic, sub, 0)[0]


def _retention(c: Cluster, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": c.client.kafka.bootstrap_servers})
    (answer,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return {k: v.value for k, v in answer.result(10).items() if k.startswith("retention.")}


def _committed_replay_start(c: Cluster, topic: str, sub: str, partition: int = 0) -> int:
    tp = (TopicName.parse(topic).kafka_topic, partition)
    return split_metadata(group_offsets(c.client.kafka, sub, [tp])[tp][1])[0]


def _pending_total(consumer: Consumer[bytes]) -> int:
    return sum(int(p["pending_ack_count"]) for p in consumer.stats()["partitions"].values())


def _commit_each(c: Cluster, consumer: Consumer[bytes], msgs: list[Message[bytes]], per_txn: int) -> None:
    for i in range(0, len(msgs), per_txn):
        with c.client.transaction(60) as txn:
            consumer.acknowledge(msgs[i : i + per_txn], txn=txn)


def test_an_open_transaction_pins_the_trim_and_a_restart_recovers_its_pending_acks(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commits_module, "TRIM_INTERVAL_S", 0.0)
    c = cluster()
    topic, sub = f"trim_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 60)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(60)), key=lambda m: m.message_id.offset)
    _commit_each(c, consumer, msgs[:20], 2)  # ten committed transactions: records to trim
    held = c.client.transaction(120)
    consumer.acknowledge(msgs[20:25], txn=held)
    held._wait_ops()
    held_first = consumer._parts[(topic, 0)].fold.first_record[held.txn_id]
    assert held_first > 0
    _commit_each(c, consumer, msgs[25:45], 2)  # and ten more after the open one's record

    assert _retention(c, pending_ack_topic(TopicName.parse(topic), sub)) == {
        "retention.bytes": "-1",
        "retention.ms": "-1",
    }
    wait_until(lambda: _log_start(c, topic, sub) > 0, 15)
    assert _log_start(c, topic, sub) <= held_first  # the open transaction's acks are kept
    assert _committed_replay_start(c, topic, sub) >= _log_start(c, topic, sub)

    consumer.close()
    restarted = c.client.subscribe(topic, sub)
    again = {m.message_id.offset for m in receive_all(restarted, 1000)}
    # Only the never-acked ones: the 40 committed acks hold, the open transaction's 5 are pending.
    assert again == {m.message_id.offset for m in msgs[45:]}
    held.commit()
    wait_until(lambda: _pending_total(restarted) == 0, 10)
    # With the open transaction ended, the trim moves past its records.
    wait_until(lambda: _log_start(c, topic, sub) > held_first, 15)
    restarted.close()
    last = c.client.subscribe(topic, sub)
    assert {m.message_id.offset for m in receive_all(last, 1000)} == {m.message_id.offset for m in msgs[45:]}
    last.close()


def test_committed_acks_the_cursor_cannot_persist_keep_their_records_through_trims(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A never-acked first message holds the mark-delete back, and the cursor's metadata has room for
    only a few ranges (made tiny here): the committed transactions' acks beyond it are persisted by
    the pending-ack log alone, so trimming must not delete their records (as Pulsar keeps the log
    above the mark-delete)."""
    monkeypatch.setattr(commits_module, "TRIM_INTERVAL_S", 0.0)
    real = Cursor.encode_ranges
    monkeypatch.setattr(Cursor, "encode_ranges", lambda self, max_chars=3500: real(self, 40))
    c = cluster()
    topic, sub = f"trimcap_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 200)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(200)), key=lambda m: m.message_id.offset)
    # Half of them, irregularly (the ranges compress poorly), the highest first: each transaction's
    # ranges come before the earlier ones', pushing those out of the cursor's room after their
    # records could have been trimmed.
    rng = random.Random(5)
    acked = [m for m in msgs[1:] if rng.random() < 0.5][::-1]
    for i in range(0, len(acked), 10):
        with c.client.transaction(60) as txn:
            consumer.acknowledge(acked[i : i + 10], txn=txn)
        time.sleep(0.3)  # the cursor commit (every 100 ms) lands, and a trim may follow it
    assert consumer._parts[(topic, 0)].cursor.encode_ranges()[1] > 0  # the case under test
    consumer.close()
    restarted = c.client.subscribe(topic, sub)
    again = {m.message_id.offset for m in receive_all(restarted, 1000)}
    assert again == {m.message_id.offset for m in msgs} - {m.message_id.offset for m in acked}
    restarted.close()


def test_an_owner_in_between_keeps_the_records_of_committed_txns_a_partition_back_still_needs(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keeps a revoked partition's state when its final commit fails (noida-db refuses it with
    ILLEGAL_GENERATION) and reuses it if the partition comes back untouched. B, the owner meanwhile,
    used to recover from the replay start, so its fold never knew A's older committed transactions,
    and its trim deleted their records; A's reused fold then sent its replay start back to them,
    below the log's start, once their ranges no longer fitted the cursor's metadata (session 30
    refused the reuse then). Since session 31 B reads the log from the committed ``read_from``
    position: it knows those transactions, keeps their records, and after A gets the partition back
    and their ranges overflow, a restart still does not redeliver their messages."""
    monkeypatch.setattr(commits_module, "TRIM_INTERVAL_S", 0.0)
    real = Cursor.encode_ranges
    monkeypatch.setattr(Cursor, "encode_ranges", lambda self, max_chars=3500: real(self, 40))
    c = cluster()
    topic, sub = f"rettrim_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 300, partitions=2)
    tp = (TopicName.parse(topic).kafka_topic, 1)

    def committed() -> tuple[int, str | None]:
        return group_offsets(c.client.kafka, sub, [tp])[tp]

    a = c.client.subscribe(topic, sub, initial_position="Earliest", consumer_type=ConsumerType.Failover)
    p1 = sorted(
        (m for m in receive_all(a, 2000) if m.message_id.partition == 1), key=lambda m: m.message_id.offset
    )
    assert len(p1) > 100
    high = p1[-1]
    with c.client.transaction(60) as t_old:
        a.acknowledge(high, txn=t_old)
    part_a = a._parts[tp]
    t_old_first = part_a.fold._committed[t_old.txn_id][0]
    wait_until(
        lambda: (
            _committed_replay_start(c, topic, sub, 1) == _pa_watermarks(c, topic, sub, 1)[1]
            and part_a.committed == committed()
        ),
        10,
    )
    flush = a._flush_part

    def revocation_commit_fails(part: Any, *, force: bool = False, in_callback: bool = False) -> bool:
        return False if force and in_callback else flush(part, force=force, in_callback=in_callback)

    monkeypatch.setattr(a, "_flush_part", revocation_commit_fails)
    b = c.client.subscribe(topic, sub, consumer_type=ConsumerType.Failover)
    wait_until(lambda: tp in b._parts, 20)
    assert tp in a._retained
    assert t_old.txn_id in b._parts[tp].fold._committed  # B knows A's committed transaction
    time.sleep(1.0)  # B's cursor commits and trims (no interval here) land
    assert _pa_watermarks(c, topic, sub, 1)[0] <= t_old_first  # and keeps its records
    monkeypatch.setattr(a, "_flush_part", flush)
    b.close()
    wait_until(lambda: tp in a._parts, 20)
    # Plain acks of lower messages, irregularly: the ranges no longer fit in the (small) metadata.
    rng = random.Random(3)
    back = sorted(
        (m for m in receive_all(a, 2000) if m.message_id.partition == 1), key=lambda m: m.message_id.offset
    )
    a.acknowledge(
        [m for m in back[1:] if m.message_id.offset < high.message_id.offset and rng.random() < 0.5]
    )
    assert a._parts[tp].cursor.encode_ranges()[1] > 0  # the case under test
    time.sleep(0.5)  # cursor commits land
    assert _committed_replay_start(c, topic, sub, 1) >= _pa_watermarks(c, topic, sub, 1)[0]
    a.close()
    restarted = c.client.subscribe(topic, sub, consumer_type=ConsumerType.Failover)
    again = [m for m in receive_all(restarted, 2000) if m.message_id.partition == 1]
    assert high.message_id.offset not in {m.message_id.offset for m in again}
    restarted.close()


def test_pending_ack_stats_racing_a_trim_read_the_cursor_again(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stats read every partition's cursor, then each log in turn. A trim in between (the owner
    committed a newer cursor) deleted records the cursor read calls for: the view showed messages of a
    transaction committed meanwhile as neither pending nor acked, a state that never existed."""
    monkeypatch.setattr(commits_module, "TRIM_INTERVAL_S", 0.0)
    c = cluster()
    topic, sub = f"strace_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 40, partitions=2)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(40)]
    tp = (TopicName.parse(topic).kafka_topic, 1)
    p1 = sorted((m for m in msgs if m.message_id.partition == 1), key=lambda m: m.message_id.offset)
    assert len(p1) >= 10
    with c.client.transaction(60) as t0:  # records below t1's, so that a trim shows
        consumer.acknowledge(p1[5:6], txn=t0)
    t1 = c.client.transaction(60)
    consumer.acknowledge(p1[0:5], txn=t1)
    t1._wait_ops()
    first = consumer._parts[tp].fold.first_record[t1.txn_id]
    wait_until(lambda: _committed_replay_start(c, topic, sub, 1) == first, 10)
    real_read_range = stats_module.read_range
    raced: list[int] = []

    def read_range_raced(kafka: Any, pa_topic: str, partition: int, start: int, *a: Any, **kw: Any) -> Any:
        if partition == 1 and not raced:  # meanwhile the owner commits t1, and trims past its records
            raced.append(start)
            t1.commit()
            with c.client.transaction(60) as t2:
                consumer.acknowledge(p1[6:8], txn=t2)
            wait_until(lambda: _pa_watermarks(c, topic, sub, 1)[0] > start, 15)
        return real_read_range(kafka, pa_topic, partition, start, *a, **kw)

    monkeypatch.setattr(stats_module, "read_range", read_range_raced)
    name = f"persistent://public/default/{topic}-partition-1"
    fold = stats_module.recover_subscription(c.client, topic, sub)[name]
    assert raced
    states = [fold.state.position_stats(m.message_id.offset)["state"] for m in p1[0:5]]
    consumer.close()
    assert "NotInPendingAck" not in states, states  # pending (t1 open), then acked: never neither


def test_a_trim_held_back_by_the_interval_is_made_once_due_without_further_commits(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trims come at most once per interval; one held back was made only at the next cursor commit,
    so a subscription that went idle kept its last interval's records for good."""
    monkeypatch.setattr(commits_module, "TRIM_INTERVAL_S", 2.0)
    c = cluster()
    topic, sub = f"trimidle_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 40)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(40)), key=lambda m: m.message_id.offset)
    _commit_each(c, consumer, msgs[:2], 2)
    wait_until(lambda: _log_start(c, topic, sub) > 0, 10)  # the first trim: at once
    _commit_each(c, consumer, msgs[2:], 2)  # within the interval: held back; then idle
    end = _pa_watermarks(c, topic, sub, 0)[1]
    wait_until(lambda: _log_start(c, topic, sub) == end, 10)
    consumer.close()
    restarted = c.client.subscribe(topic, sub)
    assert receive_all(restarted, 800) == []
    restarted.close()


def test_pending_ack_stats_of_a_log_cut_by_retention_still_answer(cluster: ClusterFactory, uid: str) -> None:
    """A log whose start is past the committed replay start for good (retention on a log created
    before trimming existed) was taken for a trim racing the read on every attempt: the stats failed
    with "try again" until some consumer committed a newer cursor."""
    c = cluster()
    topic, sub = f"pstale_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 10)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(10)), key=lambda m: m.message_id.offset)
    held = c.client.transaction(300)
    consumer.acknowledge(msgs[0:2], txn=held)
    held._wait_ops()
    with c.client.transaction(60) as txn:
        consumer.acknowledge(msgs[2:4], txn=txn)
    first = consumer._parts[(topic, 0)].fold.first_record[held.txn_id]
    wait_until(lambda: _committed_replay_start(c, topic, sub) == first, 10)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": c.client.kafka.bootstrap_servers})
    pa = pending_ack_topic(TopicName.parse(topic), sub)
    (deleted,) = admin.delete_records([TopicPartition(pa, 0, first + 1)]).values()  # as retention would
    deleted.result(10)
    stats = TransactionsAdmin(c.client).pending_ack_stats(topic, sub)
    (only,) = stats.values()
    assert only["mark_delete"] == 0
    held.abort()


def test_a_failed_trim_is_tried_again_while_the_subscription_is_idle(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trim that failed (a broker blip) was tried again only at the next cursor commit: an idle
    subscription kept its records."""
    monkeypatch.setattr(commits_module, "TRIM_INTERVAL_S", 0.5)
    c = cluster()
    topic, sub = f"pft_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 20)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(5000) for _ in range(20)), key=lambda m: m.message_id.offset)
    real = c.client._admin.delete_records_before
    failing = False

    def blip(pa_topic: str, partition: int, offset: int) -> Future[None]:
        if not failing:
            return real(pa_topic, partition, offset)
        refused: Future[None] = Future()
        refused.set_exception(StoreError("simulated: broker unavailable", retriable=True))
        return refused

    monkeypatch.setattr(c.client._admin, "delete_records_before", blip)
    failing = False
    _commit_each(c, consumer, msgs[:18], 2)
    end = _pa_watermarks(c, topic, sub, 0)[1]
    wait_until(lambda: _log_start(c, topic, sub) == end, 10)  # trimmed so far; the interval passes
    time.sleep(1.0)
    failing = True
    _commit_each(c, consumer, msgs[18:], 2)  # its trim is made at once (not held back), and fails
    time.sleep(1.0)  # no commit comes any more
    failing = False
    end = _pa_watermarks(c, topic, sub, 0)[1]
    wait_until(lambda: _log_start(c, topic, sub) == end, 10)
    consumer.close()
