"""Pulsar's PendingAckHandle for one (subscription, topic, partition): acks made inside transactions
that have not ended yet, over the subscription's ``Cursor``.

It is a pure fold of the pending-ack log: ``apply_ack`` for each ack record, ``apply_outcome`` for
each COMMIT/ABORT. ``check`` enforces Pulsar's conflict rules before an ack is written; replay skips
it (the log is the truth). A message is delivered only if it is neither ``cursor.is_acked`` nor
``is_pending``.
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
    __slots__ = ("_by_txn", "_cum_pos", "_cum_txn", "_individual", "cursor")

    def __init__(self, cursor: Cursor) -> None:
        self.cursor = cursor
        self._individual: dict[int, TxnID] = {}  # offset -> txn holding it pending
        self._by_txn: dict[TxnID, set[int]] = {}  # txn -> its pending individual offsets (never empty)
        self._cum_txn: TxnID | None = None  # the one txn holding the pending cumulative ack
        self._cum_pos = -1  # its position; -1 when none

    # ------------------------------------------------------------------ hot path
    def is_pending(self, offset: int) -> bool:
        """Acked individually in an open txn, or covered by the pending cumulative ack (and not acked)."""
        if offset in self._individual:
            return True
        return offset <= self._cum_pos and not self.cursor.is_acked(offset)

    # ------------------------------------------------------------------ rules
    def check(self, txn: TxnID, kind: AckKind, offsets: Sequence[int]) -> None:
        """Raise ``TransactionConflict`` / ``NotAllowedError`` if Pulsar would refuse this ack."""
        holder, cum_pos = self._cum_txn, self._cum_pos
        if kind == AckKind.CUMULATIVE:
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
            if holder is not None and holder != txn:
                raise TransactionConflict(
                    f"transaction {txn} cannot cumulatively ack offset {pos}: transaction {holder} holds "
                    f"a pending cumulative ack at offset {cum_pos} on this subscription"
                )
            if holder == txn and pos <= cum_pos:
                raise TransactionConflict(
                    f"transaction {txn} cannot cumulatively ack offset {pos}: it already has a pending "
                    f"cumulative ack at offset {cum_pos} (a repeat must move forward)"
                )
            clash = min((o for o, t in self._individual.items() if o <= pos and t != txn), default=None)
            if clash is not None:
                raise TransactionConflict(
                    f"transaction {txn} cannot cumulatively ack offset {pos}: offset {clash} is pending "
                    f"in transaction {self._individual[clash]}"
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
        holder, cum_pos = self._cum_txn, self._cum_pos
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
            if holder is not None and holder != txn and o <= cum_pos:
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
        holder = self._cum_txn
        return (
            len(distinct) == len(offsets)
            and lowest >= cursor.mark_delete
            and (not cursor.acked or not any(o in cursor.acked for o in distinct))
            and distinct.isdisjoint(self._individual)
            and (holder is None or holder == txn or lowest > self._cum_pos)
        )

    # ------------------------------------------------------------------ fold
    def apply_ack(self, txn: TxnID, kind: AckKind, offsets: Sequence[int]) -> None:
        """Record an ack as pending, without checks. Should the log hold acks ``check`` would refuse,
        the last one wins: an offset or the cumulative slot moves to the later transaction."""
        if not offsets:
            return
        if kind == AckKind.CUMULATIVE:
            pos = max(offsets)  # one offset unless the log is malformed
            if self._cum_txn == txn:
                self._cum_pos = max(self._cum_pos, pos)
            else:
                self._cum_txn, self._cum_pos = txn, pos
            return
        if kind != AckKind.INDIVIDUAL:
            raise ValueError(f"unknown ack kind {kind!r}")
        mine = self._by_txn.setdefault(txn, set())
        individual = self._individual
        if individual.keys().isdisjoint(offsets):  # nothing moves from another transaction
            individual.update(dict.fromkeys(offsets, txn))
            mine.update(offsets)
            return
        for o in offsets:
            prev = self._individual.get(o)
            if prev is not None and prev != txn:
                self._drop(prev, o)
            self._individual[o] = txn
            mine.add(o)

    def apply_outcome(self, txn: TxnID, action: TxnAction) -> list[int]:
        """End ``txn`` here. COMMIT acks its offsets in the cursor and returns []; ABORT returns the
        offsets that become deliverable again, sorted. A txn with nothing pending here is a no-op."""
        mine = self._by_txn.pop(txn, None)
        cum: int | None = None
        if self._cum_txn == txn:
            cum, self._cum_txn, self._cum_pos = self._cum_pos, None, -1
        if mine is None and cum is None:
            return []
        individual = self._individual
        for o in mine or ():
            del individual[o]
        cursor = self.cursor
        if action == TxnAction.COMMIT:
            if cum is not None:
                cursor.ack_cumulative(cum)
            for o in sorted(mine or ()):
                cursor.ack(o)
            return []
        if action != TxnAction.ABORT:
            raise ValueError(f"unknown transaction action {action!r}")
        candidates = set(mine or ())
        if cum is not None:
            candidates.update(range(cursor.mark_delete, cum + 1))
        return sorted(o for o in candidates if not cursor.is_acked(o) and not self.is_pending(o))

    def _drop(self, txn: TxnID, offset: int) -> None:
        offsets = self._by_txn[txn]
        offsets.discard(offset)
        if not offsets:
            del self._by_txn[txn]

    # ------------------------------------------------------------------ introspection
    def pending_txns(self) -> dict[TxnID, int]:
        """txn -> pending message ids (its individual acks; a cumulative ack counts as one)."""
        counts = {t: len(offsets) for t, offsets in self._by_txn.items()}
        if self._cum_txn is not None:
            counts[self._cum_txn] = counts.get(self._cum_txn, 0) + 1
        return counts

    def pending_count(self) -> int:
        return len(self._individual) + (self._cum_txn is not None)

    def stats(self) -> dict[str, object]:
        return {
            "pending_ack_count": self.pending_count(),
            "txns": {str(t): n for t, n in sorted(self.pending_txns().items())},
            "cumulative": None if self._cum_txn is None else f"{self._cum_txn}@{self._cum_pos}",
            "mark_delete": self.cursor.mark_delete,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PendingAckState):
            return NotImplemented
        return (
            self.cursor == other.cursor
            and self._individual == other._individual
            and self._cum_txn == other._cum_txn
            and self._cum_pos == other._cum_pos
        )

    def __repr__(self) -> str:
        cum = None if self._cum_txn is None else f"{self._cum_txn}@{self._cum_pos}"
        return f"PendingAckState({self.cursor!r}, pending={self.pending_txns()}, cumulative={cum})"
