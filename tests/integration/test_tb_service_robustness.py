"""The TB service under broker hiccups, rebalance churn, plain-only traffic, failing snapshot writes
and a fenced static member (review of session 28)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_store import (
    Appender,
    BrokerUnavailableError,
    GroupReader,
    KafkaConfig,
    PartitionReader,
    TopicAdmin,
)
from pulsar_txn.buffer.marker import TXN_HEADER
from pulsar_txn.buffer.service import _PLAIN_ADVANCE, TransactionBufferService
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.records import encode_seq_high_water, seq_key
from pulsar_txn.txnid import TxnID
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

ConfigFactory = Callable[..., CoordinatorConfig]


def _stats(service: TransactionBufferService, topic: str) -> dict[str, Any]:
    found: dict[str, Any] = service.stats()["partitions"].get(f"{topic}-partition-0") or {}
    return found


def test_a_transient_broker_error_before_a_snapshot_is_not_taken_for_a_recreated_topic(
    kafka: KafkaConfig,
    coord_config: ConfigFactory,
    uid: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = f"tbtransient_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1, {})
    app = Appender(kafka)
    for i in range(50):
        app.append(topic, 0, b"x%d" % i).result(10)
    app.append(topic, 0, b"open", headers=[(TXN_HEADER, TxnID(1, 7).to_bytes())]).result(10)
    forgets: list[Any] = []
    forget = SnapshotStore.forget

    def spy_forget(self: SnapshotStore, t: str, parts: list[int]) -> None:
        forgets.append((t, list(parts)))
        forget(self, t, parts)

    monkeypatch.setattr(SnapshotStore, "forget", spy_forget)
    caplog.set_level(logging.WARNING)
    service = TransactionBufferService(
        kafka, coord_config(tb_snapshot_interval_ms=300, tb_topic_refresh_ms=600_000)
    )
    service.start()
    try:
        wait_until(lambda: _stats(service, topic).get("last_snapshot_offset") == 51, 20, what="a snapshot")
        watermarks = PartitionReader.watermarks
        failed: list[int] = []

        def flaky(self: PartitionReader, t: str, p: int) -> tuple[int, int]:
            if t == topic and not failed:  # one timeout (a leader moving, a slow broker)
                failed.append(1)
                raise BrokerUnavailableError(f"watermarks of {t}[{p}]: Local: Timed out")
            return watermarks(self, t, p)

        monkeypatch.setattr(PartitionReader, "watermarks", flaky)
        app.append(topic, 0, b"open2", headers=[(TXN_HEADER, TxnID(1, 8).to_bytes())]).result(10)
        wait_until(lambda: failed, 20, what="the injected failure")
        # The next check (after a back-off) succeeds and the snapshot is written; nothing was reset.
        wait_until(lambda: _stats(service, topic).get("last_snapshot_offset") == 52, 20, what="next snapshot")
        assert not forgets
        assert not [r for r in caplog.records if "created again" in r.getMessage()]
    finally:
        service.stop()
        app.close()


def test_a_hanging_transaction_is_resolved_while_the_group_keeps_rebalancing(
    kafka: KafkaConfig, coord_config: ConfigFactory, uid: str
) -> None:
    admin = TopicAdmin(kafka)
    config = coord_config(
        tb_hanging_check_after_ms=2000,
        tb_topic_refresh_ms=300,
        tb_snapshot_interval_ms=100,
        # Only this test's topics: in a full run the worker's broker holds hundreds of other tests'
        # topics, and folding them all kept the service from resolving within the deadline.
        tb_topic_pattern=f"tbhang.*_{uid}",
    )
    admin.ensure_topic(config.log_topic, 4, {"cleanup.policy": "compact"})
    app = Appender(kafka)
    # TC 1 handed out sequences below 100: TxnID (1,7) ended as far as the TC knows (forgotten).
    app.append(config.log_topic, 1, encode_seq_high_water(1, 0, 100), key=seq_key(1, 0)).result(10)
    topic = f"tbhang_{uid}"
    admin.ensure_topic(topic, 1, {})
    app.append(topic, 0, b"hanging", headers=[(TXN_HEADER, TxnID(1, 7).to_bytes())]).result(10)
    service = TransactionBufferService(kafka, config)
    service.start()
    try:
        n = itertools.count()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and service.hanging_resolved == 0:
            # A new matching topic each second: every one rebalances the group (eager: revoke all,
            # assign all). Before, each assignment restarted the transaction's clock.
            admin.ensure_topic(f"tbhang{next(n)}_{uid}", 1, {})
            time.sleep(1.0)
        assert service.hanging_resolved >= 1

        # Not "ongoing 0" alone: a partition just (re)assigned and still replaying shows 0 too (the
        # check this test had, and it once passed that way before the marker was written).
        def resolved_and_ready() -> bool:
            stats = _stats(service, topic)
            return stats.get("ongoing_txn_size") == 0 and stats.get("recovery_state") == "Ready"

        wait_until(resolved_and_ready, 20, what="the abort marker folded in")
    finally:
        service.stop()
        app.close()


def test_a_partition_of_plain_records_only_gets_snapshots_as_it_grows(
    kafka: KafkaConfig, coord_config: ConfigFactory, uid: str
) -> None:
    topic = f"tbplain_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1, {})
    app = Appender(kafka)
    service = TransactionBufferService(
        kafka, coord_config(tb_snapshot_interval_ms=100, tb_topic_refresh_ms=600_000)
    )
    service.start()
    try:
        app.append(topic, 0, b"open", headers=[(TXN_HEADER, TxnID(1, 7).to_bytes())]).result(10)
        wait_until(lambda: _stats(service, topic).get("last_snapshot_offset") == 1, 20, what="first snapshot")
        for fut in [app.append(topic, 0, b"p%d" % i) for i in range(20_000)]:
            fut.result(30)

        # No transaction changed anything, yet a reader would fold 20,000 records past the snapshot:
        # the snapshot follows the partition, at most _PLAIN_ADVANCE records behind what was folded.
        def caught_up() -> bool:
            s = _stats(service, topic)
            return s.get("scanned_to") == 20_001 and s["last_snapshot_offset"] > 20_001 - _PLAIN_ADVANCE

        wait_until(caught_up, 30, what="a newer snapshot")
    finally:
        service.stop()
        app.close()


def test_a_failing_snapshot_write_backs_off(
    kafka: KafkaConfig, coord_config: ConfigFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"tbfail_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1, {})
    app = Appender(kafka)
    attempts: list[float] = []

    def failing(self: SnapshotStore, state: Any) -> Any:
        if state.topic == topic:
            attempts.append(time.monotonic())
            raise BrokerUnavailableError("snapshot topic away")
        return write(self, state)

    write = SnapshotStore.write
    monkeypatch.setattr(SnapshotStore, "write", failing)
    service = TransactionBufferService(
        kafka, coord_config(tb_snapshot_interval_ms=50, tb_topic_refresh_ms=600_000)
    )
    service.start()
    try:
        app.append(topic, 0, b"open", headers=[(TXN_HEADER, TxnID(1, 7).to_bytes())]).result(10)
        wait_until(lambda: attempts, 20, what="a first attempt")
        time.sleep(3.5)
        # Back-off 1 s, 2 s, ...: at most 3 attempts in 3.5 s (before, one per loop: dozens).
        assert len(attempts) <= 3, len(attempts)
    finally:
        service.stop()
        app.close()


def test_a_fenced_static_member_gives_its_partitions_up(kafka: KafkaConfig, uid: str) -> None:
    topic = f"tbfence_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 2, {})
    events: dict[str, list[tuple[str, list[tuple[str, int]]]]] = {"a": [], "b": []}

    def member(name: str) -> GroupReader:
        def assigned(ps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            events[name].append(("assign", ps))
            return {}

        return GroupReader(
            kafka,
            f"g_{uid}",
            assigned,
            lambda ps: events[name].append(("revoke", ps)),
            instance_id="same",
            on_lost=lambda ps: events[name].append(("lost", ps)),
        )

    a = member("a")
    a.subscribe([topic])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not events["a"]:
        a.poll_batch(100, 0.1)
    assert events["a"] and events["a"][0][0] == "assign"
    b = member("b")  # the same instance id: a's successor, a is fenced
    b.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and a.fatal is None:
            a.poll_batch(100, 0.1)
            b.poll_batch(100, 0.1)
        assert a.fatal is not None
        assert ("lost", events["a"][0][1]) in events["a"]
        assert a.poll_batch(100, 0.05) == []  # a dead member reads nothing any more
    finally:
        a.close()
        b.close()
