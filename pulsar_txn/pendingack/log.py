"""The pending-ack log of a subscription: ``<topic>-<sub>__transaction_pending_ack``, partitioned like
the data topic. It is the redo log of transactional acks: ``PendingAck`` records written by the
consumer (header ``ptxn.ctl = b"pending-ack"``) and the TC's COMMIT/ABORT markers."""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Sequence
from typing import Any

from kafka_store import REGISTRY, CodecError, RecordKind, StoredRecord
from kafka_store.lograte import THROTTLE
from pulsar_txn._record_mac import has_valid_mac, record_mac
from pulsar_txn.buffer.marker import CTL_HEADER, MARKER_CTL, TXN_HEADER, TxnMarker, decode_marker, verify
from pulsar_txn.pendingack.state import AckKind, PendingAckState
from pulsar_txn.txnid import TxnAction, TxnID

log = logging.getLogger(__name__)

PENDING_ACK_CTL = b"pending-ack"


def _ack_fields() -> list[dict[str, Any]]:
    """The fields of PendingAck v1, which v2 extends (a fresh list each time: fastavro parses each
    version's schema on its own)."""
    return [
        {"name": "txn_most", "type": "long"},
        {"name": "txn_least", "type": "long"},
        {
            "name": "kind",
            "type": {"type": "enum", "name": "AckKindV1", "symbols": ["INDIVIDUAL", "CUMULATIVE"]},
        },
        {"name": "offsets", "type": {"type": "array", "items": "long"}},
        {"name": "written_at_ms", "type": "long"},
    ]


PENDING_ACK = REGISTRY.register(
    RecordKind(
        "PendingAck",
        code=20,
        schemas={
            1: {
                "type": "record",
                "name": "PendingAckV1",
                "namespace": "pulsar_txn.pendingack",
                "fields": _ack_fields(),
            },
            # v2 names the subscription (data topic, subscription): Pulsar's log name
            # <topic>-<sub>__transaction_pending_ack is the same for topic "a-b" with subscription "c"
            # and topic "a" with subscription "b-c", and a fold must not take the other's acks.
            2: {
                "type": "record",
                "name": "PendingAckV2",
                "namespace": "pulsar_txn.pendingack",
                "fields": [
                    *_ack_fields(),
                    {"name": "topic", "type": "string"},
                    {"name": "subscription", "type": "string"},
                ],
            },
        },
    )
)


ACK_MAC_HEADER = "ptxn-ack-mac"
"""With marker authentication on, every PendingAck record carries an HMAC-SHA256 (marker secret) over
its log partition and value: a plain Kafka producer cannot add acks (which a later commit of a
real transaction would apply, swallowing messages) nor pending positions that hold messages back."""


def _ack_mac(secret: bytes, topic: str, partition: int, value: bytes) -> bytes:
    return record_mac(secret, topic.encode(), str(partition).encode(), value)


