"""Read-committed reading of partitions through the transaction-buffer filter.

``CommittedReader`` keeps, per partition, the TB state (recovered from the latest snapshot, then kept
current by scanning) and a delivery position. Records scanned at or after the delivery position wait
in a bounded window until ``max_read_position`` passes them, so in the common case every record is
read from Kafka once. A reader whose position is behind its partition's snapshot scans from the
position too: the records up to the snapshot are folded in already and only wait for delivery, so the
one scanner reads them (no second consumer per partition). When the window would grow past its bound
(a transaction open for a long time while traffic continues) it is dropped and those records are
fetched again later by a gap reader: memory stays bounded whatever the partition's length.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from kafka_store import (
    KafkaConfig,
    PartitionReader,
    StoredRecord,
    StoreError,
    TopicAdmin,
    TopicNotFoundError,
    end_offsets,
    read_range,
    watermark_offsets,
)
from pulsar_txn.buffer.marker import CTL_HEADER
from pulsar_txn.buffer.snapshot import SnapshotStore, still_the_partition
from pulsar_txn.buffer.state import TxnBufferState, Verdict
from pulsar_txn.coordinator.fold import ended_as, read_tc_log
from pulsar_txn.errors import from_store_error
from pulsar_txn.naming import DEFAULT_LOG_TOPIC
from pulsar_txn.txnid import TxnAction, TxnID

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_MAX_GAP_READERS = 4
# A gap reader that has read nothing for this long asks the broker whether retention deleted the rest
# of the gap (the only reason, besides a compaction gap at the partition's end, to skip records).
_GAP_STALL_S = 10.0
# How often a reader looks for transactions held open below the log start (see _end_deleted).
_DELETED_CHECK_S = 5.0
# A partition whose end has not moved below what its state scanned is checked against the record at
# the state's anchor this often (a topic deleted and created again under its name).
_SAME_CHECK_EVERY_S = 30.0
# Records per partition the client keeps fetched ahead of the scans (librdkafka's default: 100,000).
_PREFETCH_RECORDS = 10_000


UNKNOWN_NUM_TCS = 1 << 16
"""The TC count a reader assumes when it cannot learn it: every TxnID is then taken as real."""


_offset_of = attrgetter("offset")


@dataclass
class BufferOptions:
    num_tcs: int = UNKNOWN_NUM_TCS
    marker_secret: bytes | None = field(default=None, repr=False)
    window_max_records: int = 50_000
    # And at most this many value bytes: behind a transaction that stays open, a window of large
    # records would otherwise hold up to window_max_records of them (50 GB of 1 MB records).
    window_max_bytes: int = 64 * 1024 * 1024
    # Records taken from the client per scan. Small: every record read lives from its scan until the
    # application drops it, and a scan of 5,000 kept ~15,000 tracked objects alive across dozens of
    # young collections, which promoted them and set off full collections (a 200k-record read spent
    # 0.14 s of its 0.74 s of CPU in the collector; 0.02 s in scans of 500, where it reads fastest).
    fetch_batch: int = 500
    # With several partitions, delivery takes at most this many records from one before the next has
    # its turn (Pulsar's multi-partition consumer interleaves partitions as their messages arrive).
    delivery_chunk: int = 100
    # A partition with nothing scanned is scanned for (without waiting) while the windows hold fewer
    # records than this: a broker may hand over one partition's whole backlog before the next one's.
    scan_ahead_records: int = 20_000
    # The coordinators' log: a transaction held open below the log start (its first message, and
    # maybe its marker, deleted by retention before anyone folded them) is looked up there.
    log_topic: str = DEFAULT_LOG_TOPIC
    # Pulsar's READ_UNCOMMITTED subscriptions (PIP-298): every data record up to the partition's end,
    # those of open and aborted transactions too; control records (markers) still never.
    read_uncommitted: bool = False


def discover_num_tcs(kafka: KafkaConfig, log_topic: str, *, admin: TopicAdmin | None = None) -> int | None:
    """How many TCs the cluster has: one transaction-log partition each (None if the log does not
    exist yet). Every reader of a partition must fold with the same count, the TB service's
    (records naming a TC beyond it are discarded), or they disagree on what is readable.
    ``admin``: a TopicAdmin to reuse."""
    try:
        return (admin or TopicAdmin(kafka)).partition_count(log_topic)
    except TopicNotFoundError:
        return None
    except StoreError as exc:
        raise from_store_error(exc, f"reading the partition count of {log_topic}") from None


def is_control(headers: Sequence[tuple[str, bytes]]) -> bool:
    """A control record (a marker, or anything else carrying the control header): never delivered."""
    return any(name == CTL_HEADER for name, _raw in headers)


def scan(state: TxnBufferState, kafka: KafkaConfig, end: int | None = None) -> int:
    """Fold the partition's records from ``state.scanned_to`` to ``end`` (default: the end offset now).
    Returns how many records were read."""
    if end is None:
        # Fixed before reading: records appended meanwhile are not claimed as scanned.
        end = end_offsets(kafka, [(state.topic, state.partition)])[(state.topic, state.partition)]
    count = 0
    for rec in read_range(kafka, state.topic, state.partition, state.scanned_to, end):
        state.apply(rec.offset, rec.headers, rec.value)
        count += 1
    state.scanned_to = max(state.scanned_to, end)
    return count


def tc_outcomes(
    kafka: KafkaConfig, log_topic: str, txns: Sequence[TxnID], secret: bytes | None = None
) -> dict[TxnID, TxnAction]:
    """How their coordinators ended ``txns``, for those that have ended (COMMITTED/ABORTED, or
    forgotten since: ended long ago); open, ending and unknown ones are left out, as are those of a
    TC whose log cannot be read now (logged). One read of each TC's log partition: occasional use.
    With ``secret`` (the marker secret) only authenticated log records count."""
    out: dict[TxnID, TxnAction] = {}
    for tc in sorted({t.most_bits for t in txns}):
        try:
            fold = read_tc_log(kafka, log_topic, tc, secret)
        except StoreError as exc:
            log.warning("reading TC %d's log %s to end transactions failed: %s", tc, log_topic, exc)
            continue
        for txn in txns:
            if txn.most_bits == tc and (action := ended_as(fold, txn)) is not None:
                out[txn] = action
    return out


def end_held(
    kafka: KafkaConfig,
    log_topic: str,
    state: TxnBufferState,
    held: Sequence[TxnID],
    log_start: int,
    fold_to_end: Callable[[], bool],
) -> None:
    """End the transactions ``held`` below ``log_start`` whose TC ended them and whose marker
    retention deleted unread (``TxnBufferState.end_deleted``). Their TCs are asked first; then
    ``fold_to_end`` folds the partition to an end offset it reads now (False if it could not get
    there): every marker of an ended transaction was written before its TC logged the end, so before
    the lookup, and those that survived are folded there, not taken for deleted."""
    ended = tc_outcomes(kafka, log_topic, held, state.marker_secret)
    if ended and fold_to_end():
        state.end_deleted(ended, log_start)


class LoadedState(NamedTuple):
    """A partition's TB state at its end, and where it came from."""

    state: TxnBufferState
    from_snapshot: int | None
    """The snapshot's ``scanned_to`` where the scan started (None: no snapshot, scanned from 0)."""
    snapshot_time: int | None
    """When that snapshot was taken (ms since the epoch), None without one."""


