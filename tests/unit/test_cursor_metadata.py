"""A subscription's commit metadata: ``<replay start>;<acked ranges>[;k<read from>]``, and what a
recovery that reads the pending-ack log from ``read from`` makes of the transactions it finds below
the replay start (docs/storage-format.md, "pending-ack logs")."""

from __future__ import annotations

import pytest

from kafka_store import StoredRecord
from pulsar_txn.buffer.marker import TxnMarker, encode_marker
from pulsar_txn.pendingack.log import PendingAckFold, encode_pending_ack
from pulsar_txn.pendingack.state import AckKind, PendingAckState
from pulsar_txn.pendingack.stats import CursorMetadata, join_metadata, split_metadata
from pulsar_txn.subscription.cursor import Cursor
from pulsar_txn.txnid import TxnAction, TxnID

PA = "t-sub__transaction_pending_ack"


def _ack(offset: int, txn: TxnID, offsets: list[int]) -> StoredRecord:
    value, headers = encode_pending_ack(txn, AckKind.INDIVIDUAL, offsets)
    return StoredRecord(PA, 0, offset, None, value, headers, 0)


def _marker(offset: int, txn: TxnID, action: TxnAction) -> StoredRecord:
    value, headers = encode_marker(TxnMarker(txn, action, -1, 0))
    return StoredRecord(PA, 0, offset, None, value, headers, 0)


def test_the_read_from_position_round_trips_and_is_left_out_when_it_is_the_replay_start() -> None:
    assert join_metadata(9, 9, "r1:1-3") == "9;r1:1-3"
    assert split_metadata("9;r1:1-3") == CursorMetadata(9, "r1:1-3", 9)
    assert split_metadata(join_metadata(9, 4, "r1:1-3")) == CursorMetadata(9, "r1:1-3", 4)
    assert split_metadata(join_metadata(9, 4, "")) == CursorMetadata(9, None, 4)


@pytest.mark.parametrize("metadata", ["9;r1:1;k12", "9;r1:1;k-3", "9;r1:1;kx", "9;r1:1;k"])
def test_a_read_from_position_that_cannot_be_one_reads_from_the_replay_start(metadata: str) -> None:
    assert split_metadata(metadata).read_from == 9


def test_a_build_before_the_read_from_position_still_reads_the_replay_start_and_never_skips() -> None:
    # Those builds read ``int(head)`` before the first ';' and the rest as ranges. The ranges with the
    # suffix do not parse: they recover the cursor without them (redelivery), from the replay start.
    metadata = join_metadata(9, 4, "r1:1-3")
    head, _, ranges = metadata.partition(";")
    assert int(head) == 9
    with pytest.raises(ValueError):
        Cursor.decode(0, ranges)


def test_the_partition_count_round_trips_unless_a_read_from_position_is_written() -> None:
    assert join_metadata(9, 9, "r1:1-3", 2) == "9;r1:1-3;n2"
    assert split_metadata("9;r1:1-3;n2") == CursorMetadata(9, "r1:1-3", 9, 2)
    # Builds of sessions 31-43 read ';k' as the whole rest: the count is left out beside it.
    assert join_metadata(9, 4, "r1:1-3", 3) == "9;r1:1-3;k4"
    assert split_metadata(join_metadata(9, 4, "", None)) == CursorMetadata(9, None, 4, None)
    assert split_metadata("9;r1:1-3;k4;n3") == CursorMetadata(9, "r1:1-3", 4, 3)


def test_a_build_of_sessions_31_to_43_still_reads_the_read_from_position() -> None:
    # Their parser: the rest after the ranges, when it starts with 'k', is one int.
    _head, _, rest = join_metadata(20, 7, "r1:3-4", 4).partition(";")
    _ranges, _, tail = rest.partition(";")
    assert tail.startswith("k") and int(tail[1:]) == 7


