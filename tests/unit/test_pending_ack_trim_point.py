"""``PendingAckFold.trim_point``: below it, no replay the cursor's metadata can call for needs the
pending-ack log (the consumer trims the log there once such a cursor is committed)."""

from __future__ import annotations

from pulsar_txn.pendingack.log import PendingAckFold
from pulsar_txn.pendingack.state import AckKind, PendingAckState
from pulsar_txn.subscription.cursor import Cursor
from pulsar_txn.txnid import TxnAction, TxnID


def _fold(next_offset: int) -> PendingAckFold:
    fold = PendingAckFold(PendingAckState(Cursor(0)), "t-sub__transaction_pending_ack", 0)
    fold.next_offset = next_offset
    return fold


def _ack(fold: PendingAckFold, txn: TxnID, record: int, offsets: list[int]) -> None:
    fold.state.apply_ack(txn, AckKind.INDIVIDUAL, offsets)
    fold.note_written(txn, record)


def test_with_nothing_pending_the_whole_log_read_so_far_can_go() -> None:
    assert _fold(12).trim_point() == 12


def test_an_unfinished_transaction_pins_the_trim_at_its_first_record() -> None:
    fold = _fold(20)
    _ack(fold, TxnID(0, 1), 4, [7])
    _ack(fold, TxnID(0, 2), 9, [8])
    assert fold.trim_point() == 4
    fold.apply_outcome(TxnID(0, 1), TxnAction.ABORT)
    assert fold.trim_point() == 9


def test_a_committed_transaction_pins_the_trim_until_the_mark_delete_passes_its_acks() -> None:
    """Its acks may not fit in the cursor's metadata later (ranges before them push them out), and
    the replay would then have to redo them from its records: they stay until the mark-delete
    persists them, even though today's replay start is past them."""
    fold = _fold(20)
    _ack(fold, TxnID(0, 1), 4, [15])
    fold.apply_outcome(TxnID(0, 1), TxnAction.COMMIT)
    assert fold.replay_start() == 20  # the metadata holds its ranges for now
    assert fold.trim_point() == 4
    fold.forget_committed_below(16)
    assert fold.trim_point() == 20


def test_the_trim_never_passes_what_the_fold_has_read() -> None:
    fold = _fold(3)
    _ack(fold, TxnID(0, 1), 8, [1])  # written by us, not read back yet
    fold.apply_outcome(TxnID(0, 1), TxnAction.ABORT)
    assert fold.trim_point() == 3