def _fold_to_end(state: TxnBufferState, kafka: KafkaConfig) -> bool:
    scan(state, kafka)
    return True


def load_states(
    kafka: KafkaConfig,
    topic: str,
    partitions: Sequence[int],
    *,
    store: SnapshotStore | None = None,
    options: BufferOptions | None = None,
    end: int | None = None,
) -> dict[int, LoadedState]:
    """The TB state of each partition at its end (or ``end``): latest snapshot + scan of what
    follows. The snapshots are loaded together (one replay per snapshot-topic partition). At the
    end, as a reader opening the partition: what retention deleted is pruned, and a transaction
    held open below the log start whose TC ended it is ended (its marker may be gone, unread)."""
    opts = options or BufferOptions()
    loaded = (
        store.load_many(
            [(topic, p) for p in partitions], num_tcs=opts.num_tcs, marker_secret=opts.marker_secret
        )
        if store
        else {}
    )
    # Where each partition starts and ends now, asked once for all of them.
    marks = watermark_offsets(kafka, [(topic, p) for p in partitions]) if end is None else {}
    out: dict[int, LoadedState] = {}
    for p in partitions:
        snap = loaded.get((topic, p))
        if snap is not None:
            state, taken = snap
            out[p] = LoadedState(state, state.scanned_to, taken)
        else:
            state = TxnBufferState(topic, p, num_tcs=opts.num_tcs, marker_secret=opts.marker_secret)
            out[p] = LoadedState(state, None, None)
        if end is not None:
            scan(state, kafka, end)
            continue
        low, high = marks[(topic, p)]
        scan(state, kafka, high)
        if low > 0:
            # A snapshot older than the log start kept a transaction open whose marker retention
            # deleted unread: LATEST started below messages published long before, stats showed it open.
            state.skip_deleted(low)
            held = state.held_below(low)
            if held:
                end_held(
                    kafka, opts.log_topic, state, held, low, functools.partial(_fold_to_end, state, kafka)
                )
    return out