@pytest.mark.parametrize(
    "metadata",
    ["9;r1:1;n0", "9;r1:1;n-2", "9;r1:1;nx", "9;r1:1;n", "9;r1:1;q5", "9;r1:1;n\u00b2", "9;r1:1;k\u2460"],
)
def test_a_partition_count_that_cannot_be_one_is_unknown(metadata: str) -> None:
    assert split_metadata(metadata).partitions is None
    assert split_metadata(metadata).read_from == 9


def _recover(log: list[StoredRecord], metadata: str, mark_delete: int = 0) -> PendingAckFold:
    """What ``recover_partition`` does, over an in-memory log."""
    replay_start, ranges, read_from, _partitions = split_metadata(metadata)
    fold = PendingAckFold(PendingAckState(Cursor.decode(mark_delete, ranges)), PA, 0)
    fold.next_offset = read_from
    for rec in log:
        if rec.offset >= read_from:
            fold.apply(rec)
    fold.settle_ended_before(replay_start)
    return fold


def test_a_committed_txn_below_the_replay_start_is_known_again_after_recovery() -> None:
    c = TxnID(0, 1)
    log = [_ack(0, c, [50]), _marker(1, c, TxnAction.COMMIT)]
    fold = _recover(log, join_metadata(2, 0, "r1:50"))
    assert fold.state.cursor.is_acked(50)
    assert fold.replay_start(unpersisted_from=40) == 0  # its ranges pushed out: replay redoes it


def test_a_txn_below_the_replay_start_whose_marker_is_not_there_yet_is_not_pending() -> None:
    """The committing consumer applied the outcome from END_TXN's answer (the marker was still on
    its way) and committed the cursor past its records. Held pending, a seek carried it over, and its
    marker then applied a commit made before the seek to the sought cursor: an acked-message loss."""
    c = TxnID(0, 1)
    fold = _recover([_ack(0, c, [50])], join_metadata(1, 0, "r1:50"))
    assert fold.state.pending_txns() == {}
    assert fold.replay_start() == 1
    fold.apply(_marker(1, c, TxnAction.COMMIT))  # comes later: nothing to apply any more
    assert fold.state.pending_txns() == {}


def test_a_late_ack_record_below_the_replay_start_does_not_hold_its_message() -> None:
    """An ack record written after its transaction's abort marker, the marker below the read start:
    the committing consumer ignored the record; recovery must not hold message 60 pending for it."""
    t, c = TxnID(1, 3), TxnID(0, 7)
    log = [
        _marker(0, t, TxnAction.ABORT),
        _ack(1, c, [50]),
        _ack(2, t, [60]),
        _marker(3, c, TxnAction.COMMIT),
    ]
    fold = _recover(log, join_metadata(4, 1, "r1:50"))
    assert not fold.state.is_pending(60) and not fold.state.cursor.is_acked(60)
    assert fold.state.cursor.is_acked(50)


def test_a_txn_still_open_at_the_commit_stays_pending_after_recovery() -> None:
    c, o = TxnID(0, 1), TxnID(0, 2)
    log = [_ack(0, c, [50]), _marker(1, c, TxnAction.COMMIT), _ack(2, o, [55])]
    fold = _recover(log, join_metadata(2, 0, "r1:50"))
    assert fold.state.pending_txns() == {o: 1}


def test_a_seek_whose_carry_fails_keeps_what_the_unchanged_cursor_may_need_replayed() -> None:
    """The seek raises and the cursor stays: the committed transactions above its mark-delete must
    still pull the replay start back if their ranges are pushed out (a failed carry used to forget
    them, as a seek that went through does; the trim could then delete their records)."""
    c, o = TxnID(0, 1), TxnID(0, 2)
    fold = PendingAckFold(PendingAckState(Cursor(0)), PA, 0)
    for rec in (_ack(0, c, [50]), _marker(1, c, TxnAction.COMMIT), _ack(2, o, [60])):
        fold.apply(rec)
    assert fold.replay_start(unpersisted_from=40) == 0 and fold.trim_point() == 0
    fold.carry_begin()
    fold.carry_abandon()
    assert fold.replay_start(unpersisted_from=40) == 0 and fold.trim_point() == 0
