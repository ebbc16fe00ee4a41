"""The transaction coordinator against the real broker: log, recovery, timeouts, idempotent end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kafka_store import REGISTRY, Appender, KafkaConfig, TopicAdmin, read_range
from pulsar_txn.buffer.marker import CTL_HEADER, MARKER_CTL, decode_marker
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.coordinator.records import TXN_META, TxnMeta
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.coordinator.tc import TransactionCoordinator
from pulsar_txn.errors import (
    InvalidTxnStatusError,
    NotAllowedError,
    PersistenceError,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
)
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

Factory = Callable[..., EmbeddedCoordinator]
ConfigFactory = Callable[..., CoordinatorConfig]


def _markers(kafka: KafkaConfig, topic: str, partition: int) -> list[tuple[int, TxnID, TxnAction, int]]:
    out = []
    for rec in read_range(kafka, topic, partition):
        if rec.header(CTL_HEADER) == MARKER_CTL:
            m = decode_marker(rec.value)
            out.append((rec.offset, m.txn_id, m.action, m.low_watermark))
    return out


def _log_statuses(kafka: KafkaConfig, topic: str, tc: int) -> list[tuple[int, str, bool]]:
    out = []
    for rec in read_range(kafka, topic, tc):
        if rec.key and rec.key.startswith(b"txn/") and rec.value is not None:
            f = REGISTRY.decode_as(TXN_META, rec.value)
            out.append((int(f["seq"]), f["status"], bool(f["timed_out"])))
    return out


def test_txn_ids_increase_per_tc_across_restart(embedded: Factory, coord_config: ConfigFactory) -> None:
    cfg = coord_config(static_tc_ids=(1,))
    ec = embedded(cfg)
    ids = [ec.run(ec.service.new_txn(1, 0)) for _ in range(5)]
    assert [str(i) for i in ids] == ["(1,0)", "(1,1)", "(1,2)", "(1,3)", "(1,4)"]
    ec.stop()
    ec2 = embedded(cfg)
    nxt = ec2.run(ec2.service.new_txn(1, 0))
    assert nxt == TxnID(1, 5)


def test_commit_writes_exactly_one_marker_per_partition_with_low_watermark(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"data_{uid}"
    admin.ensure_topic(topic, 3)
    ec = embedded(coord_config(static_tc_ids=(0,)))
    s = ec.service
    older = ec.run(s.new_txn(0, 0))  # stays open: pins the low watermark below it
    txn = ec.run(s.new_txn(0, 0))
    ec.run(s.add_partitions(txn, [f"{topic}-partition-0", f"{topic}-partition-2"]))
    ec.run(s.add_partitions(txn, [f"{topic}-partition-0"]))  # repeat: registered once
    ec.run(s.end_txn(txn, TxnAction.COMMIT))
    assert _markers(kafka, topic, 1) == []
    for p in (0, 2):
        [(_off, tid, action, lwm)] = _markers(kafka, topic, p)
        assert (tid, action) == (txn, TxnAction.COMMIT)
        assert lwm == older.least_bits - 1
    meta = ec.service.coordinator(0).get(txn)
    assert meta is not None and meta.status is TxnStatus.COMMITTED
    assert meta.partitions == [f"{topic}-partition-0", f"{topic}-partition-2"]


def test_abort_writes_abort_markers_and_subscription_outcome(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"data_{uid}"
    admin.ensure_topic(topic, 2)
    admin.ensure_topic(f"{topic}-sub__transaction_pending_ack", 2)
    ec = embedded(coord_config(static_tc_ids=(0,)))
    s = ec.service
    txn = ec.run(s.new_txn(0, 0))
    ec.run(s.add_partitions(txn, [f"{topic}-partition-1"]))
    ec.run(s.add_subscriptions(txn, [(topic, "sub"), (topic, "sub")]))
    ec.run(s.end_txn(txn, TxnAction.ABORT))
    assert [m[2] for m in _markers(kafka, topic, 1)] == [TxnAction.ABORT]
    for p in (0, 1):
        assert [m[1:3] for m in _markers(kafka, f"{topic}-sub__transaction_pending_ack", p)] == [
            (txn, TxnAction.ABORT)
        ]
    meta = s.coordinator(0).get(txn)
    assert meta is not None and meta.subscriptions == [(topic, "sub")]


def test_end_is_idempotent_within_retention_then_txn_is_forgotten(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig
) -> None:
    cfg = coord_config(static_tc_ids=(0,), end_txn_retention_ms=1500)
    ec = embedded(cfg)
    s = ec.service
    txn = ec.run(s.new_txn(0, 0))
    ec.run(s.end_txn(txn, TxnAction.COMMIT))
    ec.run(s.end_txn(txn, TxnAction.COMMIT))  # repeated commit succeeds
    with pytest.raises(InvalidTxnStatusError, match="actual COMMITTED"):
        ec.run(s.end_txn(txn, TxnAction.ABORT))
    with pytest.raises(InvalidTxnStatusError):
        ec.run(s.add_partitions(txn, ["x"]))
    # After the retention window the outcome is tombstoned.
    wait_until(lambda: s.coordinator(0).get(txn) is None, 10, what="txn retired")
    with pytest.raises(TransactionNotFound):
        ec.run(s.end_txn(txn, TxnAction.COMMIT))
    # ... and a restart neither resurrects it nor reuses its sequence.
    ec.stop()
    ec2 = embedded(cfg)
    with pytest.raises(TransactionNotFound):
        ec2.run(ec2.service.end_txn(txn, TxnAction.COMMIT))
    assert ec2.run(ec2.service.new_txn(0, 0)) == TxnID(0, txn.least_bits + 1)


def test_bad_requests_get_typed_errors(embedded: Factory, coord_config: ConfigFactory) -> None:
    ec = embedded(coord_config(static_tc_ids=(0,), max_txn_timeout_ms=10_000, default_txn_timeout_ms=5_000))
    s = ec.service
    with pytest.raises(TransactionNotFound):
        ec.run(s.end_txn(TxnID(0, 999), TxnAction.COMMIT))
    with pytest.raises(NotAllowedError, match="timeout"):
        ec.run(s.new_txn(0, 60_000))
    with pytest.raises(TransactionCoordinatorNotFoundError):
        ec.run(s.new_txn(2, 0))  # exists but is not owned here
    with pytest.raises(TransactionCoordinatorNotFoundError, match="does not exist"):
        ec.run(s.new_txn(99, 0))
    txn = ec.run(s.new_txn(0, 0))
    meta = s.coordinator(0).get(txn)
    assert meta is not None and meta.timeout_ms == 5_000


def test_a_txn_holds_at_most_max_txn_participants_and_a_refused_request_adds_nothing(
    embedded: Factory, coord_config: ConfigFactory, uid: str
) -> None:
    ec = embedded(coord_config(static_tc_ids=(0,), max_txn_participants=5))
    s = ec.service
    txn = ec.run(s.new_txn(0, 0))
    ec.run(s.add_partitions(txn, [f"cap_{uid}-partition-{i}" for i in range(3)]))
    with pytest.raises(NotAllowedError, match="max_txn_participants"):
        ec.run(s.add_partitions(txn, [f"cap_{uid}-partition-{i}" for i in range(3, 6)]))
    with pytest.raises(NotAllowedError, match="max_txn_participants"):
        ec.run(s.add_subscriptions(txn, [(f"cap_{uid}", f"sub{i}") for i in range(3)]))
    ec.run(s.add_partitions(txn, [f"cap_{uid}-partition-{i}" for i in range(4)]))  # 3 known + 1 new
    ec.run(s.add_subscriptions(txn, [(f"cap_{uid}", "sub0")]))
    meta = s.coordinator(0).get(txn)
    assert meta is not None and len(meta.partitions) == 4 and len(meta.subscriptions) == 1


def test_timed_out_txn_is_aborted_and_commit_fails_clearly(
    embedded: Factory, coord_config: ConfigFactory
) -> None:
    ec = embedded(coord_config(static_tc_ids=(0,)))
    s = ec.service
    txn = ec.run(s.new_txn(0, 500))
    wait_until(lambda: (m := s.coordinator(0).get(txn)) is not None and m.status is TxnStatus.ABORTED, 10)
    with pytest.raises(InvalidTxnStatusError, match="timed out"):
        ec.run(s.end_txn(txn, TxnAction.COMMIT))
    ec.run(s.end_txn(txn, TxnAction.ABORT))  # abort of an aborted txn is idempotent
    assert s.coordinator(0).stats()["timeout_count"] == 1


@pytest.mark.slow
def test_1000_txns_with_2s_timeouts_all_abort(embedded: Factory, coord_config: ConfigFactory) -> None:
    ec = embedded(coord_config(static_tc_ids=(0,)))
    s = ec.service

    async def open_many() -> list[TxnID]:
        import asyncio

        return list(await asyncio.gather(*(s.new_txn(0, 2000) for _ in range(1000))))

    txns = ec.run(open_many())
    assert len(set(txns)) == 1000
    tc = s.coordinator(0)
    wait_until(
        lambda: all((m := tc.get(t)) is not None and m.status is TxnStatus.ABORTED for t in txns),
        30,
        what="1000 timeout aborts",
    )
    assert all(tc.get(t).timed_out for t in txns)  # type: ignore[union-attr]
    assert tc.stats()["timeout_count"] == 1000
    assert tc.stats()["aborted_count"] == 1000


def test_mixed_timeouts_abort_in_deadline_order(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig
) -> None:
    cfg = coord_config(static_tc_ids=(0,))
    ec = embedded(cfg)
    s = ec.service
    ttls = [1800, 600, 1400, 1000, 200]
    txns = [ec.run(s.new_txn(0, ttl)) for ttl in ttls]
    tc = s.coordinator(0)
    wait_until(lambda: tc.stats()["timeout_count"] == len(ttls), 15)

    def aborting_in_log() -> list[int] | None:
        seqs = [
            seq
            for seq, status, timed_out in _log_statuses(kafka, cfg.log_topic, 0)
            if status == "ABORTING" and timed_out
        ]
        return seqs if len(seqs) == len(ttls) else None

    # The counter moves once the abort is logged; polled, as reads may lag a moment.
    aborting = wait_until(aborting_in_log, 15)
    by_deadline = [t.least_bits for _, t in sorted(zip(ttls, txns, strict=True))]
    assert aborting == by_deadline


def test_open_txn_timeouts_survive_restart(embedded: Factory, coord_config: ConfigFactory) -> None:
    cfg = coord_config(static_tc_ids=(0,))
    ec = embedded(cfg)
    short = ec.run(ec.service.new_txn(0, 1500))
    long = ec.run(ec.service.new_txn(0, 60_000))
    deadline = ec.service.coordinator(0).get(short).deadline_ms  # type: ignore[union-attr]
    ec.stop()
    ec2 = embedded(cfg)
    tc = ec2.service.coordinator(0)
    assert tc.get(short).deadline_ms == deadline  # type: ignore[union-attr]
    wait_until(lambda: tc.get(short).status is TxnStatus.ABORTED, 10)  # type: ignore[union-attr]
    assert time.time() * 1000 >= deadline
    assert tc.get(long).status is TxnStatus.OPEN  # type: ignore[union-attr]
    ec2.run(ec2.service.end_txn(long, TxnAction.COMMIT))


def test_garbage_in_the_log_is_skipped_and_recovery_continues(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig
) -> None:
    from kafka_store import Appender

    cfg = coord_config(static_tc_ids=(0,))
    ec = embedded(cfg)
    txn = ec.run(ec.service.new_txn(0, 0))
    ec.stop()
    app = Appender(kafka)
    app.append(cfg.log_topic, 0, b"\x00garbage", key=b"txn/0/77@0").result(10)
    app.append(cfg.log_topic, 0, b"PT\x01\x09zzz", key=b"txn/0/78@0").result(10)  # unknown version
    app.close()
    ec2 = embedded(cfg)
    tc = ec2.service.coordinator(0)
    assert tc.get(txn) is not None
    assert tc.stats()["skipped_log_records"] == 2
    assert ec2.run(ec2.service.new_txn(0, 0)) == TxnID(0, 1)


def test_consecutive_own_writes_are_confirmed_without_read_back(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"noreadback_{uid}"
    admin.ensure_topic(topic, 1)
    ec = embedded(coord_config(static_tc_ids=(0,)))
    for _ in range(20):
        txn = ec.run(ec.service.new_txn(0, 0))
        ec.run(ec.service.add_partitions(txn, [topic]))
        ec.run(ec.service.end_txn(txn, TxnAction.COMMIT))
    # Every offset since the claim is one of the owner's own acknowledged writes: no claim can
    # sit between them, so none of the 60 confirmed writes waited for the tail.
    assert ec.service.coordinator(0).stats()["read_back_count"] == 0


def test_foreign_record_before_a_write_holds_it_until_the_tail_has_read_past(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig
) -> None:
    import asyncio

    from kafka_store import Appender

    cfg = coord_config(static_tc_ids=(0,))
    ec = embedded(cfg)
    first = ec.run(ec.service.new_txn(0, 0))
    tc = ec.service.coordinator(0)
    held: list[Any] = []
    deliver = tc.on_records
    tc.on_records = held.extend  # type: ignore[method-assign]  # the tail's batches wait here
    app = Appender(kafka)
    app.append(cfg.log_topic, 0, b"\x00not ours", key=b"txn/0/99@0").result(10)
    app.close()
    assert ec._loop is not None
    pending = asyncio.run_coroutine_threadsafe(ec.service.new_txn(0, 0), ec._loop.loop)
    # Its record lands after one we did not write: it may be a newer owner's claim, so the
    # NEW_TXN answer waits until the tail has read that record.
    time.sleep(1.0)
    assert not pending.done()
    assert tc.stats()["read_back_count"] == 1
    tc.on_records = deliver  # type: ignore[method-assign]
    ec._loop.loop.call_soon_threadsafe(deliver, list(held))
    second = pending.result(10)
    assert second == TxnID(0, first.least_bits + 1)
    ec.run(ec.service.end_txn(second, TxnAction.ABORT))  # past the gap: own writes again
    assert tc.stats()["read_back_count"] == 1
    assert tc.stats()["state"] == "Ready"


class HeldWrite:
    """The TC's first log write of a transaction state that ``matches`` waits for ``gate`` (set on the
    loop), then fails as a timed-out Kafka write would, or is written (``fail=False``)."""

    def __init__(self, tc: TransactionCoordinator, matches: Callable[[TxnMeta], bool], *, fail: bool) -> None:
        self.gate = asyncio.Event()
        self.held = 0
        self._write = tc._write_meta
        self._matches = matches
        self._fail = fail
        tc._write_meta = self  # type: ignore[method-assign]

    async def __call__(self, meta: TxnMeta, *, confirm: bool = True) -> None:
        if self.held or not self._matches(meta):
            return await self._write(meta, confirm=confirm)
        self.held += 1
        await self.gate.wait()
        if self._fail:
            raise PersistenceError("TC 0: transaction log write failed: Local: Message timed out")
        await self._write(meta, confirm=confirm)

    async def call_and_retry(
        self, call: Callable[[], Awaitable[None]], what: str
    ) -> list[BaseException | None]:
        """``call``, and a retry of it while its write is held: the retry must not be answered
        before that write is done. Then the write goes on (or fails); both outcomes."""
        first = asyncio.create_task(call())
        await asyncio.sleep(0.2)
        retry = asyncio.create_task(call())  # e.g. after a client timeout
        await asyncio.sleep(0.2)
        assert not retry.done(), f"{what} answered while the write it waits for was in flight"
        self.gate.set()
        return await asyncio.gather(first, retry, return_exceptions=True)


def _txn_on_a_partition(ec: EmbeddedCoordinator, topic: str) -> TxnID:
    """A new transaction of TC 0 with ``topic``'s partition 0 registered."""
    s = ec.service
    txn = ec.run(s.new_txn(0, 0))
    ec.run(s.add_partitions(txn, [f"{topic}-partition-0"]))
    return txn