def load_state(
    kafka: KafkaConfig,
    topic: str,
    partition: int,
    *,
    store: SnapshotStore | None = None,
    options: BufferOptions | None = None,
    end: int | None = None,
) -> tuple[TxnBufferState, int | None]:
    """The TB state at the partition's end (or ``end``): latest snapshot + scan of what follows.
    Returns the state and the snapshot's ``scanned_to`` (None without a snapshot)."""
    state, from_snapshot, _taken = load_states(
        kafka, topic, [partition], store=store, options=options, end=end
    )[partition]
    return state, from_snapshot


@dataclass
class _Partition:
    state: TxnBufferState
    position: int  # next offset to deliver
    window: deque[StoredRecord] = field(default_factory=deque)
    verdicts: deque[Verdict] = field(default_factory=deque)  # the fold's verdict on each window record
    window_start: int = 0  # the window holds every scanned record in [window_start, read_to)
    window_bytes: int = 0  # value bytes held in the window (an upper bound: seeks drop without counting)
    read_to: int = 0  # where the scanner reads this partition next (behind state.scanned_to after a snapshot)
    gap_idle_since: float | None = None  # since when the gap reader has read nothing

    def clear_window(self, start: int) -> None:
        self.window.clear()
        self.verdicts.clear()
        self.window_start = start
        self.window_bytes = 0


