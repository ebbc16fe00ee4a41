"""Cursor commits to the subscription's group, the pending-ack log's trim that follows them,
and the ownership check a transaction's commit makes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from kafka_store import (
    StoreError,
)
from pulsar_txn._future import LazyFuture
from pulsar_txn.errors import (
    PersistenceError,
    TransactionConflict,
)
from pulsar_txn.pendingack.stats import join_metadata
from pulsar_txn.subscription._base import (
    TP,
    TRIM_INTERVAL_S,
    ConsumerBase,
    Part,
    T,
    log,
)
from pulsar_txn.txnid import TxnID

if TYPE_CHECKING:
    pass


class CursorCommits(ConsumerBase[T]):
    """The consumer's commits (a part of ``Consumer``)."""

    def _flush_part(self, part: Part, *, force: bool = False, in_callback: bool = False) -> bool:
        """Commit the partition's cursor if it changed (or ``force``); False if the commit failed.

        The group commits what it is handed in the order it is handed over, so the snapshot is taken
        and handed over under ``_commit_lock``: an older cursor is never committed after a newer one
        (before, the upkeep's flush could land after a seek's commit and undo the seek). A rebalance
        callback (``in_callback``: on the group's thread, maybe under ``_lock``) commits at once
        without it, as a commit handed over meanwhile waits for the callback to return: one of a
        revoked partition is then dropped; one of a partition kept may land after this commit, so
        the cursor is committed again after it. Outside callbacks, only a partition still held is
        committed (the upkeep may hold one revoked meanwhile, whose cursor is no longer ours)."""
        if in_callback:
            done = self._hand_over([part], force, held_only=False)
            ok = self._committed_in_time(done)
            with self._lock:
                if ok and self._parts.get(part.tp) is part:
                    part.dirty = True
            return ok
        with self._commit_lock:
            done = self._hand_over([part], force, held_only=True)
        return self._committed_in_time(done)

    def _hand_over(self, parts: Sequence[Part], force: bool, *, held_only: bool) -> Future[None] | None:
        """Snapshot the cursors and hand them to the group (None: nothing to commit). The returned
        future fails with StoreError if the group refused them."""
        offsets: dict[TP, tuple[int, str]] = {}
        trims: dict[TP, int] = {}
        with self._lock:
            for part in parts:
                if (not part.dirty and not force) or (held_only and self._parts.get(part.tp) is not part):
                    continue
                ranges, dropped = part.cursor.encode_ranges()
                if dropped:
                    log.warning(
                        "%s %s: %d acked ranges too many to persist in the cursor; plain acks there may be "
                        "redelivered after a restart (committed transactions' acks are redone from the "
                        "pending-ack log)",
                        self.subscription,
                        part.tp,
                        dropped,
                    )
                part.fold.forget_committed_below(part.cursor.mark_delete)
                start = part.fold.replay_start(part.cursor.unpersisted_from(dropped))
                # Of the state this cursor holds: recovery reads from here, the trim cuts below it.
                trims[part.tp] = part.fold.trim_point()
                base = self._base_partitions.get(part.tp[0])
                offsets[part.tp] = (
                    part.cursor.mark_delete,
                    join_metadata(start, trims[part.tp], ranges, base),
                )
                part.dirty = False
        if not offsets:
            return None
        done = self._group.commit_async(offsets)
        by_tp = {p.tp: p for p in parts if p.tp in offsets}

        def landed(fut: Future[None]) -> None:
            failed = fut.exception() is not None
            with self._lock:
                for tp, part in by_tp.items():
                    if failed:
                        part.dirty = True
                    else:
                        part.committed = offsets[tp]
            if not failed:
                for tp, part in by_tp.items():
                    self._trim(part, trims[tp])

        done.add_done_callback(landed)
        return done

    def _trim(self, part: Part, below: int) -> None:
        """Delete the part's pending-ack log below ``below``, now that a cursor committed to the group
        holds every ack of the records there (at most every ``TRIM_INTERVAL_S``; never waits)."""
        now = time.monotonic()
        with self._lock:
            if below <= part.trimmed:
                return
            if now < part.trim_due:
                part.trim_ready = max(part.trim_ready, below)
                return
            if (part.pa_topic, part.tp[1]) not in self._pa_topics_ready:
                return  # no log yet (nothing was ever acked in a transaction here)
            before = part.trimmed
            part.trimmed, part.trim_due = below, now + TRIM_INTERVAL_S
        pa_topic, partition = part.pa_topic, part.tp[1]

        def answered(fut: Future[None]) -> None:
            exc = fut.exception()
            if exc is not None:
                log.warning(
                    "%s: trimming %s[%d] below %d failed: %s",
                    self.subscription,
                    pa_topic,
                    partition,
                    below,
                    exc,
                )
                with self._lock:  # the upkeep tries again once the interval has passed
                    part.trimmed = min(part.trimmed, before)
                    part.trim_ready = max(part.trim_ready, below)
            else:
                log.debug("%s: %s[%d] trimmed below %d", self.subscription, pa_topic, partition, below)

        self._client._admin.delete_records_before(pa_topic, partition, below).add_done_callback(answered)

    def _committed_in_time(self, done: Future[None] | None) -> bool:
        if done is None:
            return True
        try:
            done.result(self._client.kafka.request_timeout_ms / 1000)
        except TimeoutError:
            log.warning("%s: cursor commit timed out (will retry)", self.subscription)
            return False
        except StoreError as exc:
            log.warning("%s: cursor commit failed (will retry): %s", self.subscription, exc)
            return False
        return True

    def _ownership_check(self, txn_id: TxnID) -> Future[None]:
        """A transaction's commit check: this consumer still owns every partition it acked on in
        ``txn_id``, shown by committing their cursors as a member of the group, now that the ack
        records are stored. A consumer paused past its session (or fenced by a newer static member)
        has lost them without noticing; its successor may be processing the same messages, so the
        group refuses the commit and the transaction aborts. Once the commit has landed, a successor
        can only be assigned the partitions later, and then recovers these acks as pending."""
        result: Future[None] = LazyFuture()
        with self._lock:
            parts = list(self._txn_parts.get(txn_id, {}).values())
            held = [p for p in parts if self._parts.get(p.tp) is p]
            lost = [p.tp for p in parts if self._parts.get(p.tp) is not p and not p.handed_over]
        if lost:
            result.set_exception(
                TransactionConflict(
                    f"transaction {txn_id}: subscription {self.subscription!r} lost {lost} before its "
                    "acks there were handed over; another consumer may have processed those messages"
                )
            )
            return result
        with self._commit_lock:
            # Not held_only: a partition revoked or lost since ``held`` was taken must still be
            # committed, so that the group (which refuses partitions it no longer assigns us) decides,
            # instead of being left out of the check.
            done = self._hand_over(held, True, held_only=False)
        if done is None:
            result.set_result(None)
            return result

        def answered(fut: Future[None]) -> None:
            exc = fut.exception()
            if exc is None:
                result.set_result(None)
            elif isinstance(exc, StoreError) and not exc.retriable:
                result.set_exception(
                    TransactionConflict(
                        f"transaction {txn_id}: subscription {self.subscription!r} is no longer this "
                        f"consumer's ({exc}); another consumer may have processed the acked messages"
                    )
                )
            else:
                result.set_exception(
                    PersistenceError(f"transaction {txn_id}: ownership check failed: {exc}", retriable=True)
                )

        done.add_done_callback(answered)
        return result