def test_an_end_txn_retry_after_a_failed_decision_write_is_not_answered_before_the_decision_is_logged(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"data_{uid}"
    admin.ensure_topic(topic, 1)
    cfg = coord_config(static_tc_ids=(0,))
    ec = embedded(cfg)
    s = ec.service
    tc = s.coordinator(0)
    txn = _txn_on_a_partition(ec, topic)
    held = HeldWrite(tc, lambda m: m.status is TxnStatus.COMMITTING, fail=True)
    # The failed write may have landed ("possibly persisted"): the TC writes the decision again until
    # it is confirmed (never back to OPEN: session 33), and answers both calls after that.
    results = ec.run(held.call_and_retry(lambda: s.end_txn(txn, TxnAction.COMMIT), "END_TXN"))
    assert results == [None, None]
    assert tc.get(txn).status is TxnStatus.COMMITTED  # type: ignore[union-attr]
    ec.run(s.end_txn(txn, TxnAction.COMMIT))  # asked again: the same outcome
    assert "COMMITTING" in [
        st for seq, st, _ in _log_statuses(kafka, cfg.log_topic, 0) if seq == txn.least_bits
    ]
    assert [m[1:3] for m in _markers(kafka, topic, 0)] == [(txn, TxnAction.COMMIT)]
    ec.stop()
    ec2 = embedded(cfg)  # the commit that was reported survives a restart
    tc2 = ec2.service.coordinator(0)
    wait_until(lambda: tc2.get(txn).status is TxnStatus.COMMITTED, 10)  # type: ignore[union-attr]


def test_a_cancelled_end_txn_request_still_writes_markers_and_ends_the_txn(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"data_{uid}"
    admin.ensure_topic(topic, 1)
    ec = embedded(coord_config(static_tc_ids=(0,)))
    s = ec.service
    tc = s.coordinator(0)
    txn = _txn_on_a_partition(ec, topic)
    held = HeldWrite(tc, lambda m: m.status is TxnStatus.COMMITTING, fail=False)

    async def commit_then_disconnect() -> None:
        request = asyncio.create_task(s.end_txn(txn, TxnAction.COMMIT))
        await asyncio.sleep(0.2)
        assert held.held == 1  # the COMMITTING record is in flight
        request.cancel()  # what the server does to a closed connection's requests
        await asyncio.gather(request, return_exceptions=True)
        held.gate.set()

    ec.run(commit_then_disconnect())
    wait_until(lambda: tc.get(txn).status is TxnStatus.COMMITTED, 10)  # type: ignore[union-attr]
    assert [m[1:3] for m in _markers(kafka, topic, 0)] == [(txn, TxnAction.COMMIT)]
    assert tc.low_watermark() == txn.least_bits
    ec.run(s.end_txn(txn, TxnAction.COMMIT))  # the client's retry on a new connection


@pytest.mark.parametrize("kind", ["partition", "subscription"])
def test_a_repeated_add_partition_is_answered_only_once_the_partition_is_logged(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str, kind: str
) -> None:
    topic = f"data_{uid}"
    admin.ensure_topic(topic, 1)
    admin.ensure_topic(f"{topic}-sub__transaction_pending_ack", 1)
    cfg = coord_config(static_tc_ids=(0,))
    ec = embedded(cfg)
    s = ec.service
    txn = ec.run(s.new_txn(0, 0))
    held = HeldWrite(s.coordinator(0), lambda m: m.status is TxnStatus.OPEN, fail=True)

    def add() -> Any:
        if kind == "partition":
            return s.add_partitions(txn, [f"{topic}-partition-0"])
        return s.add_subscriptions(txn, [(topic, "sub")])

    results = ec.run(held.call_and_retry(add, "ADD"))
    assert [type(r) for r in results] == [PersistenceError, PersistenceError]
    ec.run(add())  # the next retry writes it
    ec.stop()  # the coordinator dies before any later write of the transaction
    ec2 = embedded(cfg)
    meta = ec2.service.coordinator(0).get(txn)
    assert meta is not None
    assert (meta.partitions, meta.subscriptions) == (
        ([f"{topic}-partition-0"], []) if kind == "partition" else ([], [(topic, "sub")])
    )
    ec2.run(ec2.service.end_txn(txn, TxnAction.COMMIT))
    marked = topic if kind == "partition" else f"{topic}-sub__transaction_pending_ack"
    assert [m[1:3] for m in _markers(kafka, marked, 0)] == [(txn, TxnAction.COMMIT)]


def _compacted(kafka: KafkaConfig, topic: str, tc: int) -> list[Any]:
    """What compaction may leave of a TC's log: the last record of each key, tombstones dropped."""
    last = {rec.key: rec for rec in read_range(kafka, topic, tc)}
    return sorted((r for r in last.values() if r.value is not None), key=lambda r: r.offset)


def test_a_deposed_owners_late_write_never_makes_a_later_owner_forget_an_open_txn(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """A late write of a deposed owner goes under the key of that owner's own valid records of the
    transaction. Neither the next owners' tombstone of that stale key nor compaction (which keeps a
    key's last record) may take the transaction's valid state with it."""
    from kafka_store import Appender
    from pulsar_txn.coordinator.fold import TcLogFold
    from pulsar_txn.coordinator.records import txn_key

    topic = f"latewrite_{uid}"
    admin.ensure_topic(topic, 2)
    cfg = coord_config(static_tc_ids=(0,), max_txn_timeout_ms=3_600_000)
    a = embedded(cfg)
    txn = a.run(a.service.new_txn(0, 3_600_000))
    a.run(a.service.add_partitions(txn, [f"{topic}-partition-0"]))
    tc_a = a.service.coordinator(0)
    meta_a, epoch_a = tc_a.get(txn).copy(), tc_a.epoch  # type: ignore[union-attr]
    a.stop()
    b = embedded(cfg)  # claims TC 0: owner A is deposed
    # A, not knowing yet, logs one more ADD under its own epoch: byte for byte what its _write_meta
    # writes, under the same key as its valid records of this transaction.
    late = meta_a.copy()
    late.partitions.append(f"{topic}-partition-1")
    app = Appender(kafka)
    app.append(cfg.log_topic, 0, late.encode(epoch_a), key=txn_key(txn, epoch_a)).result(10)
    app.close()
    b.stop()
    c = embedded(cfg)  # sees the late write as stale and tombstones its key
    assert c.service.coordinator(0).get(txn).status is TxnStatus.OPEN  # type: ignore[union-attr]
    wait_until(
        lambda: any(
            r.key == txn_key(txn, epoch_a) and r.value is None for r in read_range(kafka, cfg.log_topic, 0)
        ),
        10,
        what="the stale key's tombstone",
    )
    c.stop()
    d = embedded(cfg)
    tc_d = d.service.coordinator(0)
    meta = tc_d.get(txn)
    assert meta is not None and meta.status is TxnStatus.OPEN
    assert meta.partitions == [f"{topic}-partition-0"]  # the stale ADD is not part of it
    assert tc_d.low_watermark() < txn.least_bits
    # Compaction keeps each key's last record: the open transaction survives, and its sequence is
    # never handed out again.
    fold = TcLogFold(0)
    for rec in _compacted(kafka, cfg.log_topic, 0):
        fold.apply(rec.offset, rec.key, rec.value)
    assert fold.txns[txn.least_bits].status is TxnStatus.OPEN and fold.next_seq > txn.least_bits
    d.run(d.service.end_txn(txn, TxnAction.COMMIT))
    assert [(t, a) for _o, t, a, _l in _markers(kafka, topic, 0)] == [(txn, TxnAction.COMMIT)]
    assert _markers(kafka, topic, 1) == []


def test_participants_no_marker_can_reach_are_refused_or_given_up_so_the_end_completes(
    embedded: Factory, coord_config: ConfigFactory, admin: TopicAdmin, uid: str
) -> None:
    """A name that is no topic is refused when added; a partition beyond the topic's partitions
    (e.g. deleted and created again smaller) is given up after the grace period, as a deleted topic
    is: the end completes and the low watermark moves on."""
    from pulsar_txn.errors import InvalidTopicName

    topic = f"fewer_{uid}"
    admin.ensure_topic(topic, 1)
    ec = embedded(coord_config(static_tc_ids=(0,), end_missing_topic_grace_ms=500))
    s = ec.service
    txn = ec.run(s.new_txn(0, 0))
    with pytest.raises(InvalidTopicName):
        ec.run(s.add_partitions(txn, ["bad name!"]))
    with pytest.raises(InvalidTopicName, match="pending-ack log"):
        ec.run(s.add_subscriptions(txn, [(topic, "bad sub/x")]))
    ec.run(s.add_partitions(txn, [f"{topic}-partition-0", f"{topic}-partition-7"]))
    later = ec.run(s.new_txn(0, 0))
    ec.run(s.end_txn(later, TxnAction.COMMIT))
    ec.run(asyncio.wait_for(s.end_txn(txn, TxnAction.COMMIT), 30))
    tc = s.coordinator(0)
    assert tc.get(txn).status is TxnStatus.COMMITTED  # type: ignore[union-attr]
    assert [(t, a) for _o, t, a, _l in _markers(ec.kafka, topic, 0)][-1] == (txn, TxnAction.COMMIT)
    wait_until(lambda: tc.low_watermark() >= later.least_bits, 10, what="low watermark past both")


def test_a_tc_recovers_past_a_well_formed_but_impossible_log_record(
    embedded: Callable[..., EmbeddedCoordinator],
    coord_config: Callable[..., CoordinatorConfig],
    kafka: KafkaConfig,
) -> None:
    """A TxnMeta with a negative sequence (valid Avro, impossible content: forged or a bug's) is
    skipped and counted at recovery; it crashed the fold, and the TC never became ready."""
    cfg = coord_config(static_tc_ids=(0,), recovery_timeout_ms=8000)
    ec = embedded(cfg)
    first = ec.run(ec.service.new_txn(0, 0))
    ec.stop()
    fields = TxnMeta(TxnID(0, 1), TxnStatus.OPEN, 1000, 0, 1000, 0).to_fields(0)
    fields["seq"] = -1
    app = Appender(kafka)
    try:
        app.append(cfg.log_topic, 0, TXN_META.encode(fields), key=b"txn/0/-1@0").result(30)
    finally:
        app.close()
    again = embedded(cfg, wait=False)
    again.wait_ready(20)
    assert again.run(again.service.new_txn(0, 0)).least_bits > first.least_bits

    async def skipped() -> int:
        return int(again.service.coordinator(0).stats()["skipped_log_records"])

    assert again.run(skipped()) >= 1
