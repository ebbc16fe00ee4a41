"""Client.delete_topic against the real broker: a topic goes with its subscriptions (consumer groups),
their pending-ack logs and its transaction-buffer snapshots, as with ``pulsar-admin topics delete``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kafka_store import TopicAdmin, group_offsets, list_groups, replay_compacted
from pulsar_txn import NotAllowedError, TopicNotFound
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.consumer import Consumer
from pulsar_txn.naming import TopicName, pending_ack_topic
from tests.conftest import REPO, Cluster, receive_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _fill(c: Cluster, topic: str, n: int, partitions: int) -> None:
    c.client.create_topic(topic, partitions)
    producer = c.client.create_producer(topic)
    with c.client.transaction(60) as txn:
        for i in range(n):
            producer.send(f"t{i}", txn=txn, partition_key=f"k{i}")
    for i in range(n):
        producer.send(f"p{i}", partition_key=f"k{i}")
    producer.close()


def _ack_all(consumer: Consumer[bytes], c: Cluster, *, in_txn: bool) -> int:
    msgs = receive_all(consumer)
    if in_txn:
        with c.client.transaction(60) as txn:
            consumer.acknowledge(msgs, txn=txn)
    else:
        for m in msgs:
            consumer.acknowledge(m)
    consumer.close()  # writes the cursor to the group
    return len(msgs)


def _snapshot_keys(c: Cluster, topic: str) -> list[str]:
    """The live keys of ``topic``'s records in the TB snapshot topic (all of its partitions)."""
    snap = c.config.snapshot_topic
    keys = (
        key.decode()
        for p in range(TopicAdmin(c.client.kafka).partition_count(snap))
        for key in replay_compacted(c.client.kafka, snap, p)
    )
    return sorted(k for k in keys if k.startswith(f"{topic}/"))


def _groups(c: Cluster) -> set[str]:
    return {g.group_id for g in list_groups(c.client.kafka)}


def test_deleting_a_topic_removes_its_subscriptions_pending_ack_logs_and_snapshots(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster(tb_topic_refresh_ms=2000)
    topic, sub_txn, sub_plain = f"del_{uid}", f"st_{uid}", f"sp_{uid}"
    _fill(c, topic, 10, 2)
    assert _ack_all(c.client.subscribe(topic, sub_txn, initial_position="Earliest"), c, in_txn=True) == 20
    assert _ack_all(c.client.subscribe(topic, sub_plain, initial_position="Earliest"), c, in_txn=False) == 20
    # A topic named "<topic>-b" whose subscription "c" has the log "<topic>-b-c__...": not ours.
    rival = f"{topic}-b"
    _fill(c, rival, 2, 1)
    assert _ack_all(c.client.subscribe(rival, "c", initial_position="Earliest"), c, in_txn=True) == 4
    rival_log = pending_ack_topic(TopicName.parse(rival), "c")
    snapshots = SnapshotStore(c.client.kafka, topic=c.config.snapshot_topic)
    try:
        wait_until(lambda: snapshots.load(topic, 0) is not None, 15, what="a TB snapshot")
        assert _snapshot_keys(c, topic)
        own_log = pending_ack_topic(TopicName.parse(topic), sub_txn)
        admin = TopicAdmin(c.client.kafka)
        assert own_log in admin.list_topics() and {sub_txn, sub_plain} <= _groups(c)

        deleted = c.client.delete_topic(topic)

        assert deleted.subscriptions == tuple(sorted([sub_plain, sub_txn]))
        assert deleted.pending_ack_topics == (own_log,) and deleted.kept_subscriptions == ()
        assert deleted.snapshot_records >= 1
        remaining = admin.list_topics()
        assert topic not in remaining and own_log not in remaining
        assert rival in remaining and rival_log in remaining and "c" in _groups(c)
        assert not {sub_txn, sub_plain} & _groups(c)
        assert c.config.tb_group in _groups(c)  # the TB service reads the topic but is no subscription
        # The TB service notices at its next topic refresh (every 2 s here: after our tombstones).
        # Before, its revocation wrote a last snapshot of each partition, and the records came back;
        # now it drops the partitions without one and tombstones any snapshot of its own. A fixed
        # Past that refresh, what it wrote late must go too: on a loaded CI machine its own tombstones
        # were once still to come at 5 s.
        time.sleep(2 * 2.0 + 1.0)
        wait_until(lambda: _snapshot_keys(c, topic) == [], 15, what="no snapshot record of the topic")
    finally:
        snapshots.close()

    # Created again under the name, through the same client (its producer starts a new sequence):
    # the old cursors (past the 20 records of each partition) are gone, so a subscription of the old
    # name starts from the new topic's first record.
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(30):
        producer.send(f"new{i}", partition_key=f"k{i}")
    again = c.client.subscribe(topic, sub_txn, initial_position="Earliest")
    assert sorted(m.data.decode() for m in receive_all(again)) == sorted(f"new{i}" for i in range(30))
    again.close()


def test_deleting_a_topic_with_a_connected_consumer_is_refused_unless_forced(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic, sub = f"delc_{uid}", f"s_{uid}"
    _fill(c, topic, 3, 1)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    try:
        assert len(receive_all(consumer)) == 6
        with pytest.raises(NotAllowedError, match="connected consumers"):
            c.client.delete_topic(topic)
        assert TopicAdmin(c.client.kafka).topic_exists(topic)
        deleted = c.client.delete_topic(topic, force=True)
        assert deleted.kept_subscriptions == (sub,) and deleted.subscriptions == ()
        assert not TopicAdmin(c.client.kafka).topic_exists(topic)
    finally:
        consumer.close()


def test_the_delete_topic_command_refuses_a_connected_subscription_then_deletes_it(
    cluster: ClusterFactory, uid: str, tmp_path: Path
) -> None:
    c = cluster()
    topic, sub = f"delcli_{uid}", f"s_{uid}"
    _fill(c, topic, 2, 1)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    assert len(receive_all(consumer)) == 4
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"coordinator": {"snapshot_topic": c.config.snapshot_topic}}))
    cmd = [sys.executable, "-m", "pulsar_txn.cli", "delete-topic", "--config", str(cfg)]
    cmd += ["--bootstrap-servers", c.client.kafka.bootstrap_servers, topic]

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60)

    refused = run()
    assert refused.returncode == 2 and "connected consumers" in refused.stderr
    consumer.close()
    done = run()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["subscriptions"] == [sub]
    assert not TopicAdmin(c.client.kafka).topic_exists(topic)


