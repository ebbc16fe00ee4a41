"""Pulsar's PendingAckHandle for one (subscription, topic, partition): acks made inside transactions
that have not ended yet, over the subscription's ``Cursor``.

It is a pure fold of the pending-ack log: ``apply_ack`` for each ack record, ``apply_outcome`` for
each COMMIT/ABORT. ``check`` enforces Pulsar's conflict rules before an ack is written; replay skips
it (the log is the truth). A message is delivered only if it is neither ``cursor.is_acked`` nor
``is_pending``.

Should the log hold acks ``check`` would refuse (two owners of a partition at once: a paused
consumer that has not yet noticed its successor), every claim counts: an offset stays pending while
any transaction that acked it is open, is acked once one of them commits, and comes back only once
all of them aborted. Which of them may commit is not the fold's call: the consumer's ownership check
(a group commit before END_TXN) lets only the partition's current owner commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pulsar_txn.errors import NotAllowedError, TransactionConflict
from pulsar_txn.subscription.cursor import Cursor
from pulsar_txn.txnid import TxnAction, TxnID


class AckKind(StrEnum):
    INDIVIDUAL = "INDIVIDUAL"
    CUMULATIVE = "CUMULATIVE"


class PendingAckState:
    __slots__ = ("_by_txn", "_cum", "_cum_pos", "_individual", "_more", "cursor")

    def __init__(self, cursor: Cursor) -> None:
        self.cursor = cursor
        self._individual: dict[int, TxnID] = {}  # offset -> the first txn holding it pending
        self._more: dict[int, list[TxnID]] = {}  # offset -> later txns acking it too (rare, see above)
        self._by_txn: dict[TxnID, set[int]] = {}  # txn -> its pending individual offsets (never empty)
        self._cum: dict[TxnID, int] = {}  # txn -> its pending cumulative ack (one txn, unless as above)
        self._cum_pos = -1  # the highest of them; -1 when none

    # ------------------------------------------------------------------ hot path
    def is_pending(self, offset: int) -> bool:
        """Acked individually in an open txn, or covered by a pending cumulative ack (and not acked)."""
        if offset in self._individual:
            return True
        return offset <= self._cum_pos and not self.cursor.is_acked(offset)

    def _cum_holder(self, txn: TxnID) -> tuple[TxnID | None, int]:
        """Another txn holding a pending cumulative ack, and the highest position of such acks."""
        others = [(t, p) for t, p in self._cum.items() if t != txn]
        if not others:
            return None, -1
        return others[0][0], max(p for _t, p in others)

    # ------------------------------------------------------------------ rules
    def check(self, txn: TxnID, kind: AckKind, offsets: Sequence[int]) -> None:
        """Raise ``TransactionConflict`` / ``NotAllowedError`` if Pulsar would refuse this ack."""
        if kind == AckKind.CUMULATIVE:
            holder = self._cum_holder(txn)[0]
            if len(offsets) != 1:
                raise NotAllowedError(
                    f"transaction {txn}: cumulative ack in a transaction takes exactly one message id, "
                    f"got {len(offsets)}"
                )
            pos = offsets[0]
            md = self.cursor.mark_delete
            if pos < md:
                raise TransactionConflict(
                    f"transaction {txn} cannot cumulatively ack offset {pos}: already acked "
                    f"(every offset below {md} is acked)"
                )
            if holder is not None:
                raise TransactionConflict(
                    f"transaction {txn} cannot cumulatively ack offset {pos}: transaction {holder} holds "
                    f"a pending cumulative ack at offset {self._cum[holder]} on this subscription"
                )
            own = self._cum.get(txn)
            if own is not None and pos <= own:
                raise TransactionConflict(
                    f"transaction {txn} cannot cumulatively ack offset {pos}: it already has a pending "
                    f"cumulative ack at offset {own} (a repeat must move forward)"
                )
            clash = min(
                (o for o, t in self._individual.items() if o <= pos and (t != txn or o in self._more)),
                default=None,
            )
            if clash is not None:
                who = [t for t in (self._individual[clash], *self._more.get(clash, ())) if t != txn]
                raise TransactionConflict(
                    f"transaction {txn} cannot cumulatively ack offset {pos}: offset {clash} is pending "
                    f"in transaction {who[0]}"
                )
            return
        if kind != AckKind.INDIVIDUAL:
            raise ValueError(f"unknown ack kind {kind!r}")
        if self._no_conflict(txn, offsets):
            return
        refused = self._first_conflict(txn, offsets)  # some offset is refused: name it and the rule
        if refused is not None:
            raise TransactionConflict(refused)

    def _first_conflict(self, txn: TxnID, offsets: Sequence[int]) -> str | None:
        """Why the first refused offset of an individual ack is refused (None: none is), one by one."""
        holder, cum_pos = self._cum_holder(txn)
        seen: set[int] = set()
        for o in offsets:
            if self.cursor.is_acked(o):
                return (
                    f"transaction {txn} cannot ack offset {o}: already acked (committed) on this subscription"
                )
            owner = self._individual.get(o)
            if owner is not None:
                who = "this transaction" if owner == txn else f"transaction {owner}"
                return f"transaction {txn} cannot ack offset {o}: already pending in {who}"
            if holder is not None and o <= cum_pos:
                return (
                    f"transaction {txn} cannot ack offset {o}: transaction {holder} holds a pending "
                    f"cumulative ack at offset {cum_pos}"
                )
            if o in seen:
                return f"transaction {txn} cannot ack offset {o}: listed twice in one ack"
            seen.add(o)
        return None

    def _no_conflict(self, txn: TxnID, offsets: Sequence[int]) -> bool:
        """The individual-ack rules for a whole list at once, with set operations (an
        ``acknowledge(list)`` checks a batch per call): True if no offset is refused."""
        if not offsets:
            return True
        distinct = set(offsets)
        lowest = min(distinct)
        cursor = self.cursor
        return (
            len(distinct) == len(offsets)
            and lowest >= cursor.mark_delete
            and (not cursor.acked or not any(o in cursor.acked for o in distinct))
            and distinct.isdisjoint(self._individual)
            and (not self._cum or lowest > self._cum_holder(txn)[1])
        )

    # ------------------------------------------------------------------ fold
    def apply_ack(self, txn: TxnID, kind: AckKind, offsets: Sequence[int]) -> None:
        """Record an ack as pending, without checks. An offset (or the cumulative slot) pending in
        another transaction already stays pending in both (see the module's docstring)."""
        if not offsets:
            return
        if kind == AckKind.CUMULATIVE:
            pos = max(offsets)  # one offset unless the log is malformed
            self._cum[txn] = max(self._cum.get(txn, -1), pos)
            self._cum_pos = max(self._cum_pos, pos)
            return
        if kind != AckKind.INDIVIDUAL:
            raise ValueError(f"unknown ack kind {kind!r}")
        mine = self._by_txn.setdefault(txn, set())
        individual = self._individual
        if individual.keys().isdisjoint(offsets):  # nobody else holds any of them
            individual.update(dict.fromkeys(offsets, txn))
            mine.update(offsets)
            return
        for o in offsets:
            first = individual.setdefault(o, txn)
            if first != txn:
                more = self._more.setdefault(o, [])
                if txn not in more:
                    more.append(txn)
            mine.add(o)

    def apply_outcome(self, txn: TxnID, action: TxnAction) -> list[int]:
        """End ``txn`` here. COMMIT acks its offsets in the cursor and returns []; ABORT returns the
        offsets that become deliverable again, sorted. A txn with nothing pending here is a no-op."""
        mine = self._by_txn.pop(txn, None)
        cum = self._cum.pop(txn, None)
        if cum is not None:
            self._cum_pos = max(self._cum.values(), default=-1)
        if mine is None and cum is None:
            return []
        for o in mine or ():
            self._release(txn, o)
        cursor = self.cursor
        if action == TxnAction.COMMIT:
            if cum is not None:
                cursor.ack_cumulative(cum)
            for o in sorted(mine or ()):
                cursor.ack(o)
            return []
        if action != TxnAction.ABORT:
            raise ValueError(f"unknown transaction action {action!r}")
        released = {o for o in mine or () if not cursor.is_acked(o) and not self.is_pending(o)}
        if cum is not None:
            # Every offset up to the position that is neither acked nor pending: walked over the
            # cursor's gaps, not the whole span (a mark-delete held far back by one message made
            # this millions of steps under the consumer's lock). Offsets up to another transaction's
            # cumulative position stay pending.
            individual = self._individual
            start = max(cursor.mark_delete, self._cum_pos + 1)
            for lo, hi in cursor.acked.gaps(start, cum):
                released.update(o for o in range(lo, hi + 1) if o not in individual)
        return sorted(released)

    def _release(self, txn: TxnID, offset: int) -> None:
        """Drop ``txn``'s claim on ``offset``; a later claimer, if any, holds it from now on."""
        more = self._more.get(offset)
        if more is None:
            del self._individual[offset]
            return
        if self._individual[offset] == txn:
            self._individual[offset] = more.pop(0)
        elif txn in more:
            more.remove(txn)
        if not more:
            del self._more[offset]

    def last_individual(self, txn: TxnID) -> int | None:
        """The highest offset ``txn`` holds individually here (None: none)."""
        mine = self._by_txn.get(txn)
        return max(mine) if mine else None

    def pending_acks(self) -> list[tuple[TxnID, AckKind, list[int]]]:
        """Every pending ack as the records that would make it pending again (one per transaction
        and kind)."""
        out = [(t, AckKind.INDIVIDUAL, sorted(offsets)) for t, offsets in self._by_txn.items()]
        out += [(t, AckKind.CUMULATIVE, [pos]) for t, pos in self._cum.items()]
        return out

    # ------------------------------------------------------------------ introspection
    def pending_txns(self) -> dict[TxnID, int]:
        """txn -> pending message ids (its individual acks; a cumulative ack counts as one)."""
        counts = {t: len(offsets) for t, offsets in self._by_txn.items()}
        for t in self._cum:
            counts[t] = counts.get(t, 0) + 1
        return counts

    def txn_stats(self, txn: TxnID) -> dict[str, object]:
        """``transaction-in-pending-ack-stats``: ``txn``'s pending acks here."""
        return {
            "txn_id": str(txn),
            "cumulative_ack_position": self._cum.get(txn),
            "individual_ack_count": len(self._by_txn.get(txn, ())),
        }

    def position_stats(self, offset: int) -> dict[str, object]:
        """``position-stats-in-pending-ack``: ``state`` MarkDelete (below the mark-delete position),
        Acked (acknowledged individually beyond it), PendingAck (held by an open transaction:
        ``txns``) or NotInPendingAck."""
        cursor = self.cursor
        txns = [self._individual[offset], *self._more.get(offset, ())] if offset in self._individual else []
        if offset < cursor.mark_delete:
            state = "MarkDelete"
        elif cursor.is_acked(offset):
            state = "Acked"
        elif self.is_pending(offset):
            state = "PendingAck"
            txns += [t for t, p in self._cum.items() if offset <= p and t not in txns]
        else:
            state = "NotInPendingAck"
        return {"state": state, "txns": [str(t) for t in txns]}

    def pending_count(self) -> int:
        """Pending message ids, each counted once however many transactions hold it."""
        return len(self._individual) + bool(self._cum)

    def stats(self) -> dict[str, object]:
        cum = ", ".join(f"{t}@{p}" for t, p in self._cum.items())
        return {
            "pending_ack_count": self.pending_count(),
            "txns": {str(t): n for t, n in sorted(self.pending_txns().items())},
            "cumulative": cum or None,
            "mark_delete": self.cursor.mark_delete,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PendingAckState):
            return NotImplemented
        return (
            self.cursor == other.cursor
            and self._individual == other._individual
            and self._more == other._more
            and self._cum == other._cum
        )

    def __repr__(self) -> str:
        cum = ", ".join(f"{t}@{p}" for t, p in self._cum.items()) or None
        return f"PendingAckState({self.cursor!r}, pending={self.pending_txns()}, cumulative={cum})"
