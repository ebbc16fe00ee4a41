"""Transaction-buffer state of one partition: a pure function of the partition's records below
``scanned_to`` (docs/storage-format.md, "Transaction buffer state").

* ``ongoing``  txn -> offset of its first message here; the oldest pins ``max_read_position``.
* ``aborted``  txn -> offset of its abort marker; readers skip every message of these txns, also late
  ones written after the marker (which are not in ``discarded``).
* ``ended``    txns above their TC's low watermark that ended here (value: committed?), to spot late
  messages. Txns at or below the low watermark are known to have ended without an entry.
* ``lwm``      TC id -> highest low watermark carried by a verified marker.
* ``discarded`` sorted, merged offset ranges of messages that are never delivered although their txn
  is not in ``aborted``: late messages of already-ended txns, corrupt TxnID headers, unknown TCs.

A reader delivers a record at offset ``o < max_read_position`` iff it is not a control record, and if
transactional, its txn is not in ``aborted`` and ``o`` is not in ``discarded``.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import os
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kafka_store import CodecError, StoredRecord
from kafka_store.lograte import THROTTLE
from pulsar_txn._record_mac import has_valid_mac
from pulsar_txn.buffer.marker import (
    CTL_HEADER,
    MARKER_CTL,
    TXN_HEADER,
    TXN_MAC_HEADER,
    decode_marker,
    txn_message_mac,
    verify,
)
from pulsar_txn.txnid import TxnAction, TxnID

log = logging.getLogger(__name__)
_ID_CACHE_MAX = 4096  # parsed TxnID headers kept per partition state
_NO_TXN = object()  # apply_batch: the record has no TxnID header

Headers = Sequence[tuple[str, bytes | None]] | None
Verdict = TxnID | bool | None
"""What folding a record learnt about its delivery: True (a plain message: deliver), False (never:
a control record, or discarded), a TxnID (deliver unless that txn is aborted by then), None (the
record was folded before: ask ``is_visible``)."""


def record_fingerprint(headers: Headers, value: bytes | None) -> int:
    """CRC-32 of a record's value and headers: tells a snapshot's anchor record apart from another
    record at the same offset (a topic deleted and created again under its name)."""
    crc = zlib.crc32(value or b"")
    for name, raw in headers or ():
        crc = zlib.crc32(raw or b"", zlib.crc32(name.encode(), crc))
    return crc


UNSIGNED_TXN_HISTORY_ENV = "PULSAR_TXN_UNSIGNED_TXN_HISTORY"
"""Set to 1 in every process of a cluster (coordinators, clients, Spark driver and executors) whose
partitions hold transactions written with a marker secret by producers before session 38, which did
not sign them (docs/operations.md, "Upgrading")."""


def unsigned_txn_history_default() -> bool:
    """Whether ``UNSIGNED_TXN_HISTORY_ENV`` asks folds to accept unsigned openings until a partition's
    first signed one."""
    return os.environ.get(UNSIGNED_TXN_HISTORY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass
class BufferCounters:
    markers: int = 0
    committed_txns: int = 0
    aborted_txns: int = 0
    duplicate_markers: int = 0
    forged_markers: int = 0
    forged_txn_messages: int = 0  # a transaction's message without its authentication (secret set)
    corrupt_markers: int = 0
    corrupt_txn_headers: int = 0
    unknown_tc_records: int = 0
    late_messages: int = 0
    hanging_resolved: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class TxnBufferState:
    topic: str
    partition: int
    num_tcs: int = 1 << 16
    marker_secret: bytes | None = field(default=None, repr=False)
    scanned_to: int = 0
    ongoing: dict[TxnID, int] = field(default_factory=dict)
    aborted: dict[TxnID, int] = field(default_factory=dict)
    ended: dict[TxnID, bool] = field(default_factory=dict)
    lwm: dict[int, int] = field(default_factory=dict)
    discarded: list[list[int]] = field(default_factory=list)
    counters: BufferCounters = field(default_factory=BufferCounters)
    # With a marker secret: the offset from which on only a signed message (``ptxn.txn.mac``) opens
    # a transaction here. 0 (the default): from the partition's start. With ``unsigned_txn_history``
    # (a cluster that ran a secret before session 38, whose producers did not sign), it is armed by
    # the first signed opening and None before, so that history stays readable; a forged opening
    # before that arming holds the partition's readers for good (Jepsen seed 3902, session 39).
    txn_auth_from: int | None = None
    unsigned_txn_history: bool = field(default_factory=unsigned_txn_history_default, repr=False)
    changes: int = 0  # state changes folded in (drives snapshot cadence)
    _oldest: list[tuple[int, TxnID]] = field(default_factory=list, repr=False)
    _ids: dict[bytes, TxnID] = field(default_factory=dict, repr=False, compare=False)
    # The last record folded in (offset, headers, value), or the anchor a snapshot was loaded with
    # (offset, fingerprint): snapshots carry it so that a load can check it is of this partition.
    _last: tuple[int, Headers, bytes | None] | None = field(default=None, repr=False, compare=False)
    _loaded_anchor: tuple[int, int] = field(default=(-1, 0), repr=False, compare=False)
    # Per TC, a min-heap of the least bits in ``ended`` (built at the first watermark advance): an
    # advance drops that TC's entries at or below it without scanning every entry of every TC (a TC
    # whose watermark a long-open transaction pins can hold hundreds of thousands of them, and each
    # marker of another TC scanned them all).
    _ended_heaps: dict[int, list[int]] | None = field(default=None, repr=False, compare=False)
    # Guards ``_oldest``: the state is folded on one thread, but ``max_read_position`` is also read
    # on others (a consumer's acks check it while its reader polls), and that read pops stale tops.
    # Unguarded, two readers seeing the same stale top popped it and the open transaction's entry
    # below it, and the partition read on past that transaction's first offset.
    _heap_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.marker_secret is not None and not self.unsigned_txn_history and self.txn_auth_from is None:
            self.txn_auth_from = 0

    # ------------------------------------------------------------------ derived
    @property
    def max_read_position(self) -> int:
        """First offset of the oldest ongoing txn, else ``scanned_to``: nothing at or after it is read."""
        with self._heap_lock:
            heap = self._oldest
            while heap:
                first, txn = heap[0]
                if self.ongoing.get(txn) == first:
                    return first
                heapq.heappop(heap)
        return self.scanned_to

    def has_ended(self, txn: TxnID) -> bool:
        return txn in self.ended or txn in self.aborted or txn.least_bits <= self.lwm.get(txn.most_bits, -1)

    def is_discarded(self, offset: int) -> bool:
        ranges = self.discarded
        i = bisect.bisect_right(ranges, [offset, 1 << 62]) - 1
        return i >= 0 and ranges[i][0] <= offset <= ranges[i][1]

    def anchor(self) -> tuple[int, int]:
        """(offset, fingerprint) of the last record folded in; offset -1 if none."""
        last = self._last
        if last is None:
            return self._loaded_anchor
        return last[0], record_fingerprint(last[1], last[2])

    def set_anchor(self, offset: int, fingerprint: int) -> None:
        """The anchor of the snapshot this state was loaded from."""
        self._last = None
        self._loaded_anchor = (offset, fingerprint)

    # ------------------------------------------------------------------ folding
    def apply(self, offset: int, headers: Headers, value: bytes | None) -> Verdict:
        """Fold one record in (records must come in offset order; gaps from compaction are fine).

        Returns the record's verdict for a reader that holds it until ``max_read_position`` passes
        it (``deliverable``): what the fold learnt, so that delivery does not parse headers again."""
        if offset < self.scanned_to:
            return None
        self.scanned_to = offset + 1
        self._last = (offset, headers, value)
        if not headers:
            return True
        ctl = txn_raw = None
        # A header without a value counts as b"" (readers see it so; the service sees None): the fold
        # must be the same function of the records for both.
        for name, raw in headers:
            if name == TXN_HEADER:
                txn_raw = raw if raw is not None else b""
            elif name == CTL_HEADER:
                ctl = raw if raw is not None else b""
        if ctl is not None:
            if ctl == MARKER_CTL:
                self._marker(offset, value)
            return False  # control records are never delivered, whatever they are
        if txn_raw is not None:
            return self._message(offset, txn_raw, headers)
        return True

    def apply_batch(self, records: Sequence[StoredRecord]) -> list[Verdict]:
        """``apply`` for records in offset order, one verdict each: the same fold, with the two
        commonest records folded inline (a reader's hot loop): a plain message, and a message of a
        transaction already open here."""
        verdicts: list[Verdict] = []
        if not records:
            return verdicts
        add = verdicts.append
        apply, ids, ongoing = self.apply, self._ids, self.ongoing
        scanned = self.scanned_to
        for rec in records:
            offset = rec[2]
            headers = rec[5]
            if offset >= scanned:
                txn_raw: bytes | object | None = _NO_TXN  # a header without a value is not its absence
                for name, raw in headers:
                    if name == TXN_HEADER:
                        txn_raw = raw
                    elif name == CTL_HEADER:
                        break
                else:
                    if txn_raw is _NO_TXN:
                        scanned = offset + 1
                        add(True)
                        continue
                    txn = ids.get(txn_raw) if isinstance(txn_raw, bytes) else None
                    if txn is not None and txn in ongoing:
                        scanned = offset + 1
                        add(txn)
                        continue
            self.scanned_to = scanned
            add(apply(offset, headers, rec[4]))
            scanned = self.scanned_to
        self.scanned_to = scanned
        last = records[-1]
        if last[2] + 1 == scanned:  # the anchor: the last record folded in
            self._last = (last[2], last[5], last[4])
        return verdicts

    def deliverable(self, offset: int, headers: Headers, verdict: Verdict) -> bool:
        """For a record below ``max_read_position`` that ``apply`` returned ``verdict`` for: should a
        reader deliver it? (Same answer as ``is_visible``, without parsing the headers again.)"""
        if verdict is True or verdict is False:
            return verdict
        if verdict is None:
            return self.is_visible(offset, headers)
        return not self.aborted or verdict not in self.aborted

    def _txn(self, raw: bytes) -> TxnID:
        """Parse a 16-byte TxnID header; the records of a transaction (scanned, then checked for
        delivery) share one parse."""
        ids = self._ids
        txn = ids.get(raw)
        if txn is None:
            if len(ids) >= _ID_CACHE_MAX:
                ids.clear()
            txn = ids[raw] = TxnID.from_bytes(raw)
        return txn

    def _message(self, offset: int, raw: bytes, headers: Headers) -> Verdict:
        if not raw or len(raw) != 16:
            self.counters.corrupt_txn_headers += 1
            THROTTLE.warning(
                log,
                (self.topic, self.partition, "corrupt-txn-header"),
                "%s[%d]@%d: corrupt TxnID header (%d bytes); skipped",
                self.topic,
                self.partition,
                offset,
                len(raw),
            )
            self._discard(offset)
            return False
        txn = self._txn(raw)
        if txn in self.ongoing:
            return txn
        if txn.most_bits >= self.num_tcs:
            self.counters.unknown_tc_records += 1
            THROTTLE.warning(
                log,
                (self.topic, self.partition, "unknown-tc"),
                "%s[%d]@%d: message of %s from unknown TC; skipped",
                self.topic,
                self.partition,
                offset,
                txn,
            )
            self._discard(offset)
            return False
        if self.has_ended(txn):
            # A late message of a txn that already ended here: never delivered, never pins.
            self.counters.late_messages += 1
            if txn in self.aborted:
                # Remembered until retention deletes this record too (prune), not only the marker.
                if offset > self.aborted[txn]:
                    self.aborted[txn] = offset
                    self.changes += 1
            else:
                self._discard(offset)
            return False
        secret = self.marker_secret
        if secret is not None and not self._opening_allowed(secret, offset, txn, raw, headers):
            return False
        with self._heap_lock:
            self.ongoing[txn] = offset
            heap = self._oldest
            heapq.heappush(heap, (offset, txn))
            # Ended transactions leave the heap only once they reach its top: behind one long-open
            # transaction it kept an entry for every later one. Rebuilt from ``ongoing`` once mostly
            # stale (amortised O(1) per push): its size stays within twice the open transactions.
            if len(heap) > 2 * len(self.ongoing) + 64:
                rebuilt = [(o, t) for t, o in self.ongoing.items()]
                heapq.heapify(rebuilt)
                self._oldest = rebuilt
        self.changes += 1
        return txn

    def _opening_allowed(self, secret: bytes, offset: int, txn: TxnID, raw: bytes, headers: Headers) -> bool:
        """With a marker secret: may this message open ``txn`` here? A signed one may (the first arms
        the check); an unsigned one only before that, as producers before session 38 wrote them.
        Only the opening message is checked: later ones of an open transaction are its own."""
        mac = txn_message_mac(secret, raw, self.topic, self.partition)
        if has_valid_mac(headers or (), TXN_MAC_HEADER, mac):
            if self.txn_auth_from is None:
                self.txn_auth_from = offset
                self.changes += 1
            return True
        if self.txn_auth_from is None:
            return True
        self.counters.forged_txn_messages += 1
        THROTTLE.warning(
            log,
            (self.topic, self.partition, "forged-txn-message"),
            "%s[%d]@%d: message of %s failed authentication; skipped",
            self.topic,
            self.partition,
            offset,
            txn,
        )
        self._discard(offset)
        return False

    def _marker(self, offset: int, value: bytes | None) -> None:
        try:
            marker = decode_marker(value)
        except CodecError as exc:
            self.counters.corrupt_markers += 1
            THROTTLE.warning(
                log,
                (self.topic, self.partition, "corrupt-marker"),
                "%s[%d]@%d: unreadable marker skipped: %s",
                self.topic,
                self.partition,
                offset,
                exc,
            )
            return
        if self.marker_secret is not None and not verify(
            marker, self.topic, self.partition, self.marker_secret
        ):
            self.counters.forged_markers += 1
            THROTTLE.warning(
                log,
                (self.topic, self.partition, "forged-marker"),
                "%s[%d]@%d: marker for %s failed authentication; ignored",
                self.topic,
                self.partition,
                offset,
                marker.txn_id,
            )
            return
        txn = marker.txn_id
        if txn.most_bits >= self.num_tcs:
            self.counters.unknown_tc_records += 1
            return
        self.counters.markers += 1
        if txn in self.ongoing:
            del self.ongoing[txn]
            if marker.action is TxnAction.ABORT:
                self.aborted[txn] = offset
                self.counters.aborted_txns += 1
            else:
                self.counters.committed_txns += 1
            self._ended(txn, marker.action is TxnAction.COMMIT)
            self.changes += 1
        elif self.has_ended(txn):
            self.counters.duplicate_markers += 1
        else:
            self._ended(txn, marker.action is TxnAction.COMMIT)  # no message here yet: later ones are late
            self.changes += 1
        self._advance_lwm(txn.most_bits, marker.low_watermark, offset)

    def _advance_lwm(self, tc: int, lwm: int, offset: int) -> None:
        if lwm <= self.lwm.get(tc, -1):
            return
        self.lwm[tc] = lwm
        self.changes += 1
        heaps = self._ended_heaps
        if heaps is None:
            heaps = self._ended_heaps = {}
            for t in self.ended:
                heaps.setdefault(t.most_bits, []).append(t.least_bits)
            for h in heaps.values():
                heapq.heapify(h)
        heap = heaps.get(tc)
        while heap and heap[0] <= lwm:
            self.ended.pop(TxnID(tc, heapq.heappop(heap)), None)
        # A txn still open here although its TC has ended everything up to ``lwm`` is hanging: this
        # partition was never registered with the TC, so its messages are not part of the txn.
        for txn in [t for t in self.ongoing if t.most_bits == tc and t.least_bits <= lwm]:
            del self.ongoing[txn]
            self.aborted[txn] = offset
            self.counters.hanging_resolved += 1
            log.warning(
                "%s[%d]: hanging %s resolved as aborted by low watermark %d",
                self.topic,
                self.partition,
                txn,
                lwm,
            )

    def _ended(self, txn: TxnID, committed: bool) -> None:
        if txn not in self.ended and self._ended_heaps is not None:
            heapq.heappush(self._ended_heaps.setdefault(txn.most_bits, []), txn.least_bits)
        self.ended[txn] = committed

    def _discard(self, offset: int) -> None:
        ranges = self.discarded
        if ranges and ranges[-1][1] + 1 >= offset:
            ranges[-1][1] = max(ranges[-1][1], offset)
        else:
            ranges.append([offset, offset])
        self.changes += 1

    # ------------------------------------------------------------------ visibility and upkeep
    def is_visible(self, offset: int, headers: Headers) -> bool:
        """For a record below ``max_read_position``: should a reader deliver it?"""
        if not headers:
            return True
        txn_raw = None
        for name, raw in headers:
            if name == CTL_HEADER:
                return False
            if name == TXN_HEADER:
                txn_raw = raw if raw is not None else b""
        if txn_raw is None:
            return True
        if len(txn_raw) != 16:
            return False
        return self._txn(txn_raw) not in self.aborted and not (self.discarded and self.is_discarded(offset))

    def skip_deleted(self, log_start_offset: int) -> None:
        """Retention deleted ``[scanned_to, log_start_offset)`` before it was folded: go on from the
        log start. Transactions held open here stay open (maybe still open at their TC): one whose
        deleted marker ended it is found by ``held_below`` and ended by ``end_deleted``."""
        if log_start_offset > self.scanned_to:
            self.scanned_to = log_start_offset
        self.prune(log_start_offset)

    def held_below(self, log_start_offset: int) -> list[TxnID]:
        """Open transactions whose first message here retention has deleted: if their marker was
        deleted too (before anyone folded it), only their TC can tell that they ended."""
        return [t for t, first in self.ongoing.items() if first < log_start_offset]

    def end_deleted(self, outcomes: Mapping[TxnID, TxnAction], log_start_offset: int) -> None:
        """End transactions that their TC ended but whose marker is gone: ``outcomes`` was looked up
        (TC status terminal, so every marker was written) before the state was folded to an end
        offset read after the lookup, so a transaction still open here below the log start had its
        marker deleted, and all its messages below it with it. Its messages folded here at or
        after the log start came after its marker: late, never delivered, whatever the outcome
        (a full scan would have discarded them). So either way it is kept in ``aborted`` (which
        hides a transaction's messages) until retention passes everything folded so far; before,
        a committed one's late messages were delivered, and an aborted one was pruned while its
        late messages were still in the log."""
        for txn, action in outcomes.items():
            first = self.ongoing.get(txn)
            if first is None or first >= log_start_offset:
                continue
            del self.ongoing[txn]  # its heap entry is stale now: max_read_position pops it
            self.aborted[txn] = max(log_start_offset, self.scanned_to - 1)
            if action is TxnAction.ABORT:
                self.counters.aborted_txns += 1
            else:
                self.counters.committed_txns += 1
            self._ended(txn, action is TxnAction.COMMIT)
            self.changes += 1
            log.info(
                "%s[%d]: %s ended (%s) with its marker deleted by retention",
                self.topic,
                self.partition,
                txn,
                action.name,
            )

    def prune(self, log_start_offset: int) -> None:
        """Forget what only concerned records that retention has deleted (keeps the sets bounded)."""
        for txn in [t for t, off in self.aborted.items() if off < log_start_offset]:
            del self.aborted[txn]
        self.discarded = [r for r in self.discarded if r[1] >= log_start_offset]

    def txn_stats(self, txn: TxnID) -> dict[str, object]:
        """``transaction-in-buffer-stats``: what this partition knows of ``txn``. ``state`` OPEN (its
        first message is ``start_position``), COMMITTED, ABORTED, ENDED (below its TC's low
        watermark: ended, the outcome no longer kept here) or NONE (no message or marker of it here)."""
        start = self.ongoing.get(txn)
        if start is not None:
            state = "OPEN"
        elif txn in self.aborted:
            state = "ABORTED"
        elif txn in self.ended:
            state = "COMMITTED" if self.ended[txn] else "ABORTED"
        elif txn.least_bits <= self.lwm.get(txn.most_bits, -1):
            state = "ENDED"
        else:
            state = "NONE"
        return {"txn_id": str(txn), "state": state, "start_position": start, "aborted": state == "ABORTED"}

    def stats(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "max_read_position": self.max_read_position,
            "scanned_to": self.scanned_to,
            "ongoing_txn_size": len(self.ongoing),
            "aborted_txn_size": len(self.aborted),
            "discarded_ranges": len(self.discarded),
            "low_watermarks": {str(k): v for k, v in sorted(self.lwm.items())},
            **self.counters.as_dict(),
        }