class CommittedReader:
    """Delivers plain and committed records of its partitions in offset order, never at or after a
    partition's ``max_read_position``; markers, aborted and discarded records are skipped. With
    ``BufferOptions.read_uncommitted``: every record but control records, up to the partition's end."""

    def __init__(
        self,
        kafka: KafkaConfig,
        starts: dict[TopicPartition, int],
        *,
        store: SnapshotStore | None = None,
        options: BufferOptions | None = None,
    ) -> None:
        self._kafka = kafka
        self._store = store
        self._opts = options or BufferOptions()
        self._starts = dict(starts)
        self._parts: dict[TopicPartition, _Partition] = {}
        self._scanner: PartitionReader | None = None
        # Gap readers (records dropped from a window, or before a snapshot), one per partition so that
        # delivery can take turns between partitions without re-positioning a shared reader (each
        # re-position makes the broker send the partition's rest again); at most _MAX_GAP_READERS,
        # the least recently used one is re-positioned for another partition. Value: (reader, where it
        # reads next).
        self._fetchers: dict[TopicPartition, tuple[PartitionReader, int]] = {}
        self._turn = 0  # the partition delivery starts with, rotated each poll
        self.refetched = 0  # records read a second time (by gap readers), after a window overflow or seek
        self.snapshot_offsets: dict[TopicPartition, int | None] = {}
        self._next_deleted_check = time.monotonic() + _DELETED_CHECK_S
        self._same_due: dict[TopicPartition, float] = {}  # next anchor check (_check_created_again)
        self._probe: PartitionReader | None = None  # reads the records at states' anchors
        self._open_lock = threading.Lock()  # held while the scanner is made or a partition opened

    # ------------------------------------------------------------------ setup
    def _ensure_started(self) -> None:
        if self._scanner is not None and len(self._parts) >= len(self._starts):
            return
        # Callers on several threads get here (a subscription's receive under its read lock, its
        # acks under its consumer lock): one opens, the others wait and find it open (two opens of
        # one partition made the second assignment fail).
        with self._open_lock:
            if self._scanner is None:
                self._scanner = self._partition_reader(idle_backoff_ms=self._kafka.idle_fetch_backoff_ms)
            if len(self._parts) < len(self._starts):
                # First use, or an open failed (a storage error loading its snapshot or watermarks):
                # open what is not open yet, so a failure is retried by the next call instead of
                # leaving the partition unread for good.
                for tp, start in list(self._starts.items()):
                    if tp not in self._parts:
                        self._open(tp, start)

    def _partition_reader(self, idle_backoff_ms: int = 0) -> PartitionReader:
        """A reader for the scanner or a gap. librdkafka prefetches up to 100,000 messages per
        partition by default and keeps fetching at the partition's end meanwhile; a reader working
        through a backlog (or waiting for its partition's turn) needs only a few polls ahead (on a
        broker that answers empty fetches at once, those end fetches spun at ~25% of a core)."""
        return PartitionReader(
            self._kafka,
            fetch_wait_ms=20,
            idle_backoff_ms=idle_backoff_ms,
            extra={"queued.min.messages": max(_PREFETCH_RECORDS, 2 * self._opts.fetch_batch)},
        )

    def _open(self, tp: TopicPartition, start: int) -> None:
        assert self._scanner is not None
        opts = self._opts
        loaded = (
            self._store.load(*tp, num_tcs=opts.num_tcs, marker_secret=opts.marker_secret)
            if self._store
            else None
        )
        state = (
            loaded[0]
            if loaded
            else TxnBufferState(*tp, num_tcs=opts.num_tcs, marker_secret=opts.marker_secret)
        )
        self.snapshot_offsets[tp] = state.scanned_to if loaded is not None else None
        low, _high = self._scanner.watermarks(*tp)
        position = max(start, low)
        state.skip_deleted(low)
        # Behind a snapshot, the scanner starts at the position: what lies below the snapshot is
        # folded in already (apply passes it over) and waits in the window like any other record.
        read_to = min(position, state.scanned_to)
        part = _Partition(state, position, window_start=position, read_to=read_to)
        self._scanner.add(tp[0], tp[1], read_to)
        self._parts[tp] = part  # only once the scanner reads it: a failed open leaves no trace

    def add_partition(self, topic: str, partition: int, start: int) -> None:
        """Read ``topic[partition]`` from ``start`` too; raises ``StoreError`` (nothing changed) if
        opening it fails. Its start is published only once it is open: callers on other threads
        (``readable_end`` ...) open what is started but not open, and must not open it meanwhile."""
        tp = (topic, partition)
        with self._open_lock:
            if self._scanner is not None:
                self._open(tp, start)
            self._starts[tp] = start

    def remove_partition(self, topic: str, partition: int) -> None:
        self._starts.pop((topic, partition), None)
        self._drop_gap_reader((topic, partition))
        if self._parts.pop((topic, partition), None) is not None and self._scanner is not None:
            self._scanner.remove(topic, partition)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Deliver from ``offset`` next (the TB state is kept: it does not depend on the position)."""
        self._ensure_started()
        part = self._parts[(topic, partition)]
        # Delivered records are popped from the window without moving window_start: a seek back
        # must not keep a window that no longer holds [offset, position).
        back = offset < part.position
        part.position = offset
        part.gap_idle_since = None
        while part.window and part.window[0].offset < offset:
            part.window.popleft()
            part.verdicts.popleft()
        if back or offset < part.window_start or not part.window:
            part.clear_window(max(part.read_to, offset))  # what lies below is read by a gap reader

    # ------------------------------------------------------------------ reading
    def state(self, topic: str, partition: int) -> TxnBufferState:
        self._ensure_started()
        return self._parts[(topic, partition)].state

    def position(self, topic: str, partition: int) -> int:
        self._ensure_started()
        return self._parts[(topic, partition)].position

    def readable_end(self, topic: str, partition: int) -> int:
        """Nothing at or after this offset is readable yet (``max_read_position``, or, reading
        uncommitted, what has been scanned)."""
        self._ensure_started()
        return self._limit(self._parts[(topic, partition)])

    def catch_up(self, topic: str, partition: int, until: int, deadline: float) -> bool:
        """Scan on until the partition's readable end passes ``until`` (True), or the scan has
        reached the partition's end as of now, or ``deadline`` (``time.monotonic()``) passed (False
        unless readable by then). What it scans waits in the window for the next poll, as for any
        scan ahead: for a caller asking about an offset it has not read up to (an ack of a message
        received before a restart)."""
        self._ensure_started()
        assert self._scanner is not None
        part = self._parts[(topic, partition)]
        if self._limit(part) > until:
            return True
        end = self._scanner.watermarks(topic, partition)[1]
        while self._limit(part) <= until:
            now = time.monotonic()
            if part.read_to >= end or now >= deadline:
                return False
            self._scan_some(min(0.1, deadline - now))
        return True

    def visible(self, topic: str, partition: int, offset: int, headers: Sequence[tuple[str, bytes]]) -> bool:
        """Would this reader deliver the record (below its partition's limit)?"""
        self._ensure_started()
        return self._visibility(self._parts[(topic, partition)])(offset, headers)

    def _visibility(self, part: _Partition) -> Callable[[int, Sequence[tuple[str, bytes]]], bool]:
        if self._opts.read_uncommitted:
            return lambda _offset, headers: not is_control(headers)
        return part.state.is_visible

    def _limit(self, part: _Partition) -> int:
        """Nothing at or after it is delivered: max_read_position, or (read uncommitted) what the
        scanner has read."""
        return part.read_to if self._opts.read_uncommitted else part.state.max_read_position

    def poll(self, timeout: float = 1.0, max_records: int = 5000) -> list[StoredRecord]:
        """Up to ``max_records`` deliverable records (empty after ``timeout`` if none)."""
        self._ensure_started()
        deadline = time.monotonic() + timeout
        if deadline >= self._next_deleted_check:
            # Bounded by the poll's own wait (at least 1 s): with the broker gone, a receive(2000)
            # waited a request timeout per partition (34 s for two partitions).
            budget = min(self._kafka.request_timeout_ms / 1000, max(1.0, timeout))
            self._check_created_again(budget)
            self._end_deleted(budget)
        scanned = False  # a poll with no time left still takes what the scanner has fetched
        while True:
            if self._scan_ahead_wanted():
                self._scan_some(0)
            out = self._deliver(max_records, deadline)
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0 and scanned:
                return out
            self._scan_some(max(0.0, min(remaining, 0.1)))
            scanned = True

    def _scan_some(self, timeout: float) -> int:
        assert self._scanner is not None
        records = self._scanner.poll_batch(self._opts.fetch_batch, timeout)
        if len(self._parts) == 1 and records:  # one partition read: the batch is one run
            (only,) = self._parts.values()
            if only.state.topic == records[0].topic and only.state.partition == records[0].partition:
                self._take_run(only, records)
        else:
            start = 0
            while start < len(records):  # runs of one partition's records, each folded at once
                first = records[start]
                stop = start + 1
                while (
                    stop < len(records)
                    and records[stop].partition == first.partition
                    and records[stop].topic == first.topic
                ):
                    stop += 1
                part = self._parts.get((first.topic, first.partition))
                if part is not None:
                    self._take_run(part, records[start:stop])
                start = stop
        for (topic, partition), part in self._parts.items():
            end = self._scanner.eof_offset(topic, partition)
            if end is not None:
                # A caught-up scan: everything below the end is read and folded in (compaction
                # leaves gaps).
                part.read_to = max(part.read_to, end)
                if end > part.state.scanned_to:
                    part.state.scanned_to = end
        return len(records)

    def _take_run(self, part: _Partition, run: list[StoredRecord]) -> None:
        """Fold a run of one partition's records in and keep those still to deliver in its window."""
        verdicts = part.state.apply_batch(run)
        part.read_to = run[-1].offset + 1
        window = part.window
        limit, byte_limit = self._opts.window_max_records, self._opts.window_max_bytes
        if run[0].offset >= max(part.window_start, part.position) and len(window) + len(run) <= limit:
            size = sum([len(r.value) for r in run if r.value is not None])
            if part.window_bytes + size <= byte_limit:  # all of it fits: the common case, in bulk
                part.window_bytes += size
                window.extend(run)
                part.verdicts.extend(verdicts)
                return
        for rec, verdict in zip(run, verdicts, strict=True):
            offset = rec.offset
            if offset >= part.window_start and offset >= part.position:
                size = len(rec.value) if rec.value is not None else 0
                if len(window) >= limit or part.window_bytes + size > byte_limit:
                    # Bound memory: forget the window; these records are fetched again when readable.
                    part.clear_window(offset + 1)
                else:
                    part.window_bytes += size
                    window.append(rec)
                    part.verdicts.append(verdict)
            elif offset >= part.window_start:
                part.window_start = offset + 1

    def _check_created_again(self, budget: float) -> None:
        """A topic deleted and created again under its name while this reader reads it restarts at
        offset 0: its TB state, folded from the old partition, covers offsets of the new one it never
        read (an open transaction's first message among them), and delivered what that transaction
        holds back. Such a partition (ending below what its state scanned, or holding another record
        at the state's anchor: ``still_the_partition``) is opened again, read from its start."""
        assert self._scanner is not None
        now = time.monotonic()
        timeout = self._kafka.request_timeout_ms / 1000
        for tp, part in list(self._parts.items()):
            state = part.state
            try:
                high = self._scanner.watermarks(*tp, timeout=budget)[1]
            except StoreError:
                return  # the broker did not answer: looked at again at the next check
            if high >= state.scanned_to and now < self._same_due.get(tp, 0.0):
                continue
            self._same_due[tp] = now + _SAME_CHECK_EVERY_S
            if self._probe is None:
                self._probe = PartitionReader(self._kafka)
            if still_the_partition(
                self._probe, *tp, state.scanned_to, state.anchor(), timeout, what="reader's TB state"
            ):
                continue  # the same (True), or unknown (None: the broker did not answer)
            log.warning("%s[%d] was deleted and created again: reading it again from its start", *tp)
            self._drop_gap_reader(tp)
            del self._parts[tp]
            self._scanner.remove(*tp)
            self._open(tp, 0)

    def _end_deleted(self, budget: float) -> None:
        """Every ``_DELETED_CHECK_S``: a partition held by a transaction whose first message
        retention has deleted (a snapshot older than the log start, or a reader that fell behind
        it) may be held for good, its marker deleted unread. Its TC's log says whether it ended;
        markers that survived are folded first (to an end read after the lookup), so only those
        whose marker is gone are ended here (``TxnBufferState.end_deleted``)."""
        assert self._scanner is not None
        self._next_deleted_check = time.monotonic() + _DELETED_CHECK_S
        scanner = self._scanner
        for tp, part in list(self._parts.items()):
            if not part.state.ongoing:
                continue

            def fold_to_end(tp: TopicPartition = tp, part: _Partition = part) -> bool:
                end = scanner.watermarks(*tp)[1]
                give_up = time.monotonic() + self._kafka.request_timeout_ms / 1000
                while part.read_to < end and time.monotonic() < give_up:
                    self._scan_some(0.1)
                return part.read_to >= end

            try:
                low = scanner.watermarks(*tp, timeout=budget)[0]
                held = part.state.held_below(low)
                if held:
                    end_held(self._kafka, self._opts.log_topic, part.state, held, low, fold_to_end)
            except StoreError as exc:  # looked at again at the next check
                log.warning("%s[%d]: checking transactions held below the log start failed: %s", *tp, exc)
                return

    def _scan_ahead_wanted(self) -> bool:
        parts = self._parts.values()
        if len(self._parts) < 2 or not any(not p.window and p.position >= p.window_start for p in parts):
            return False
        return sum(len(p.window) for p in parts) < self._opts.scan_ahead_records

    def _deliver(self, max_records: int, deadline: float) -> list[StoredRecord]:
        out: list[StoredRecord] = []
        parts = list(self._parts.values())
        if len(parts) > 1:
            self._turn = (self._turn + 1) % len(parts)
            parts = parts[self._turn :] + parts[: self._turn]
        chunk = max(1, self._opts.delivery_chunk) if len(parts) > 1 else max_records
        more = True
        while more and len(out) < max_records:
            more = False
            for part in parts:  # round-robin, up to ``chunk`` records each
                if len(out) >= max_records:
                    break
                before = len(out)
                self._deliver_part(part, out, min(max_records, before + chunk), deadline)
                more = more or len(out) > before
        return out

    def _deliver_part(
        self, part: _Partition, out: list[StoredRecord], max_records: int, deadline: float
    ) -> None:
        limit = self._limit(part)
        if part.position >= limit:
            return
        if part.position < part.window_start:
            self._fetch_gap(part, min(part.window_start, limit), out, max_records, deadline)
            return
        window, verdicts, deliverable = part.window, part.verdicts, part.state.deliverable
        position, room = part.position, max_records - len(out)
        uncommitted = self._opts.read_uncommitted
        if window and not uncommitted and window[0].offset >= position and room > 0:
            # In bulk: the window's records below the limit (a prefix: it is in offset order).
            take = bisect.bisect_left(window, limit, key=_offset_of)
            if take > room:
                take = room
            if take:
                if take == len(window):
                    chunk, kept = window, verdicts
                    part.window, part.verdicts = deque(), deque()
                    part.window_bytes = 0
                else:
                    chunk, kept = deque(), deque()
                    for _ in range(take):
                        chunk.append(window.popleft())
                        kept.append(verdicts.popleft())
                    part.window_bytes -= sum([len(r.value) for r in chunk if r.value is not None])
                # ``deliverable`` inlined for the commonest verdicts: True (plain) and a TxnID (a
                # message of a transaction that has ended; delivered unless aborted).
                aborted = part.state.aborted
                out.extend(
                    [
                        rec
                        for rec, verdict in zip(chunk, kept, strict=True)
                        if verdict is True
                        or (
                            verdict is not False
                            and (
                                deliverable(rec.offset, rec.headers, verdict)
                                if verdict is None
                                else not aborted or verdict not in aborted
                            )
                        )
                    ]
                )
                position = chunk[-1].offset + 1
                window, verdicts = part.window, part.verdicts
                room = max_records - len(out)
        while window and room > 0:
            rec = window[0]
            offset = rec.offset
            if offset >= limit:
                break
            window.popleft()
            verdict = verdicts.popleft()
            if rec.value is not None:
                part.window_bytes -= len(rec.value)
            if offset >= position and (
                verdict is True
                or (not is_control(rec.headers) if uncommitted else deliverable(offset, rec.headers, verdict))
            ):
                out.append(rec)
                room -= 1
            position = offset + 1
        part.position = position
        if not window:
            part.window_bytes = 0  # exact again (a seek may have dropped records uncounted)
        scanned_limit = min(limit, part.read_to)
        if not window and part.window_start <= position < scanned_limit:
            part.position = scanned_limit  # nothing else scanned below it (compaction gaps, markers)

    def _gap_reader(self, tp: TopicPartition, position: int) -> PartitionReader:
        entry = self._fetchers.pop(tp, None)
        at: int | None = None  # where the reader reads next, if it is this partition's
        if entry is not None:
            reader, at = entry
        elif len(self._fetchers) >= _MAX_GAP_READERS:
            reader = self._fetchers.pop(next(iter(self._fetchers)))[0]  # the least recently used
        else:
            reader = self._partition_reader()
        if at != position:
            reader.assign({tp: position})
        self._fetchers[tp] = (reader, position)  # (re)inserted: now the most recently used
        return reader

    def _drop_gap_reader(self, tp: TopicPartition) -> None:
        entry = self._fetchers.pop(tp, None)
        if entry is not None:
            entry[0].close()

    def _fetch_gap(
        self, part: _Partition, end: int, out: list[StoredRecord], max_records: int, deadline: float
    ) -> None:
        """Read [position, end) again from Kafka (records dropped from the window, or before a snapshot),
        waiting no longer than ``deadline``. Records are skipped only where Kafka no longer has them: a
        slow or stalled broker only delays delivery (the next poll goes on where this one stopped)."""
        topic, partition = part.state.topic, part.state.partition
        tp = (topic, partition)
        reader = self._gap_reader(tp, part.position)
        visible = self._visibility(part)
        while part.position < end and len(out) < max_records:
            wait = min(0.2, max(0.0, deadline - time.monotonic()))
            records = reader.poll_batch(min(self._opts.fetch_batch, max_records - len(out)), wait)
            self.refetched += len(records)
            for rec in records:
                if rec.offset >= end:
                    part.position = end
                    break
                if visible(rec.offset, rec.headers):
                    out.append(rec)
                part.position = rec.offset + 1
            if records:
                part.gap_idle_since = None
                continue
            eof = reader.eof_offset(topic, partition)
            if eof is not None and eof > part.position:
                part.position = min(end, eof)  # read up to the partition's end: nothing else below it
                continue
            now = time.monotonic()
            if part.gap_idle_since is None:
                part.gap_idle_since = now
            elif now - part.gap_idle_since >= _GAP_STALL_S:
                part.gap_idle_since = now
                try:
                    low = reader.watermarks(topic, partition)[0]
                except StoreError as exc:  # the broker is not answering: try again later
                    log.warning("%s[%d]: gap reader stalled at %d: %s", topic, partition, part.position, exc)
                else:
                    if low > part.position:  # retention deleted the rest of the gap
                        part.position = min(end, low)
                        reader.assign({tp: part.position})
                        continue
            if out or now >= deadline:
                break  # return what there is; the next poll goes on from here
        if part.position >= end:
            part.gap_idle_since = None
            self._drop_gap_reader(tp)  # read past the gap: the window takes over
        else:
            self._fetchers[tp] = (reader, part.position)

    def close(self) -> None:
        for tp in list(self._fetchers):
            self._drop_gap_reader(tp)
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        if self._scanner is not None:
            self._scanner.close()
        self._scanner = None
