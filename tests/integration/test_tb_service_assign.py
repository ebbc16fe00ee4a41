"""The TB service's partition assignment against the real broker: a failed recovery is not fatal."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_store import Appender, KafkaConfig, PartitionReader, StoreError, TopicAdmin
from pulsar_txn.buffer.marker import TXN_HEADER
from pulsar_txn.buffer.service import TransactionBufferService
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.buffer.state import record_fingerprint
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.fold import read_tc_log
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import wait_until
from tests.integration.test_transaction_buffer import _markers

pytestmark = pytest.mark.integration


def test_a_partition_whose_snapshot_fails_to_load_is_still_served_and_the_failure_is_reported(
    kafka: KafkaConfig,
    coord_config: Callable[..., CoordinatorConfig],
    uid: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = f"tbassign_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1, {})
    open_txn = TxnID(1, 7)  # written but never ended: a state change the service must snapshot
    app = Appender(kafka)
    app.append(topic, 0, b"plain").result(10)
    app.append(topic, 0, b"open", headers=[(TXN_HEADER, open_txn.to_bytes())]).result(10)
    app.close()
    load_many = SnapshotStore.load_many
    failed: list[tuple[str, int]] = []

    def fail_once(self: SnapshotStore, partitions: Any, **kwargs: Any) -> Any:
        partitions = list(partitions)
        if not failed:
            failed.extend(partitions)
            raise StoreError("injected: snapshot topic unavailable", retriable=True)
        return load_many(self, partitions, **kwargs)

    monkeypatch.setattr(SnapshotStore, "load_many", fail_once)
    config = coord_config(tb_snapshot_interval_ms=100, tb_topic_refresh_ms=300)
    service = TransactionBufferService(kafka, config)
    caplog.set_level(logging.ERROR, logger="pulsar_txn.buffer.service")
    service.start()
    try:
        key = f"{topic}-partition-0"

        def recovered() -> dict[str, Any] | None:
            stats = service.stats()["partitions"].get(key)
            return stats if stats and stats["recovery_state"] == "Ready" else None

        stats = wait_until(recovered, 10, what="the partition served after its failed recovery")
        assert (topic, 0) in failed
        assert stats["recovery_failures"] == 1 and "injected" in stats["last_recovery_error"]
        assert stats["recovered_from_snapshot_offset"] is None  # replayed from the partition's start
        assert stats["scanned_to"] == 2 and stats["max_read_position"] == 1
        assert service.stats()["recovery_failures"] >= 1
        assert any(r.levelno == logging.ERROR and f"{topic}[0]" in r.getMessage() for r in caplog.records)
        store = SnapshotStore(kafka, topic=config.snapshot_topic)

        def snapshot_written() -> bool:
            loaded = load_many(store, [(topic, 0)], num_tcs=config.num_tcs)[(topic, 0)]
            return loaded is not None and loaded[0].scanned_to == 2

        wait_until(snapshot_written, 10, interval=0.2, what="a snapshot of the partition")
        snapshot = load_many(store, [(topic, 0)], num_tcs=config.num_tcs)[(topic, 0)]
        assert snapshot is not None and snapshot[0].ongoing == {open_txn: 1}
    finally:
        service.stop()


def test_a_topic_created_again_between_two_topic_refreshes_is_folded_anew_before_its_next_snapshot(
    kafka: KafkaConfig, coord_config: Callable[..., CoordinatorConfig], uid: str
) -> None:
    """The service's reader went on at the old end of a partition whose topic was deleted and created
    again (and had grown past that end) between two topic refreshes: nothing else told it. Before
    its next snapshot it checks that the record folded at the last one is still there; it is not, so
    it folds the new partition from its start. Before, it snapshotted the new records as if they
    followed the old ones, and readers trusting that snapshot delivered past an open transaction."""
    topic = f"tbrecreate_{uid}"
    admin = TopicAdmin(kafka)
    admin.ensure_topic(topic, 1, {})
    app = Appender(kafka)
    for i in range(10):
        app.append(topic, 0, b"old %d" % i).result(10)
    config = coord_config(tb_snapshot_interval_ms=100, tb_topic_refresh_ms=600_000)  # no refresh in the test
    service = TransactionBufferService(kafka, config)
    service.start()
    key = f"{topic}-partition-0"
    try:
        first = TxnID(1, 3)
        app.append(topic, 0, b"old open", headers=[(TXN_HEADER, first.to_bytes())]).result(10)

        def stats() -> dict[str, Any]:
            return service.stats()["partitions"].get(key) or {}

        wait_until(lambda: stats().get("last_snapshot_offset") == 11, 20, what="a snapshot of the old topic")
        admin.delete_topics([topic])
        wait_until(lambda: not admin.topic_exists(topic), 10, what="the topic deleted")
        admin.ensure_topic(topic, 1, {})
        app.renew("topic created again")
        opened, later = TxnID(2, 5), TxnID(3, 8)
        app.append(topic, 0, b"new open", headers=[(TXN_HEADER, opened.to_bytes())]).result(10)
        for i in range(12):
            app.append(topic, 0, b"new %d" % i).result(10)
        app.append(topic, 0, b"later open", headers=[(TXN_HEADER, later.to_bytes())]).result(10)
        # The new partition: an open transaction at 0, plain records 1-12, another open one at 13.
        wait_until(lambda: stats().get("scanned_to") == 14, 20, what="the new partition folded")
        wait_until(lambda: stats().get("max_read_position") == 0, 20, what="the fold to start anew")
        store = SnapshotStore(kafka, topic=config.snapshot_topic)

        def snapshot_of_new() -> bool:
            loaded = store.load(topic, 0, num_tcs=config.num_tcs)
            return loaded is not None and loaded[0].scanned_to == 14

        wait_until(snapshot_of_new, 20, interval=0.2, what="a snapshot of the new partition")
        loaded = store.load(topic, 0, num_tcs=config.num_tcs)
        assert loaded is not None and loaded[0].ongoing == {opened: 0, later: 13}
        assert loaded[0].max_read_position == 0
    finally:
        service.stop()
        app.close()


def test_partitions_added_to_a_topic_are_taken_within_a_topic_refresh(
    kafka: KafkaConfig, coord_config: Callable[..., CoordinatorConfig], uid: str
) -> None:
    """librdkafka learns of new partitions of a subscribed topic at its metadata refresh, every 5
    minutes by default: until then nobody snapshotted them or resolved their hanging transactions.
    The service's group refreshes as often as it lists the topics."""
    topic = f"tbgrow_{uid}"
    admin = TopicAdmin(kafka)
    admin.ensure_topic(topic, 1, {})
    config = coord_config(tb_snapshot_interval_ms=100, tb_topic_refresh_ms=500)
    service = TransactionBufferService(kafka, config)
    service.start()
    app = Appender(kafka)
    try:
        app.append(topic, 0, b"p0").result(10)
        wait_until(
            lambda: f"{topic}-partition-0" in service.stats()["partitions"], 20, what="partition 0 taken"
        )
        admin.add_partitions(topic, 3)
        for p in (1, 2):
            app.append(topic, p, b"open", headers=[(TXN_HEADER, TxnID(1, 9).to_bytes())]).result(30)
        wanted = {f"{topic}-partition-{p}" for p in range(3)}
        wait_until(
            lambda: wanted <= set(service.stats()["partitions"]), 30, what="the added partitions taken"
        )
    finally:
        service.stop()
        app.close()


