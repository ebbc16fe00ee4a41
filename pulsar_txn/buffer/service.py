"""The transaction-buffer service: keeps TB snapshots current and resolves hanging transactions.

Runs in the coordinator process (or on its own). Data partitions are shared among instances through
the ``tb_group`` consumer group. Readers never depend on this service for correctness (they compute
the same state from the partition); it only makes their recovery fast and un-pins partitions where a
transaction was left hanging.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kafka_store import Appender, GroupReader, KafkaConfig, PartitionReader, StoreError, TopicAdmin
from kafka_store.lograte import THROTTLE
from pulsar_txn.buffer.marker import TxnMarker, marker_record
from pulsar_txn.buffer.reader import scan
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.fold import ended_as, read_tc_log
from pulsar_txn.naming import TopicName, is_data_topic
from pulsar_txn.txnid import TxnAction, TxnID

log = logging.getLogger(__name__)

_PRUNE_EVERY_S = 60.0  # retention deletes in segments, minutes apart at least
# A partition with plain records only changes no state, yet a reader folds every record past the last
# snapshot: one is taken (at the snapshot interval) once this many records were folded since.
_PLAIN_ADVANCE = 10_000
_RETRY_MAX_S = 60.0  # back-off cap for a snapshot that failed (or could not be checked)

TP = tuple[str, int]


def _same_partition(registered: str, topic: str, partition: int) -> bool:
    try:
        name = TopicName.parse(registered)
    except ValueError:
        return False
    return name.kafka_topic == topic and name.kafka_partition == partition


@dataclass
class _Owned:
    state: TxnBufferState
    snapshot_changes: int = 0
    snapshot_at: float = field(default_factory=time.monotonic)
    last_snapshot_ms: int | None = None  # None until the first snapshot (no metrics sample either)
    last_snapshot_offset: int | None = None
    recovered_from: int | None = None
    # Its snapshot could not be loaded: replayed from the partition's start until it reaches its end.
    replaying: bool = False
    # Replaying because the load failed: the stored snapshot (of unknown offset) may be ahead of the
    # fold, so none is written until the replay has caught up (one written meanwhile set the stored
    # snapshot back, and stayed the latest if the service stopped mid-replay).
    snapshot_held: bool = False
    # (offset, fingerprint) of the last record folded at the last snapshot or load: checked before the
    # next snapshot (see TransactionBufferService._same_partition).
    checkpoint: tuple[int, int] = (-1, 0)
    # Hanging transactions whose marker this service wrote, until its fold has read the marker back.
    resolved: set[TxnID] = field(default_factory=set)
    # After a failed snapshot (or an unanswered check): not before retry_at, with a doubling back-off.
    retry_at: float = 0.0
    backoff: float = 0.0

    def snapshot_failed(self) -> None:
        self.backoff = min(_RETRY_MAX_S, max(1.0, 2 * self.backoff))
        self.retry_at = time.monotonic() + self.backoff


class TransactionBufferService:
    def __init__(self, kafka: KafkaConfig, config: CoordinatorConfig, *, instance: str = "") -> None:
        self._kafka = kafka
        self._config = config
        self._secret = config.marker_key
        self._instance = instance
        self._owned: dict[TP, _Owned] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._appender: Appender | None = None
        self._store: SnapshotStore | None = None
        self._probe: PartitionReader | None = None  # reads checkpoint records (see _same_partition)
        self._starts: PartitionReader | None = None  # log-start offsets, for pruning (see _prune)
        self._refold: set[TP] = set()  # partitions found to be new ones: read again from their start
        # When each open transaction was first seen open in each partition: kept across reassignments
        # (an eager rebalance revokes and assigns every partition; a clock kept per assignment never
        # reached the hanging threshold while the group kept rebalancing).
        self._first_seen: dict[tuple[TP, TxnID], float] = {}
        self.snapshots_written = 0
        self.hanging_resolved = 0
        # Partitions whose snapshot failed to load, in all and per partition (kept across
        # reassignments), and the last error of each.
        self.recovery_failures = 0
        self._recovery_failures: dict[TP, int] = {}
        self._recovery_errors: dict[TP, str] = {}
        self._stats: dict[str, Any] = {"partitions": {}}  # refreshed by the service thread only
        # The topics at the last refresh (None before the first): a partition of a topic missing
        # there is never snapshotted again, or a deleted topic's snapshot records would come back.
        self._topics: set[str] | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._appender = Appender(self._kafka)
        self._store = SnapshotStore(
            self._kafka,
            topic=self._config.snapshot_topic,
            partitions=self._config.snapshot_partitions,
            segment_size=self._config.tb_snapshot_segment_size,
            appender=self._appender,
        )
        self._store.ensure_topic()
        self._thread = threading.Thread(target=self._run, name="tb-service", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)
        if self._appender is not None:
            self._appender.close()

    # ------------------------------------------------------------------ main loop
    def _run(self) -> None:
        cfg = self._config
        reader = GroupReader(
            self._kafka,
            cfg.tb_group,
            self._on_assign,
            self._on_revoke,
            session_timeout_ms=cfg.group_session_timeout_ms,
            instance_id=cfg.group_instance_id,
            metadata_refresh_ms=cfg.tb_topic_refresh_ms,  # partitions added to a topic are taken as soon
            on_lost=self._on_lost,
        )
        admin = TopicAdmin(self._kafka)
        wanted = re.compile(cfg.tb_topic_pattern)
        next_refresh = next_stats = 0.0
        next_prune = time.monotonic() + _PRUNE_EVERY_S
        next_hanging = time.monotonic() + cfg.tb_hanging_check_after_ms / 2000
        try:
            while not self._stop.is_set():
                if reader.fatal is not None:
                    # Fenced (another process runs with this group_instance_id): rejoining would fence
                    # it in turn. Idle; the error was logged, and an operator must fix the config.
                    self._stop.wait(1.0)
                    continue
                now = time.monotonic()
                if now >= next_refresh:
                    try:
                        topics = admin.list_topics()
                        self._topics = set(topics)
                        self._drop_deleted()
                        reader.subscribe([t for t in topics if is_data_topic(t) and wanted.fullmatch(t)])
                    except Exception as exc:  # broker hiccup: keep serving what we have
                        log.warning("TB service: listing topics failed: %s", exc)
                    next_refresh = now + cfg.tb_topic_refresh_ms / 1000
                # A recreated partition's fresh state folds from the partition's start (sought below),
                # not from the record or end seen here: the rest of this poll is not for it.
                refolding: set[TP] = set()
                for msg in reader.poll_batch(5000, 0.1):
                    tp = (msg.topic(), msg.partition())
                    owned = self._owned.get(tp)
                    if owned is not None and tp not in refolding:
                        offset = msg.offset()
                        if offset < owned.state.scanned_to:
                            self._recreated(tp, f"it restarts at offset {offset}")
                            refolding.add(tp)
                            continue
                        owned.state.apply(offset, msg.headers(), msg.value())
                for tp, end in list(reader.eof.items()):
                    owned = self._owned.get(tp)
                    if owned is not None and tp not in refolding:
                        if end < owned.state.scanned_to:
                            self._recreated(tp, f"it ends at offset {end}")
                            refolding.add(tp)
                            continue
                        if end > owned.state.scanned_to:
                            owned.state.scanned_to = end
                        owned.replaying = owned.snapshot_held = False
                if reader.caught_up():
                    # Snapshots may lag a little; an idle service must not keep fetching.
                    reader.pause_all()
                    self._stop.wait(0.2)
                    reader.resume_all()
                self._refold |= refolding
                self._maybe_snapshot()
                while self._refold:
                    tp = self._refold.pop()
                    if tp in self._owned:
                        reader.seek_to_start(*tp)
                if time.monotonic() >= next_stats:
                    self._refresh_stats()
                    next_stats = time.monotonic() + 0.5
                if time.monotonic() >= next_hanging:
                    self._check_hanging()
                    next_hanging = time.monotonic() + cfg.tb_hanging_check_after_ms / 2000
                if time.monotonic() >= next_prune:
                    self._prune()
                    self._warn_compacted(admin)
                    next_prune = time.monotonic() + _PRUNE_EVERY_S
        except BaseException:
            # Stderr alone (the thread's excepthook) is easy to miss in a service's logs.
            log.exception("TB service stopped: it snapshots and resolves nothing any more")
            raise
        finally:
            for tp in list(self._owned):
                if self._exists(tp[0]):
                    self._snapshot(tp, self._owned[tp])
            reader.close()
            admin.close()
            if self._starts is not None:
                self._starts.close()
                self._starts = None
            if self._probe is not None:
                self._probe.close()
                self._probe = None

    def _on_assign(self, partitions: list[TP]) -> dict[TP, int]:
        starts: dict[TP, int] = {}
        assert self._store is not None
        try:
            snapshots = self._store.load_many(
                partitions, num_tcs=self._config.num_tcs, marker_secret=self._secret
            )
            failed = False
        except Exception as exc:
            # Raised out of this callback, the error would leave ``poll`` and end the service thread:
            # no partition would be snapshotted or have its hanging transactions resolved any more.
            # A snapshot is only a cache: the state at an offset is a function of the records below
            # it, so replaying the partition from its start (as for one never snapshotted) is always
            # correct, only slower; and it does not hold the rebalance up with retries.
            log.error(
                "TB service: loading the snapshots of %s failed (%s: %s); replaying them from their start",
                ", ".join(f"{t}[{p}]" for t, p in partitions),
                type(exc).__name__,
                exc,
                exc_info=not isinstance(exc, StoreError),  # a broker error needs no traceback; a bug does
            )
            snapshots = dict.fromkeys(partitions)
            failed = True
            self.recovery_failures += len(partitions)
            for tp in partitions:
                self._recovery_failures[tp] = self._recovery_failures.get(tp, 0) + 1
                self._recovery_errors[tp] = f"{type(exc).__name__}: {exc}"
        for tp in partitions:
            loaded = snapshots.get(tp)
            state = (
                loaded[0]
                if loaded
                else TxnBufferState(*tp, num_tcs=self._config.num_tcs, marker_secret=self._secret)
            )
            owned = _Owned(
                state,
                snapshot_changes=state.changes,
                recovered_from=state.scanned_to if loaded else None,
                replaying=failed,
                snapshot_held=failed,
            )
            if loaded:
                owned.last_snapshot_ms, owned.last_snapshot_offset = loaded[1], state.scanned_to
                owned.checkpoint = state.anchor()
            with self._lock:
                self._owned[tp] = owned
            starts[tp] = state.scanned_to
        log.info("TB service: took %d partitions", len(partitions))
        return starts

    def _on_revoke(self, partitions: list[TP]) -> None:
        for tp in partitions:
            owned = self._owned.get(tp)
            if owned is not None and self._exists(tp[0]):
                self._snapshot(tp, owned)
            with self._lock:
                self._owned.pop(tp, None)

    def _on_lost(self, partitions: list[TP]) -> None:
        """The membership ended for good (fenced): the partitions may be another owner's already, so
        no snapshot of them is written; they are just dropped."""
        with self._lock:
            for tp in partitions:
                self._owned.pop(tp, None)
        # Now: the loop idles from here on and rebuilds them no more (a fenced node listed the
        # partitions its successor serves, with frozen numbers, in its stats and /metrics).
        self._refresh_stats()

    def _same_partition(self, tp: TP, owned: _Owned) -> bool | None:
        """Before a snapshot: is the record last folded at the previous snapshot (or load) still there?
        A topic deleted and created again between two topic refreshes, whose new partition grew past
        what was folded before it was fetched, shows no other sign: the fold went on into the new
        partition's records as if they followed the old ones. None: the broker did not answer."""
        offset, fingerprint = owned.checkpoint
        if offset < 0:
            return True
        assert self._store is not None
        if self._probe is None:
            self._probe = PartitionReader(self._kafka)
        return self._store.matches(self._probe, tp[0], tp[1], offset, fingerprint)

    def _recreated(self, tp: TP, why: str) -> _Owned:
        """The partition is not the one folded (``why``: it holds records, or ends, below what was
        folded, though a Kafka partition never shrinks; or a record folded before has changed): its
        topic was deleted and created again between two topic refreshes. The old state describes
        other records: fold the new partition from scratch, and tombstone the old snapshot so no
        reader trusts it meanwhile."""
        log.warning(
            "TB service: %s[%d] is not the partition folded up to %d (%s): the topic was deleted and "
            "created again; folding it anew",
            tp[0],
            tp[1],
            self._owned[tp].state.scanned_to,
            why,
        )
        assert self._store is not None
        try:
            self._store.forget(tp[0], [tp[1]])
        except Exception as exc:  # the anchor check still guards readers against most old snapshots
            log.warning("TB service: removing the old snapshot of %s[%d] failed: %s", tp[0], tp[1], exc)
        fresh = _Owned(
            TxnBufferState(*tp, num_tcs=self._config.num_tcs, marker_secret=self._secret), replaying=True
        )
        with self._lock:
            self._owned[tp] = fresh
        return fresh

    def _exists(self, topic: str) -> bool:
        return self._topics is None or topic in self._topics

    def _drop_deleted(self) -> None:
        """Forget the partitions of topics deleted since they were assigned, and tombstone their
        snapshot records: ``Client.delete_topic`` does so too, but a snapshot of ours may have
        landed after its tombstones."""
        gone: dict[str, list[int]] = {}
        for topic, partition in list(self._owned):
            if not self._exists(topic):
                gone.setdefault(topic, []).append(partition)
        if self._store is not None and self._topics is not None:
            self._store.drop_cached(self._exists)  # also of partitions revoked before the deletion
        for topic, partitions in gone.items():
            with self._lock:
                for p in partitions:
                    self._owned.pop((topic, p), None)
            assert self._store is not None
            try:
                self._store.forget(topic, partitions)
            except Exception as exc:  # the records only cost space; the anchor check ignores them
                log.warning("TB service: removing the snapshots of deleted %s failed: %s", topic, exc)
            log.info("TB service: %s was deleted; its partitions %s are dropped", topic, partitions)

    # ------------------------------------------------------------------ snapshots
    def _prune(self) -> None:
        """Forget the aborted transactions and discarded ranges whose records retention has deleted
        (below each partition's log-start offset), as readers do: the service's state, stats and
        snapshots stay bounded. A pruned state is snapshotted again (it counts as a change)."""
        for tp, owned in list(self._owned.items()):
            if owned.replaying or not self._exists(tp[0]):
                continue
            if self._starts is None:
                self._starts = PartitionReader(self._kafka)  # log-start offsets: made at first use
            try:
                low, _high = self._starts.watermarks(*tp)
            except StoreError as exc:  # tried again at the next round
                log.debug("TB service: log start of %s[%d] unknown: %s", tp[0], tp[1], exc)
                continue
            state = owned.state
            before = (len(state.aborted), len(state.discarded))
            state.prune(low)
            if (len(state.aborted), len(state.discarded)) != before:
                state.changes += 1

    def _warn_compacted(self, admin: TopicAdmin) -> None:
        """Logs an error for each topic holding transactional records that is compacted now (its
        policy switched since: producers refuse transactional sends to a compacted topic when they
        begin). The broker's cleaner keeps the latest record of a key, so a committed record shadowed
        by a later aborted one of the same key is lost (invariant 3), and markers may go. Nothing
        here can stop that: an operator must switch the policy back."""
        with self._lock:
            topics = sorted(
                {
                    tp[0]
                    for tp, owned in self._owned.items()
                    if owned.state.counters.markers or owned.state.ongoing
                }
            )
        try:
            policies = admin.cleanup_policies(topics)
        except StoreError as exc:
            log.debug("TB service: cleanup policies not read: %s", exc)
            return
        for topic, policy in policies.items():
            if "compact" in policy:
                THROTTLE.log(
                    log,
                    logging.ERROR,
                    (topic, -1, "compacted-txn-topic"),
                    "topic %s holds transactional records but has cleanup.policy=%s: compaction may delete"
                    " committed records (a later aborted record of the same key shadows them) and markers;"
                    " set the policy back to delete",
                    topic,
                    policy,
                )

    def _maybe_snapshot(self) -> None:
        cfg = self._config
        now = time.monotonic()
        for tp, owned in list(self._owned.items()):
            if not self._exists(tp[0]):
                continue  # dropped at the next refresh
            if now < owned.retry_at:
                continue  # the last attempt failed: backing off
            pending = owned.state.changes - owned.snapshot_changes
            since = owned.last_snapshot_offset if owned.last_snapshot_offset is not None else 0
            due = now - owned.snapshot_at >= cfg.tb_snapshot_interval_ms / 1000
            if (
                pending >= cfg.tb_snapshot_max_changes
                or (pending > 0 and due)
                or (due and not owned.replaying and owned.state.scanned_to - since >= _PLAIN_ADVANCE)
            ):
                self._snapshot(tp, owned)

    def _snapshot(self, tp: TP, owned: _Owned) -> None:
        assert self._store is not None
        if owned.snapshot_held:
            return
        same = self._same_partition(tp, owned)
        if same is None:  # the broker did not answer: no sign of a new partition; try again later
            owned.snapshot_failed()
            return
        if not same:
            self._recreated(tp, f"the record at offset {owned.checkpoint[0]} changed")
            self._refold.add(tp)  # the loop seeks its reader back to the partition's start
            return
        try:
            self._store.write(owned.state).result(30)
        except Exception as exc:  # a missed snapshot only slows recovery down; try again later
            log.warning("TB service: snapshot of %s[%d] failed: %s", tp[0], tp[1], exc)
            owned.snapshot_failed()
            return
        owned.backoff = owned.retry_at = 0.0
        owned.snapshot_changes = owned.state.changes
        owned.checkpoint = owned.state.anchor()
        owned.snapshot_at = time.monotonic()
        owned.last_snapshot_ms = int(time.time() * 1000)
        owned.last_snapshot_offset = owned.state.scanned_to
        self.snapshots_written += 1

    # ------------------------------------------------------------------ hanging transactions
    def _check_hanging(self) -> None:
        now = time.monotonic()
        after = self._config.tb_hanging_check_after_ms / 1000
        suspects: dict[int, list[tuple[TP, TxnID]]] = {}
        owned_now = dict(self._owned)
        for tp, owned in owned_now.items():
            for txn in owned.state.ongoing:
                if txn in owned.resolved:
                    continue  # its marker is written; the fold has not read it back yet
                seen = self._first_seen.setdefault((tp, txn), now)
                if now - seen >= after:
                    suspects.setdefault(txn.most_bits, []).append((tp, txn))
            owned.resolved &= owned.state.ongoing.keys()
        # Forget transactions that ended (not merely absent from ``ongoing``: a partition reassigned
        # and refolding from an older snapshot has not reached them yet, and their clock must go on),
        # and those of partitions not owned now after a while (they may come back in a rebalance).
        keep_unowned = max(600.0, 10 * after)
        for key, seen in list(self._first_seen.items()):
            holder = owned_now.get(key[0])
            ended = holder is not None and holder.state.has_ended(key[1])
            stale = (holder is None or key[1] not in holder.state.ongoing) and now - seen > keep_unowned
            if ended or stale:
                del self._first_seen[key]
        for tc_id, items in suspects.items():
            try:
                self._resolve(tc_id, items)
            except Exception as exc:  # retried at the next check
                log.warning("TB service: resolving hanging txns of TC %d failed: %s", tc_id, exc)

    def _resolve(self, tc_id: int, items: list[tuple[TP, TxnID]]) -> None:
        fold = read_tc_log(self._kafka, self._config.log_topic, tc_id, self._secret)
        ahead: dict[TP, TxnBufferState] = {}
        for (topic, partition), txn in items:
            ended = ended_as(fold, txn)
            if ended is None:
                continue  # open or ending (the TC will write the marker), or not allocated yet
            # Our fold may lag the partition: the TC's own marker (written before it logged the end,
            # so before the read above) may be there unread. A second marker, or, once the TC has
            # forgotten the transaction, the opposite one, must not follow it.
            tp = (topic, partition)
            if tp not in ahead:
                ahead[tp] = self._fold_ahead(tp)
            if ahead[tp].has_ended(txn):
                continue
            meta = fold.txns.get(txn.least_bits)
            registered = meta is not None and any(
                _same_partition(x, topic, partition) for x in meta.partitions
            )
            action = TxnAction.COMMIT if registered and ended is TxnAction.COMMIT else TxnAction.ABORT
            self._write_marker(topic, partition, txn, action)
            owned = self._owned.get((topic, partition))
            if owned is not None:
                owned.resolved.add(txn)
            self.hanging_resolved += 1
            log.warning(
                "TB service: hanging %s in %s[%d] resolved with %s", txn, topic, partition, action.name
            )

    def _fold_ahead(self, tp: TP) -> TxnBufferState:
        """What ``tp`` holds past our fold of it, up to its end now: the transactions that ended
        there (raises ``StoreError``: the resolution is retried at the next check)."""
        state = TxnBufferState(*tp, num_tcs=self._config.num_tcs, marker_secret=self._secret)
        owned = self._owned.get(tp)
        state.scanned_to = owned.state.scanned_to if owned is not None else 0
        scan(state, self._kafka)
        return state

    def _write_marker(self, topic: str, partition: int, txn: TxnID, action: TxnAction) -> None:
        assert self._appender is not None
        marker = TxnMarker(txn, action, -1, int(time.time() * 1000))
        value, headers = marker_record(marker, topic, partition, self._secret)
        self._appender.append(topic, partition, value, headers=headers).result(30)

    # ------------------------------------------------------------------ stats
    def _refresh_stats(self) -> None:
        partitions = {
            f"{t}-partition-{p}": {
                **o.state.stats(),
                "recovery_state": "Replaying" if o.replaying else "Ready",
                "recovered_from_snapshot_offset": o.recovered_from,
                "recovery_failures": self._recovery_failures.get((t, p), 0),
                "last_recovery_error": self._recovery_errors.get((t, p)),
                "last_snapshot_time": o.last_snapshot_ms,
                "last_snapshot_offset": o.last_snapshot_offset,
            }
            for (t, p), o in sorted(self._owned.items())
        }
        stats = {
            "snapshots_written": self.snapshots_written,
            "hanging_resolved": self.hanging_resolved,
            "recovery_failures": self.recovery_failures,
            "partitions": partitions,
        }
        with self._lock:
            self._stats = stats

    def stats(self) -> dict[str, Any]:
        """Per owned partition, as ``pulsar-admin transactions transaction-buffer-stats`` shows it
        (refreshed twice a second by the service thread)."""
        with self._lock:
            return self._stats