def encode_pending_ack(
    txn: TxnID,
    kind: AckKind,
    offsets: Sequence[int],
    *,
    topic: str = "",
    partition: int = 0,
    secret: bytes | None = None,
    owner: tuple[str, str] = ("", ""),
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """A PendingAck record for ``topic[partition]`` of a pending-ack log, of the subscription
    ``owner`` (data topic, subscription); signed with ``secret``."""
    value = PENDING_ACK.encode(
        {
            "txn_most": txn.most_bits,
            "txn_least": txn.least_bits,
            "kind": kind.value,
            "offsets": list(offsets),
            "written_at_ms": int(time.time() * 1000),
            "topic": owner[0],
            "subscription": owner[1],
        }
    )
    headers = [(CTL_HEADER, PENDING_ACK_CTL), (TXN_HEADER, txn.to_bytes())]
    if secret is not None:
        headers.append((ACK_MAC_HEADER, _ack_mac(secret, topic, partition, value)))
    return value, headers


# Pending-ack logs keep their records until the consumer trims them (DeleteRecords below
# ``PendingAckFold.trim_point``, once a cursor holding everything below it is committed): time-based
# retention could delete acks a restart still has to replay.
PENDING_ACK_TOPIC_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1"}

_ENDED_MAX = 10_000  # transactions whose end a fold remembers (late ack records of them are ignored)
# Committed transactions whose individual acks lie above the cursor's mark-delete, remembered so that
# replay can redo them if the cursor's metadata has no room for their ranges (see replay_start).
_COMMITTED_MAX = 200_000


class PendingAckFold:
    """Folds pending-ack log records into a ``PendingAckState``; remembers where each unfinished
    transaction's first ack record is, so a restart can replay from the lowest of them."""

    def __init__(
        self,
        state: PendingAckState,
        topic: str,
        partition: int,
        *,
        marker_secret: bytes | None = None,
        num_tcs: int | None = None,
        owner: tuple[str, str] = ("", ""),
    ) -> None:
        self.state = state
        self.topic = topic
        self.partition = partition
        # (data topic, subscription) whose log this is; v2 ack records of another subscription (whose
        # log has the same name) are not ours, and from the first of them on the log is not trimmed:
        # the other subscription may still need its records.
        self.owner = owner
        self.foreign_from: int | None = None
        self._secret = marker_secret
        self._num_tcs = num_tcs  # ack records naming a TC at or beyond it are skipped (None: any)
        self.first_record: dict[TxnID, int] = {}
        self.next_offset = 0
        self.skipped = 0
        # Transactions seen ending, oldest first: an ack record of one that lands after its outcome
        # (written late, e.g. after a timeout abort) must neither be pending nor pin replay_start.
        self._ended: dict[TxnID, None] = {}
        self._own: set[int] = set()  # offsets of ack records the live consumer wrote (see apply)
        self._carrying: dict[TxnID, int] | None = None  # see carry_begin
        # Committed transactions with individual acks: txn -> (its first ack record, its highest
        # acked offset), kept until the cursor's mark-delete passes that offset.
        self._committed: dict[TxnID, tuple[int, int]] = {}
        self._committed_by_last: list[tuple[int, TxnID]] = []  # a heap: which to forget first

    def has_ended(self, txn: TxnID) -> bool:
        """Whether this fold saw ``txn`` end (among the last ``_ENDED_MAX`` that did)."""
        return txn in self._ended

    def replay_start(self, unpersisted_from: int | None = None) -> int:
        """Replaying from here rebuilds every unfinished transaction's acks. ``unpersisted_from``:
        the cursor's metadata lacks the acks from that offset on (too many ranges to persist, see
        ``Cursor.encode_ranges``); replay then also starts early enough to redo every committed
        transaction that acked there, so a committed ack never reverts after a restart."""
        start = min(self.first_record.values(), default=self.next_offset)
        if unpersisted_from is not None:
            for first, last in self._committed.values():
                if last >= unpersisted_from and first < start:
                    start = first
        return start

    def trim_point(self) -> int:
        """No replay will ever need the log below here: the lowest replay start that the cursor's
        metadata could still call for (every unfinished transaction's first record, and every
        committed one whose acks only this log may yet have to redo, see ``replay_start``). As with
        Pulsar's pending-ack log, acks above a mark-delete held back keep their records."""
        committed_firsts = (first for first, _last in self._committed.values())
        low = min((self.next_offset, *self.first_record.values(), *committed_firsts))
        return low if self.foreign_from is None else min(low, self.foreign_from)

    def forget_committed_below(self, mark_delete: int) -> None:
        """Committed transactions whose acks all lie below ``mark_delete`` are persisted by it."""
        heap = self._committed_by_last
        while heap and heap[0][0] < mark_delete:
            self._committed.pop(heapq.heappop(heap)[1], None)

    def apply(self, rec: StoredRecord, *, live: bool = False) -> list[tuple[TxnID, TxnAction, Sequence[int]]]:
        """Fold one record; returns [(txn, outcome, offsets released by an abort)] for outcome markers.
        ``live=True`` (the consumer's tail) skips the ack records the consumer wrote itself (it applied
        them when it made the acks) and folds the others (e.g. a previous owner's, written late)."""
        self.next_offset = max(self.next_offset, rec.offset + 1)
        ctl = rec.header(CTL_HEADER)
        if ctl == PENDING_ACK_CTL:
            if live and rec.offset in self._own:
                self._own.discard(rec.offset)
                return []
            acked = self._ack_record(rec)
            if acked is None:
                return []
            txn, kind, offsets = acked
            if txn in self._ended:
                return []
            self.state.apply_ack(txn, kind, offsets)
            self.first_record.setdefault(txn, rec.offset)
            return []
        if ctl == MARKER_CTL:
            try:
                marker = decode_marker(rec.value)
            except CodecError as exc:
                self._skip(rec.offset, str(exc))
                return []
            if self._secret is not None and not verify(marker, self.topic, self.partition, self._secret):
                self._skip(rec.offset, f"marker for {marker.txn_id} failed authentication")
                return []
            released = self.apply_outcome(marker.txn_id, marker.action)
            return [(marker.txn_id, marker.action, released), *self._ended_below(marker)]
        self._skip(rec.offset, "not a pending-ack record")
        return []

    def _ack_record(self, rec: StoredRecord) -> tuple[TxnID, AckKind, list[int]] | None:
        """A PendingAck record's content, or None (skipped, logged and counted) if it is malformed,
        names a TC that does not exist or a negative offset, or fails authentication."""
        if self._secret is not None:
            expected = _ack_mac(self._secret, self.topic, self.partition, rec.value or b"")
            if not has_valid_mac(rec.headers, ACK_MAC_HEADER, expected):
                self._skip(rec.offset, "ack record failed authentication")
                return None
        try:
            f = REGISTRY.decode_as(PENDING_ACK, rec.value)
            txn = TxnID(int(f["txn_most"]), int(f["txn_least"]))
            kind = AckKind(f["kind"])
            offsets = [int(o) for o in f["offsets"]]
            owner = (f.get("topic", ""), f.get("subscription", ""))  # v1: none named
        except (CodecError, ValueError) as exc:  # InvalidTxnID is a ValueError
            self._skip(rec.offset, str(exc))
            return None
        if owner != ("", "") and self.owner != ("", "") and owner != self.owner:
            if self.foreign_from is None:
                self.foreign_from = rec.offset
                log.warning(
                    "%s[%d]: also holds acks of subscription %r on %r (the same log name as %r on %r):"
                    " they are not ours, and the log is no longer trimmed",
                    self.topic,
                    self.partition,
                    owner[1][:100],
                    owner[0][:100],
                    self.owner[1],
                    self.owner[0],
                )
            return None
        if self._num_tcs is not None and txn.most_bits >= self._num_tcs:
            self._skip(rec.offset, f"{txn} names TC {txn.most_bits}; the cluster has {self._num_tcs}")
            return None
        if not offsets or min(offsets) < 0:
            self._skip(rec.offset, f"{txn}: no offsets, or a negative one")
            return None
        return txn, kind, offsets

    def apply_outcome(self, txn: TxnID, action: TxnAction) -> Sequence[int]:
        """Apply an outcome learnt first-hand (the txn's END_TXN succeeded); the marker that follows in
        the log is then a no-op."""
        first = self.first_record.pop(txn, None)
        last = self.state.last_individual(txn)
        if action is TxnAction.COMMIT and first is not None and last is not None:
            self._committed[txn] = (first, last)
            heapq.heappush(self._committed_by_last, (last, txn))
            if len(self._committed) > _COMMITTED_MAX:
                # The one with the lowest acks: the cursor's metadata keeps the lowest ranges first.
                # Taken from the heap, so heap and dict stay the same size (bounded both).
                dropped = heapq.heappop(self._committed_by_last)[1]
                del self._committed[dropped]
                log.warning(
                    "%s[%d]: more than %d committed transactions ahead of the cursor's mark-delete; "
                    "%s's acks are persisted only as far as the cursor's metadata has room",
                    self.topic,
                    self.partition,
                    _COMMITTED_MAX,
                    dropped,
                )
        self._ended[txn] = None
        if len(self._ended) > _ENDED_MAX:
            del self._ended[next(iter(self._ended))]
        return self.state.apply_outcome(txn, action)

    def _ended_below(self, marker: TxnMarker) -> list[tuple[TxnID, TxnAction, Sequence[int]]]:
        """Transactions of the marker's TC at or below its low watermark have ended, and their own
        markers were written before this one. One still pending here had its marker before this
        fold's start: the ack records seen were written after its end (late, e.g. a commit's write
        after a timeout abort; a commit's records always precede its marker), so it aborted. Without
        this, a replay starting between such a marker and the late record held the acks forever."""
        tc, lwm = marker.txn_id.most_bits, marker.low_watermark
        stale = [
            t
            for t in self.state.pending_txns()
            if t.most_bits == tc and t.least_bits <= lwm and t != marker.txn_id
        ]
        out: list[tuple[TxnID, TxnAction, Sequence[int]]] = []
        for txn in stale:
            log.warning(
                "%s[%d]: %s is pending but below the low watermark %d of TC %d: its outcome preceded "
                "this log's replay, so its acks were written after it ended; released as aborted",
                self.topic,
                self.partition,
                txn,
                lwm,
                tc,
            )
            out.append((txn, TxnAction.ABORT, self.apply_outcome(txn, TxnAction.ABORT)))
        return out

    def settle_ended_before(self, replay_start: int) -> None:
        """After a recovery that read from below the committed ``replay_start``: every transaction
        with an ack record below it had ended when that cursor was committed (the replay start is at
        or below the first record of every unfinished one). One still pending here ended without its
        outcome in what was read: its marker is still on its way (the committing consumer learnt the
        outcome from END_TXN's answer), or it lies before the read start (a late record). Its outcome
        is in the cursor already, so it is released without one: else it would hold its messages
        back, and a seek would carry it over and apply a commit made before the seek to the sought
        cursor once its marker came."""
        ended = [t for t, first in self.first_record.items() if first < replay_start]
        for txn in ended:
            self.apply_outcome(txn, TxnAction.ABORT)

    def note_written(self, txn: TxnID, offset: int) -> None:
        """The live consumer wrote an ack record of ``txn`` at ``offset``."""
        if offset >= self.next_offset:  # else the tail has passed (and folded) it already
            self._own.add(offset)
        if txn not in self._ended:
            self.first_record.setdefault(txn, offset)
        if self._carrying is not None:
            self._carrying[txn] = min(offset, self._carrying.get(txn, offset))

    def carry_begin(self) -> None:
        """The pending acks are about to be written again at the log's end (a seek: see
        ``carry_end``); from now, note where each transaction's ack records are written."""
        self._carrying = {}

    def carry_end(self, carried: dict[TxnID, int]) -> None:
        """The pending acks were written again: ``carried`` is each transaction's first such record.
        Replay may now start there, past every older record: in particular past the acks and
        outcomes of transactions that ended before the seek, which would otherwise be applied to the
        sought cursor again on recovery. A record of the transaction written meanwhile counts too."""
        since, self._carrying = self._carrying or {}, None
        self._committed.clear()  # the seek replaced the cursor: their acks are not to be redone
        self._committed_by_last.clear()
        for txn, offset in carried.items():
            if txn in self._ended or txn not in self.first_record:
                continue  # ended meanwhile: nothing pending to replay
            self.first_record[txn] = min(offset, since.get(txn, offset))

    def carry_abandon(self) -> None:
        """The seek that began a carry failed: the cursor stays, and so does everything its replay
        start may still need (``carry_end`` would forget the committed transactions)."""
        self._carrying = None

    def read_all_but_own(self, end: int) -> bool:
        """Every record of the log below ``end`` was read here, or is an ack record this consumer
        wrote (nobody else wrote to the partition's log since)."""
        return all(o in self._own for o in range(self.next_offset, end))

    def _skip(self, offset: int, why: str) -> None:
        self.skipped += 1
        THROTTLE.warning(
            log,
            (self.topic, self.partition, "pending-ack"),
            "%s[%d]@%d pending-ack record skipped: %s",
            self.topic,
            self.partition,
            offset,
            why,
        )