def test_tb_service_owns_only_the_topics_its_pattern_matches(
    kafka: KafkaConfig, coord_config: Callable[..., CoordinatorConfig], uid: str
) -> None:
    """``tb_topic_pattern`` limits the service to some data topics: others are never read by it (no
    snapshot, no stats entry), so a deployment can leave non-transactional topics alone."""
    ours, other = f"tbpat_in_{uid}", f"tbpat_out_{uid}"
    admin = TopicAdmin(kafka)
    for topic in (ours, other):
        admin.ensure_topic(topic, 1, {})
    config = coord_config(
        tb_snapshot_interval_ms=100, tb_topic_refresh_ms=300, tb_topic_pattern=f"tbpat_in_{uid}"
    )
    service = TransactionBufferService(kafka, config)
    service.start()
    app = Appender(kafka)
    try:
        for topic in (ours, other):
            app.append(topic, 0, b"x").result(10)
        wait_until(
            lambda: f"{ours}-partition-0" in service.stats()["partitions"],
            20,
            what="the matching topic taken",
        )
        time.sleep(1.0)  # a few topic refreshes: the other topic stays out
        assert f"{other}-partition-0" not in service.stats()["partitions"]
    finally:
        service.stop()
        app.close()


def test_checking_a_snapshot_anchor_leaves_no_partition_fetching(kafka: KafkaConfig, uid: str) -> None:
    """The TB service keeps the reader that checks anchors open between snapshots. A partition left
    assigned to it stays fetched for good, and at its end on a broker that answers empty fetches at
    once that costs a core's worth of both (session 22 found it in every idle coordinator)."""
    topic = f"tbprobe_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1, {})
    app = Appender(kafka)
    reader = PartitionReader(kafka)
    try:
        for value in (b"a", b"b"):
            app.append(topic, 0, value).result(10)
        store = SnapshotStore(kafka, topic=f"__tbsnap_{uid}")
        assert store.matches(reader, topic, 0, 1, record_fingerprint([], b"b"))
        assert not store.matches(reader, topic, 0, 1, record_fingerprint([], b"other"))
        assert reader.consumer.assignment() == []
    finally:
        reader.close()
        app.close()


