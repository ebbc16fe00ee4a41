"""Pending acks of transactions that their TC has ended: found in the TC's log, released as aborted.

An ack record can land after its transaction's ABORT marker (a commit's write racing the TC's
timeout abort). A fold that saw the marker ignores it, and a later marker of the same TC covers
the transaction with its low watermark. But a replay that starts between the marker and the record
holds the acks pending until such a marker comes, and a subscription whose traffic stopped would
hold them for good. So a consumer asks the TC's log about transactions pending in its folds for a
while that are not its own (the TB service does the same for data partitions).

Only an ended one is released: one the TC aborted or has forgotten (it ended long ago; a
commit's ack records always precede its marker, so records replayed without it cannot be a
commit's). A transaction still open may be another consumer's, which may still commit it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from kafka_store import KafkaConfig, StoreError
from pulsar_txn.coordinator.fold import ended_as, read_tc_log
from pulsar_txn.txnid import TxnAction, TxnID

log = logging.getLogger(__name__)


class StalePendingCheck:
    """Which pending transactions have stayed pending for ``after_s`` and were aborted by their TC.

    ``due`` is cheap (call it when ``observing``); ``aborted`` reads TC logs (raises
    ``kafka_store.StoreError``) and runs at most every ``after_s / 2`` (at most every 5 s), off any
    lock."""

    def __init__(
        self,
        kafka: KafkaConfig,
        log_topic: str,
        after_s: float,
        clock: Callable[[], float] = time.monotonic,
        secret: bytes | None = None,
    ) -> None:
        self._kafka = kafka
        self._secret = secret  # the marker secret: only authenticated TC log records count
        self._log_topic = log_topic
        self.after_s = after_s
        self._clock = clock
        self._first_seen: dict[TxnID, float] = {}
        self._next_check = 0.0
        self._next_look = 0.0

    def observing(self) -> bool:
        """Whether the caller should gather the pending transactions for ``due`` now: at most every
        ``min(1 s, after_s / 4)``, so a caller's frequent loop does not build that set each time."""
        now = self._clock()
        if now < self._next_look:
            return False
        self._next_look = now + min(1.0, self.after_s / 4)
        return True

    def due(self, pending: Collection[TxnID]) -> list[TxnID]:
        """Track ``pending`` (the transactions pending now, not this consumer's own); those pending
        for ``after_s`` or longer, if a check is due now, else []."""
        now = self._clock()
        seen = self._first_seen
        for txn in [t for t in seen if t not in pending]:
            del seen[txn]
        for txn in pending:
            seen.setdefault(txn, now)
        if now < self._next_check:
            return []
        self._next_check = now + min(5.0, self.after_s / 2)
        return sorted(t for t, since in seen.items() if now - since >= self.after_s)

    def aborted(self, txns: Collection[TxnID]) -> list[TxnID]:
        """Those of ``txns`` their TC has aborted or forgotten (one log read per TC). A TC whose log
        cannot be read is skipped this round (logged), not the others: raises
        ``kafka_store.StoreError`` only if every TC's read failed."""
        return [t for t, action in self.outcomes(txns).items() if action is TxnAction.ABORT]

    def outcomes(self, txns: Collection[TxnID], *, decided: bool = False) -> dict[TxnID, TxnAction]:
        """How their TCs ended those of ``txns`` that have ended (forgotten ones as aborted), TC
        logs that cannot be read skipped as in ``aborted``; with ``decided``, those whose outcome is
        decided and still being carried out count too."""
        out: dict[TxnID, TxnAction] = {}
        failure: StoreError | None = None
        read = 0
        for tc in sorted({t.most_bits for t in txns}):
            try:
                fold = read_tc_log(self._kafka, self._log_topic, tc, self._secret)
            except StoreError as exc:
                log.warning("pending transactions of TC %d not looked up: %s", tc, exc)
                failure = exc
                continue
            read += 1
            for t in txns:
                action = ended_as(fold, t, decided=decided) if t.most_bits == tc else None
                if action is not None:
                    out[t] = action
        if failure is not None and not read:
            raise failure
        return out
