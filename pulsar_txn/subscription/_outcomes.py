"""Transaction outcomes on this subscription: from END_TXN of our own transactions, from the
pending-ack log's tail (others' commits and aborts, timeouts) and from the TC's log (stale pending
acks); commit forgets the acked messages, abort redelivers them."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from kafka_store import (
    StoreError,
    read_range,
)
from pulsar_txn._boundary import public_errors
from pulsar_txn.errors import (
    from_store_error,
)
from pulsar_txn.pendingack.state import AckKind
from pulsar_txn.subscription._base import (
    TP,
    ConsumerBase,
    Part,
    T,
    complete_dropped,
    log,
)
from pulsar_txn.transaction import TransactionState
from pulsar_txn.txnid import TxnAction, TxnID

if TYPE_CHECKING:
    pass


@public_errors
class Outcomes(ConsumerBase[T]):
    """The consumer's outcomes (a part of ``Consumer``)."""

    def _apply_outcomes(self) -> None:
        with self._pa_lock:  # not under _lock: opening the tail's idle gate may poll for a few ms
            if self._pa_reader is None or not self._pa_topics_ready:
                return
            records = self._pa_reader.poll_batch(1000, 0)
        # A partition revoked (or re-opened) meanwhile: its records are skipped (or applied again,
        # which outcome records tolerate).
        dropped: list[Future[None]] = []
        with self._lock:
            for rec in records:
                part = self._parts.get((self._pa_to_data.get(rec.topic, ""), rec.partition))
                if part is None or part.pa_topic != rec.topic:
                    continue
                try:
                    outcomes = part.fold.apply(rec, live=True)
                except Exception:  # a bug on one record must not drop the others of the batch
                    log.exception(
                        "%s: folding %s[%d]@%d failed",
                        self.subscription,
                        rec.topic,
                        rec.partition,
                        rec.offset,
                    )
                    continue
                for txn_id, action, released in outcomes:
                    part.dirty = True
                    # The same rules as an outcome from END_TXN: a released message that is delivered
                    # and not acked (e.g. below a cumulative ack) stays the application's, no refetch.
                    self._after_outcome(part, txn_id, action, released, dropped)
        complete_dropped(dropped)

    def _release_stale(self) -> None:
        """Release transactions pending here whose TC aborted them (``StalePendingCheck``)."""
        if not self._stale.observing():  # the upkeep loop runs every 20 ms; this need not
            return
        with self._lock:
            # Our own transactions too once their end failed for good (ERROR: e.g. ended elsewhere
            # before an ack written after its outcome): no end listener releases those acks.
            pending = {
                t
                for p in self._parts.values()
                for t in p.pending.pending_txns()
                if t not in self._txn_parts or self._txn_handles[t].state is TransactionState.ERROR
            }
        due = self._stale.due(pending)
        if not due:
            return
        try:
            aborted = self._stale.aborted(due)  # reads Kafka: outside the locks
        except StoreError as exc:
            log.warning("%s: looking up pending transactions failed (retried): %s", self.subscription, exc)
            return
        for txn_id in aborted:
            log.warning(
                "%s: %s was pending here but its TC aborted it (its acks were written after its abort "
                "marker); released",
                self.subscription,
                txn_id,
            )
            self._txn_ended(txn_id, TxnAction.ABORT)

    def release_if_aborted(self, txn_ids: Collection[TxnID]) -> list[TxnID]:
        """Look ``txn_ids`` up in their TC's log now and release those it aborted (or forgot) here,
        without waiting ``pending_ack_check_after_ms``: for a caller that has just aborted them, e.g.
        the pipeline fencing off a previous run (an ack record written after its transaction's abort
        marker is released by nothing else). Returns the ones released."""
        try:
            aborted = self._stale.aborted(txn_ids)
        except StoreError as exc:
            raise from_store_error(exc, "looking up transactions in the transaction log") from None
        for txn_id in aborted:
            self._txn_ended(txn_id, TxnAction.ABORT)
        return aborted

    def _txn_ended(self, txn_id: TxnID, action: TxnAction) -> None:
        """An outcome learnt first-hand: straight from END_TXN of a transaction we acked in (applied
        now, so the caller sees its effect at once; Pulsar applies it before END_TXN returns), or from
        the TC's log (``_release_stale``). On END_TXN's path this runs on the thread that got its
        answer, which other answers wait for; ``_after_outcome`` leaves the reading to the upkeep
        thread."""
        dropped: list[Future[None]] = []
        with self._lock:
            for part in self._parts.values():
                released = part.fold.apply_outcome(txn_id, action)
                part.dirty = True
                self._after_outcome(part, txn_id, action, released, dropped)
        complete_dropped(dropped)

    def _take_held(self, txn_id: TxnID, tp: TP) -> list[int] | None:
        """Remove and return the offsets ``txn_id`` moved into ``_in_txn`` on ``tp``."""
        by_tp = self._txn_offsets.get(txn_id)
        if by_tp is None:
            return None
        held = by_tp.pop(tp, None)
        if not by_tp:
            del self._txn_offsets[txn_id]
        return held

    def _after_outcome(
        self,
        part: Part,
        txn_id: TxnID,
        action: TxnAction,
        released: Sequence[int],
        dropped: list[Future[None]],
    ) -> None:
        """Commit: forget the messages now acked. Abort: redeliver what we hold; the rest (released,
        never delivered here, e.g. after a restart) is queued for the upkeep thread to read again: a
        Kafka read does not belong under ``_lock``, nor on the thread that got END_TXN's answer."""
        held = self._take_held(txn_id, part.tp)
        self._txn_parts.pop(txn_id, None)
        self._txn_handles.pop(txn_id, None)
        # Acks of the ended txn still batched here are never written: after its marker they would
        # hold the messages pending (and pin the replay start) for good. Whoever waits is done, once
        # the caller has released ``_lock`` (a waiting end goes on from that callback).
        for kind in AckKind:
            batch = self._ack_batches.pop((txn_id, part.tp, kind), None)
            if batch is not None:
                dropped.append(batch.written)
        if action is TxnAction.COMMIT:
            topic, partition = part.tp
            counts = self._redelivery_counts
            for offset in held or ():
                if part.cursor.is_acked(offset):
                    self._in_txn.pop((topic, partition, offset), None)
                    counts.pop((topic, partition, offset), None)
            if (txn_id, part.tp) in self._cum_txns:
                self._cum_txns.discard((txn_id, part.tp))
                # A cumulative commit also acked every lower message still held as unacked here.
                md = part.cursor.mark_delete
                below = [k for k, _e in self._unacked.take_upto((topic, partition), md - 1)]
                below += [k for k in counts if k[0] == topic and k[1] == partition and k[2] < md]
                for k in below:
                    counts.pop(k, None)
            return
        cumulative = (txn_id, part.tp) in self._cum_txns
        self._cum_txns.discard((txn_id, part.tp))
        missing = []
        queued: set[int] | None = None
        for offset in released:
            key = (part.tp[0], part.tp[1], offset)
            msg = self._in_txn.pop(key, None)
            if msg is not None:
                self._redeliver(msg, 0)
            elif key not in self._unacked:  # delivered and unacked: still the application's
                if queued is None:
                    queued = self._queued_offsets(part.tp)
                if offset not in queued:  # read ahead and queued here: delivered from the queue
                    missing.append(offset)
        if held:
            # Held offsets the abort did not release were acked plainly meanwhile: nothing to redeliver.
            kept = set(released)
            topic, partition = part.tp
            for offset in held:
                if offset not in kept:
                    self._in_txn.pop((topic, partition, offset), None)
        if cumulative:
            # As Pulsar's pending-ack handle on a cumulative abort: every message of the partition
            # delivered here and not acked comes again (and counts toward max redeliveries), not
            # only the acked position.
            topic, partition = part.tp
            for _key, (msg, _at) in self._unacked.take_partition((topic, partition)):
                self._redeliver(msg, 0)
        if missing:
            self._refetch_due.append((part.tp, missing))

    def _queued_offsets(self, tp: TP) -> set[int]:
        """Offsets of ``tp`` waiting here to be delivered (read ahead, or due for redelivery). Under
        ``_lock``."""
        return {
            m.message_id.offset
            for m in [*self._incoming, *(r.message for r in self._redeliveries)]
            if (m.message_id.topic, m.message_id.partition) == tp
        }

    def _held_here(self, tp: TP, offset: int) -> bool:
        """Whether the application holds the message now (delivered and unacked, or acked in a
        transaction): a refetch must not deliver it a second time. Under ``_lock``."""
        key = (tp[0], tp[1], offset)
        return key in self._unacked or key in self._in_txn

    def _refetch(self, tp: TP, offsets: list[int]) -> None:
        """Messages released by an abort that this process never delivered (e.g. after a restart)."""
        with self._read_lock, self._lock:
            opened = self._parts.get(tp)
            if opened is None:
                return
            # Offsets the reader has not passed yet, or has queued, will be delivered anyway.
            ahead = self._reader.position(*tp)
            queued = self._queued_offsets(tp)
            wanted = {o for o in offsets if o < ahead and o not in queued}
        if not wanted:
            return
        lo, hi = min(wanted), max(wanted) + 1
        for rec in read_range(self._client.kafka, tp[0], tp[1], lo, hi):
            if rec.offset in wanted:
                with self._read_lock, self._lock:
                    part = self._parts.get(tp)
                    if (
                        # The read took a while: a seek back (or the partition revoked and opened
                        # again) meanwhile has the reader deliver it, so it is not queued twice.
                        part is opened
                        and rec.offset < self._reader.position(*tp)
                        and rec.offset not in self._queued_offsets(tp)
                        and part.pending.is_pending(rec.offset) is False
                        and not part.cursor.is_acked(rec.offset)
                        # delivered since (it was queued when the abort came): not again
                        and not self._held_here(tp, rec.offset)
                        and self._reader.visible(tp[0], tp[1], rec.offset, rec.headers)
                    ):
                        self._redeliver(self._decode(rec), 0)