def test_the_service_prunes_aborted_transactions_retention_has_deleted(
    kafka: KafkaConfig,
    coord_config: Callable[..., CoordinatorConfig],
    uid: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The service's aborted set (and so its snapshots and stats) stays bounded: an aborted
    transaction whose records retention deleted is forgotten, as readers forget it."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    import pulsar_txn.buffer.service as service_module
    from pulsar_txn.buffer.marker import TxnMarker, marker_record
    from pulsar_txn.txnid import TxnAction

    monkeypatch.setattr(service_module, "_PRUNE_EVERY_S", 0.3)
    topic = f"tbprune_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1, {})
    aborted = TxnID(1, 7)
    app = Appender(kafka)
    try:
        app.append(topic, 0, b"a", headers=[(TXN_HEADER, aborted.to_bytes())]).result(10)
        value, headers = marker_record(
            TxnMarker(aborted, TxnAction.ABORT, -1, int(time.time() * 1000)), topic, 0, None
        )
        app.append(topic, 0, value, headers=headers).result(10)
        app.append(topic, 0, b"plain").result(10)
    finally:
        app.close()
    service = TransactionBufferService(
        kafka, coord_config(tb_snapshot_interval_ms=100, tb_topic_refresh_ms=300)
    )
    service.start()
    key = f"{topic}-partition-0"
    try:

        def stats() -> dict[str, Any]:
            return service.stats()["partitions"].get(key) or {}

        wait_until(lambda: stats().get("aborted_txn_size") == 1, 20, what="the aborted transaction folded")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        for done in admin.delete_records([TopicPartition(topic, 0, 2)]).values():
            done.result(15)  # retention: the transaction's message and its marker are gone
        wait_until(lambda: stats().get("aborted_txn_size") == 0, 20, what="the aborted transaction pruned")
    finally:
        service.stop()


@pytest.mark.parametrize("retention_ms", [300_000, 0], ids=["ended", "forgotten"])
def test_resolving_a_hanging_txn_behind_the_service_fold_adds_no_marker_after_the_tc_s_own(
    cluster: Callable[..., Any], kafka: KafkaConfig, uid: str, retention_ms: int
) -> None:
    """The service's fold lags the partition (here: it has read nothing of it), the transaction
    still looks open there, and its TC has committed it. Its COMMIT marker is in the partition, so
    no resolution is written: before, a second COMMIT, or once the TC had forgotten the
    transaction, an ABORT after the COMMIT (found by review with a race; deterministic here)."""

    c = cluster(tb_service_enabled=False, end_txn_retention_ms=retention_ms)
    topic = f"tbahead_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send("committed", txn=txn)
    txn.commit()
    tc = txn.txn_id.most_bits
    if retention_ms == 0:
        wait_until(
            lambda: txn.txn_id.least_bits not in read_tc_log(kafka, c.config.log_topic, tc).txns,
            20,
            what="the TC forgot the transaction",
        )

    def markers() -> list[tuple[TxnID, TxnAction]]:
        return _markers(kafka, topic, 0)

    assert markers() == [(txn.txn_id, TxnAction.COMMIT)]
    service = TransactionBufferService(kafka, c.config)
    service._appender = Appender(kafka)  # not started: its fold has read nothing of the partition
    try:
        service._resolve(tc, [((topic, 0), txn.txn_id)])
    finally:
        service._appender.close()
    assert markers() == [(txn.txn_id, TxnAction.COMMIT)]
    assert service.hanging_resolved == 0


def test_a_fenced_tb_service_stops_listing_the_partitions_it_gave_up(
    kafka: KafkaConfig, coord_config: Callable[..., CoordinatorConfig], uid: str
) -> None:
    """Found by the multi-coordinator review (session 42): a service fenced by another with its
    group_instance_id dropped its partitions but kept listing them, with frozen numbers, in its
    stats and /metrics (its loop idles from then on and rebuilt them no more)."""
    topic = f"tbfenced_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1, {})
    config = coord_config(
        tb_snapshot_interval_ms=100, tb_topic_refresh_ms=300, group_instance_id=f"same-{uid}"
    )
    first, second = TransactionBufferService(kafka, config), TransactionBufferService(kafka, config)
    name = f"{topic}-partition-0"
    first.start()
    try:
        wait_until(lambda: name in first.stats()["partitions"], 30, what="the first service owns it")
        second.start()  # same instance id: the broker fences the first
        wait_until(lambda: name in second.stats()["partitions"], 30, what="the second service owns it")
        wait_until(lambda: name not in first.stats()["partitions"], 30, what="the fenced one drops it")
    finally:
        second.stop()
        first.stop()
