"""TransactionsAdmin (pulsar_txn.admin) against the real broker and an embedded coordinator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pulsar_txn import (
    AuthenticationError,
    AuthenticationToken,
    Client,
    ConfigError,
    MessageId,
    TopicNotFound,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
    TransactionsAdmin,
    TxnID,
    cli,
)
from tests.conftest import Cluster, receive_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _admin(c: Cluster, auth_token: str | None = None) -> TransactionsAdmin:
    return TransactionsAdmin(
        c.client, admin_url=c.coordinator.admin_url, log_topic=c.config.log_topic, auth_token=auth_token
    )


def test_metadata_shows_status_partitions_and_subscriptions_from_the_log(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    admin = _admin(c)
    topic = f"adm_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    producer.send("plain")
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = c.client.transaction(60)
    producer.send("t", txn=txn, partition_key="k")
    consumer.acknowledge(msg, txn=txn)
    full = f"persistent://public/default/{topic}"
    meta = wait_until(
        lambda: (m := admin.transaction_metadata(txn.txn_id))["subscriptions"] and m, 10, what="subscription"
    )
    assert meta["status"] == "OPEN" and meta["timeout_ms"] == 60_000 and meta["txn_id"] == str(txn.txn_id)
    # As Pulsar's client does, a partitioned topic's subscription joins per partition.
    acked = f"{full}-partition-{msg.message_id.partition}"
    assert meta["subscriptions"] == [{"topic": acked, "subscription": f"sub_{uid}"}]
    assert len(meta["partitions"]) == 1 and meta["partitions"][0].startswith(f"{full}-partition-")
    txn.commit()
    assert admin.transaction_status(str(txn.txn_id)) == "COMMITTED"
    assert txn.txn_id in admin.list_transactions(txn.txn_id.most_bits)
    stats = admin.pending_ack_stats(topic, f"sub_{uid}")
    assert sum(s["pending_ack_count"] for s in stats.values()) == 0
    tb = admin.transaction_buffer_stats(topic)
    assert sum(s["committed_txns"] for s in tb.values()) == 1 and len(tb) == 2


def test_unknown_transactions_and_coordinators_get_typed_errors(cluster: ClusterFactory) -> None:
    c = cluster()
    admin = _admin(c)
    with pytest.raises(TransactionNotFound):
        admin.transaction_metadata(TxnID(0, 10_000))
    with pytest.raises(TransactionCoordinatorNotFoundError, match="does not exist"):
        admin.transaction_metadata("(99,0)")
    wrong = TransactionsAdmin(c.client, log_topic="no_such_log_topic")
    with pytest.raises(TransactionCoordinatorNotFoundError, match="log_topic"):
        wrong.list_transactions(0)
    with pytest.raises(ConfigError, match="admin_url"):
        wrong.coordinator_stats()


def test_coordinator_stats_over_http_count_timeouts_and_need_the_token(cluster: ClusterFactory) -> None:
    c = cluster(admin_port=0, auth_token="s3cret")
    with pytest.raises(AuthenticationError):
        _admin(c, auth_token="wrong").coordinator_stats()
    admin = _admin(c, auth_token="s3cret")
    stats = admin.coordinator_stats()
    assert sorted(stats) == [0, 1, 2, 3]
    assert all(s["state"] == "Ready" and s["timeout_count"] == 0 for s in stats.values())


def test_a_missing_topic_is_reported_not_created(cluster: ClusterFactory, uid: str) -> None:
    from pulsar_txn import TopicNotFound

    c = cluster()
    with pytest.raises(TopicNotFound):
        c.client.create_producer(f"missing_{uid}")
    with pytest.raises(TopicNotFound):
        TransactionsAdmin(c.client).transaction_buffer_stats(f"missing_{uid}")
    assert not c.client._admin.topic_exists(f"missing_{uid}")


def test_stats_of_a_missing_subscription_say_so_and_a_new_one_has_stats_before_any_ack(
    cluster: ClusterFactory, uid: str
) -> None:
    from pulsar_txn import SubscriptionNotFound

    c = cluster()
    admin = _admin(c)
    topic = f"subnf_{uid}"
    c.client.create_topic(topic, 1)
    with pytest.raises(SubscriptionNotFound, match=f"no subscription 'nosub_{uid}'"):
        admin.pending_ack_stats(topic, f"nosub_{uid}")
    consumer = c.client.subscribe(topic, f"sub_{uid}")
    part = f"persistent://public/default/{topic}-partition-0"
    # Subscribed, nothing acked nor committed yet: its stats exist while it has members.
    stats = wait_until(lambda: admin.pending_ack_stats(topic, f"sub_{uid}"), 10, what="member")
    assert stats[part]["pending_ack_count"] == 0
    consumer.close()


def test_metrics_count_commits_aborts_and_open_transactions_behind_the_token(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster(admin_port=0, auth_token="s3cret")
    with pytest.raises(AuthenticationError):
        _admin(c, auth_token="wrong").metrics()
    admin = _admin(c, auth_token="s3cret")
    with Client(
        c.coordinator.url,
        kafka=c.client.kafka,
        num_tcs=c.config.num_tcs,
        snapshot_topic=c.config.snapshot_topic,
        authentication=AuthenticationToken("s3cret"),
    ) as client:
        topic = f"met_{uid}"
        client.create_topic(topic, 1)
        producer = client.create_producer(topic)
        committed, aborted, still_open = (client.transaction(60) for _ in range(3))
        for txn in (committed, aborted, still_open):
            producer.send(b"x", txn=txn)
        committed.commit()
        aborted.abort()

        def sample(text: str, name: str, having: str = "{") -> float:
            lines = text.splitlines()
            return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines if ln.startswith(name) and having in ln)

        text = admin.metrics()
        assert sample(text, "pulsar_txn_committed_total") == 1
        assert sample(text, "pulsar_txn_aborted_total") == 1
        assert sample(text, "pulsar_txn_created_total") == 3
        assert sample(text, "pulsar_txn_active_count") == 1
        # Both ended transactions fall in one of Pulsar's execution-latency buckets.
        assert sample(text, "pulsar_txn_execution_latency_le_") == 2

        # The TB service keeps the topic's partition: its markers show up once it has read them.
        ours = f'{{topic="{topic}",partition="0"}}'

        def tb_read_both_markers() -> str | None:
            t = admin.metrics()
            return t if sample(t, "pulsar_txn_tb_aborted_total", ours) == 1 else None

        text = wait_until(tb_read_both_markers, 20, what="the TB service's metrics")
        assert f"pulsar_txn_tb_committed_total{ours} 1" in text
        assert f"pulsar_txn_tb_active_total{ours} 1" in text
        still_open.commit()


def test_slow_transactions_are_the_ones_open_longer_than_the_timeout(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    admin = _admin(c)
    done = c.client.transaction(60)
    done.commit()
    open_txn = c.client.transaction(60)
    slow = wait_until(lambda: admin.slow_transactions(0) or None, 10, what="the open transaction in the log")
    assert list(slow) == [open_txn.txn_id] and slow[open_txn.txn_id]["status"] == "OPEN"
    assert admin.slow_transactions(0, coordinator_id=open_txn.txn_id.most_bits) == slow
    assert admin.slow_transactions(3_600_000) == {}
    with pytest.raises(ConfigError):
        admin.slow_transactions(-1)
    open_txn.abort()
    assert wait_until(lambda: admin.slow_transactions(0) == {}, 10, what="the abort in the log")


def test_cli_prints_metrics_slow_transactions_and_metadata(
    cluster: ClusterFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = cluster(admin_port=0)
    txn = c.client.transaction(60)
    config = tmp_path / "pulsar-txn.json"
    config.write_text(
        json.dumps(
            {
                "kafka": {"bootstrap_servers": c.client.kafka.bootstrap_servers},
                "coordinator": {"log_topic": c.config.log_topic, "num_tcs": c.config.num_tcs},
            }
        )
    )
    assert cli.main(["metrics", "--admin-url", str(c.coordinator.admin_url)]) == 0
    assert "# TYPE pulsar_txn_active_count gauge" in capsys.readouterr().out

    def slow() -> dict[str, Any] | None:
        assert cli.main(["slow-transactions", "--config", str(config), "-t", "0s"]) == 0
        found: dict[str, Any] = json.loads(capsys.readouterr().out)
        return found or None

    assert list(wait_until(slow, 10, what="the open transaction")) == [str(txn.txn_id)]
    assert cli.main(["transaction-metadata", "--config", str(config), "--txn-id", str(txn.txn_id)]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "OPEN"
    assert cli.main(["transaction-metadata", "--config", str(config), "--txn-id", "(0,999999)"]) == 2
    assert "not in TC 0's log" in capsys.readouterr().err
    abort = ["abort-transaction", "--config", str(config), "--service-url", str(c.coordinator.url)]
    assert cli.main([*abort, "--txn-id", str(txn.txn_id)]) == 0
    assert json.loads(capsys.readouterr().out) == {"txn_id": str(txn.txn_id), "status": "ABORTED"}


def test_a_transaction_in_the_buffer_and_pending_acks_then_aborted_by_the_admin(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    admin = _admin(c)
    topic, sub = f"tin_{uid}", f"sub_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send(b"plain")
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msg = consumer.receive(5000)
    part = f"persistent://public/default/{topic}-partition-0"

    held = c.client.transaction(60)
    sent = producer.send(b"in-txn", txn=held)
    consumer.acknowledge(msg, txn=held)
    held.prepare_async().result(30)  # the ack record is stored
    with c.client.transaction(60) as committed:
        producer.send(b"committed", txn=committed)
    elsewhere = c.client.transaction(60)

    stats = admin.transaction_in_buffer_stats(held.txn_id, topic)
    assert stats == {
        part: {"txn_id": str(held.txn_id), "state": "OPEN", "start_position": sent.offset, "aborted": False}
    }
    assert admin.transaction_in_buffer_stats(committed.txn_id, topic)[part]["state"] == "COMMITTED"
    assert admin.transaction_in_buffer_stats(str(elsewhere.txn_id), topic)[part]["state"] == "NONE"
    assert admin.transaction_in_pending_ack_stats(held.txn_id, topic, sub)[part] == {
        "txn_id": str(held.txn_id),
        "cumulative_ack_position": None,
        "individual_ack_count": 1,
    }
    position = admin.position_stats_in_pending_ack(topic, sub, msg.message_id)
    assert position == {"state": "PendingAck", "txns": [str(held.txn_id)]}
    with pytest.raises(ConfigError, match="of topic"):  # it answered for this topic's message
        admin.position_stats_in_pending_ack(topic, sub, MessageId("another", msg.message_id.partition, 0))
    with pytest.raises(ConfigError, match="2\\*\\*63"):  # answered NotInPendingAck (CLI review, s42)
        admin.position_stats_in_pending_ack(topic, sub, MessageId(msg.message_id.topic, 0, 10**23))

    admin.abort_transaction(held.txn_id)
    # Answered once the markers are written; the terminal record follows.
    assert wait_until(lambda: admin.transaction_status(held.txn_id) == "ABORTED", 10, what="ABORTED logged")
    assert admin.transaction_in_buffer_stats(held.txn_id, topic)[part]["aborted"] is True
    assert wait_until(
        lambda: admin.position_stats_in_pending_ack(topic, sub, msg.message_id)["state"] == "NotInPendingAck",
        10,
        what="the abort in the pending-ack log",
    )
    # The abort gave it back (after or before "committed", whichever the consumer reaches first).
    again = receive_all(consumer)
    assert sorted(m.data for m in again) == [b"committed", b"plain"]
    for m in again:
        consumer.acknowledge(m)
    consumer.close()  # commits the cursor
    assert admin.position_stats_in_pending_ack(topic, sub, msg.message_id)["state"] == "MarkDelete"
    with pytest.raises(ConfigError, match="names no message"):
        admin.position_stats_in_pending_ack(topic, sub, MessageId(topic, -1, 0))
    elsewhere.abort()


def test_the_cli_reads_a_cluster_of_another_tc_count_than_the_default_16(
    cluster: ClusterFactory, uid: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 20 TCs: a record of TC 16 is valid. An admin command that assumed CoordinatorConfig's default
    # of 16 TCs skipped it as a record of an unknown TC (ongoing 0, pending acks 0).
    c = cluster(num_tcs=20, static_tc_ids=tuple(range(20)))
    topic, sub = f"tcn_{uid}", f"tcnsub_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send(b"plain")
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msg = consumer.receive(10_000)
    txns = [c.client.transaction(60) for _ in range(40)]
    txn = next(t for t in txns if t.txn_id.most_bits == 16)
    producer.send(b"held", txn=txn)
    consumer.acknowledge(msg, txn=txn)
    config = tmp_path / "pulsar-txn.json"  # names no num_tcs: the log's partition count is the truth
    config.write_text(
        json.dumps(
            {
                "kafka": {"bootstrap_servers": c.client.kafka.bootstrap_servers},
                "coordinator": {"log_topic": c.config.log_topic, "snapshot_topic": c.config.snapshot_topic},
            }
        )
    )
    part = f"persistent://public/default/{topic}-partition-0"
    assert cli.main(["transaction-buffer-stats", "--config", str(config), "--topic", topic]) == 0
    stats = json.loads(capsys.readouterr().out)[part]
    assert (stats["ongoing_txn_size"], stats["max_read_position"]) == (1, 1)
    pending = ["pending-ack-stats", "--config", str(config), "--topic", topic, "--subscription", sub]
    assert cli.main(pending) == 0
    assert json.loads(capsys.readouterr().out)[part]["pending_ack_count"] == 1
    for t in txns:
        t.abort()
    consumer.close()


def test_stats_of_a_partition_past_the_count_and_an_abort_on_a_missing_tc_are_typed_errors(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    admin = _admin(c)
    topic = f"tpast_{uid}"
    c.client.create_topic(topic, 2)
    for stats in (admin.transaction_buffer_stats, lambda t: admin.transaction_in_buffer_stats("(0,1)", t)):
        with pytest.raises(TopicNotFound, match="2 partitions"):
            stats(f"{topic}-partition-5")
        with pytest.raises(TopicNotFound):
            stats(f"missing_{uid}-partition-0")
    with pytest.raises(TransactionCoordinatorNotFoundError, match="TC 50 does not exist") as err:
        admin.abort_transaction("(50,1)")
    assert not err.value.retriable  # a TC that does not exist will not appear by retrying
    with pytest.raises(TransactionCoordinatorNotFoundError) as err:
        admin.list_transactions(50)
    assert not err.value.retriable


def test_buffer_and_pending_ack_stats_cover_partitions_added_since_the_clients_last_look(
    cluster: ClusterFactory, uid: str
) -> None:
    """The stats used the client's cached partition count: partitions added to the topic (by another
    process) were left out for as long as nothing else refreshed it (growth review, session 40)."""
    from kafka_store import TopicAdmin

    c = cluster()
    topic = f"grown_stats_{uid}"
    c.client.create_topic(topic, 1)
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    admin = TransactionsAdmin(c.client)
    assert len(admin.transaction_buffer_stats(topic)) == 1
    assert len(admin.pending_ack_stats(topic, f"s_{uid}")) == 1
    TopicAdmin(c.client.kafka).add_partitions(topic, 3)
    assert len(admin.transaction_buffer_stats(topic)) == 3
    assert len(admin.pending_ack_stats(topic, f"s_{uid}")) == 3
    consumer.close()


def test_refused_end_txn_requests_are_counted_in_the_end_txn_summary(cluster: ClusterFactory) -> None:
    """``pulsar_txn_end_txn_latency_ms``: ``_count`` over all END_TXN requests, received to answered;
    a refused one (InvalidTxnStatus, TransactionNotFound) was not counted (stats review of session 43)."""
    from pulsar_txn import InvalidTxnStatusError, TransactionNotFound, TxnID

    c = cluster(admin_port=0, num_tcs=1, static_tc_ids=(0,), tb_service_enabled=False)
    admin = TransactionsAdmin(c.client, admin_url=c.coordinator.admin_url, log_topic=c.config.log_topic)
    txn = c.client.transaction(60)
    txn.abort()
    before = admin.coordinator_stats()[0]["end_txn_latency"]["count"]
    other = c.other_client()
    try:
        with pytest.raises(InvalidTxnStatusError):
            other.resume_transaction(txn.txn_id).commit()
        with pytest.raises(TransactionNotFound):
            other.resume_transaction(TxnID(0, 12345)).commit()
    finally:
        other.close()
    assert admin.coordinator_stats()[0]["end_txn_latency"]["count"] - before == 2