def test_a_subscription_that_also_reads_another_topic_is_kept_with_its_other_cursor(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    one, other, sub = f"delm1_{uid}", f"delm2_{uid}", f"s_{uid}"
    _fill(c, one, 2, 1)
    _fill(c, other, 2, 1)
    assert _ack_all(c.client.subscribe([one, other], sub, initial_position="Earliest"), c, in_txn=False) == 8
    cursor = group_offsets(c.client.kafka, sub, [(other, 0)])
    deleted = c.client.delete_topic(one)
    assert deleted.kept_subscriptions == (sub,) and deleted.subscriptions == ()
    assert sub in _groups(c)
    assert group_offsets(c.client.kafka, sub, [(other, 0)]) == cursor


def test_deleting_a_missing_topic_or_one_partition_is_a_clear_error(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    with pytest.raises(TopicNotFound):
        c.client.delete_topic(f"nosuch_{uid}")
    c.client.create_topic(f"delp_{uid}", 2)
    with pytest.raises(NotAllowedError, match="not one of its partitions"):
        c.client.delete_topic(f"delp_{uid}-partition-1")


def test_system_topics_are_never_deleted(cluster: ClusterFactory, uid: str) -> None:
    """As Pulsar refuses to delete system topics: the transaction log (deleting it lost every
    outcome, and a restarted coordinator handed TxnIDs out again from (0,0)), the snapshots, the
    owners, pending-ack logs and Kafka's own topics are refused with NotAllowedError, kept whole."""
    c = cluster()
    topic, sub = f"delsys_{uid}", f"s_{uid}"
    _fill(c, topic, 2, 1)
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    _ack_all(consumer, c, in_txn=True)  # makes the pending-ack log
    consumer.close()
    admin = TopicAdmin(c.client.kafka)
    system = [
        c.config.log_topic,
        c.config.snapshot_topic,
        c.config.owners_topic,
        pending_ack_topic(TopicName.parse(topic), sub),
        "__consumer_offsets",
    ]
    for name in system:
        with pytest.raises(NotAllowedError, match="system topic"):
            c.client.delete_topic(name, force=True)
    assert all(admin.topic_exists(name) for name in system[:4])
    with c.client.transaction(60):  # the coordinator still works
        pass
