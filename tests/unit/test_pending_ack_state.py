"""PendingAckState: Pulsar's pending-ack rules (conflicts, commit, abort) as a pure fold over a Cursor;
scenarios A1-A8 and R3 at the state level."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_store import StoredRecord
from pulsar_txn.buffer.marker import TxnMarker, encode_marker
from pulsar_txn.errors import NotAllowedError, TransactionConflict
from pulsar_txn.pendingack.log import PendingAckFold, encode_pending_ack
from pulsar_txn.pendingack.state import AckKind, PendingAckState
from pulsar_txn.subscription.cursor import Cursor
from pulsar_txn.txnid import TxnAction, TxnID

A, B, C = TxnID(0, 1), TxnID(0, 2), TxnID(1, 3)
IND, CUM = AckKind.INDIVIDUAL, AckKind.CUMULATIVE
COMMIT, ABORT = TxnAction.COMMIT, TxnAction.ABORT

LogEntry = tuple[TxnID, AckKind, list[int]] | tuple[TxnID, TxnAction]


class Sub:
    """A PendingAckState plus the pending-ack log it was folded from (what a consumer would write)."""

    def __init__(self, mark_delete: int = 0) -> None:
        self.start = mark_delete
        self.state = PendingAckState(Cursor(mark_delete))
        self.log: list[LogEntry] = []

    def ack(self, txn: TxnID, kind: AckKind, *offsets: int) -> None:
        self.state.check(txn, kind, offsets)
        self.state.apply_ack(txn, kind, offsets)
        self.log.append((txn, kind, list(offsets)))

    def end(self, txn: TxnID, action: TxnAction) -> Sequence[int]:
        self.log.append((txn, action))
        return self.state.apply_outcome(txn, action)

    def deliverable(self, offsets: Sequence[int]) -> list[int]:
        s = self.state
        return [o for o in offsets if not s.cursor.is_acked(o) and not s.is_pending(o)]


def replay(log: Sequence[LogEntry], cursor: Cursor) -> PendingAckState:
    state = PendingAckState(cursor)
    for entry in log:
        if len(entry) == 3:
            state.apply_ack(entry[0], entry[1], entry[2])
        else:
            state.apply_outcome(entry[0], entry[1])
    return state


# ---------------------------------------------------------------------- check: cumulative
def test_cumulative_ack_with_more_than_one_message_id_is_not_allowed() -> None:
    s = PendingAckState(Cursor())
    with pytest.raises(NotAllowedError, match=r"\(0,1\).*exactly one message id, got 2"):
        s.check(A, CUM, [1, 2])
    with pytest.raises(NotAllowedError, match="got 0"):
        s.check(A, CUM, [])


def test_cumulative_ack_below_mark_delete_conflicts() -> None:
    s = PendingAckState(Cursor(5))
    with pytest.raises(TransactionConflict, match=r"\(0,1\).*offset 4: already acked"):
        s.check(A, CUM, [4])
    s.check(A, CUM, [5])


def test_cumulative_ack_conflicts_while_another_txn_holds_the_cumulative_ack() -> None:
    sub = Sub()
    sub.ack(A, CUM, 3)
    with pytest.raises(
        TransactionConflict, match=r"\(0,2\).*offset 7: transaction \(0,1\) holds.*at offset 3"
    ):
        sub.state.check(B, CUM, [7])


def test_repeating_cumulative_ack_at_same_or_lower_position_conflicts_a4() -> None:
    sub = Sub()
    sub.ack(A, CUM, 5)
    for pos in (5, 4, 0):
        with pytest.raises(
            TransactionConflict, match=rf"offset {pos}: it already has a pending cumulative ack"
        ):
            sub.state.check(A, CUM, [pos])
    with pytest.raises(NotAllowedError):
        sub.state.check(A, CUM, [6, 7])


def test_repeating_cumulative_ack_further_on_moves_the_position() -> None:
    sub = Sub()
    sub.ack(A, CUM, 5)
    sub.ack(A, CUM, 8)
    assert sub.state.stats()["cumulative"] == "(0,1)@8"
    assert sub.state.pending_txns() == {A: 1}
    sub.end(A, COMMIT)
    assert sub.state.cursor.mark_delete == 9


def test_cumulative_ack_conflicts_with_individual_ack_of_another_txn_at_or_below_it() -> None:
    sub = Sub()
    sub.ack(B, IND, 4, 9)
    with pytest.raises(
        TransactionConflict, match=r"\(0,1\).*offset 6: offset 4 is pending in transaction \(0,2\)"
    ):
        sub.state.check(A, CUM, [6])
    with pytest.raises(TransactionConflict, match="offset 4 is pending"):
        sub.state.check(A, CUM, [4])
    sub.state.check(A, CUM, [3])


def test_cumulative_ack_over_own_individual_acks_is_allowed() -> None:
    sub = Sub()
    sub.ack(A, IND, 2, 4)
    sub.ack(A, CUM, 6)
    assert sub.state.pending_txns() == {A: 3}
    sub.end(A, COMMIT)
    assert sub.state.cursor.mark_delete == 7 and sub.state.pending_count() == 0


# ---------------------------------------------------------------------- check: individual
def test_individual_ack_of_committed_offset_conflicts() -> None:
    sub = Sub()
    sub.state.cursor.ack(3)
    with pytest.raises(
        TransactionConflict, match=r"\(0,1\) cannot ack offset 3: already acked \(committed\)"
    ):
        sub.state.check(A, IND, [1, 3])
    sub.state.cursor.ack_cumulative(10)
    with pytest.raises(TransactionConflict, match="offset 7: already acked"):
        sub.state.check(A, IND, [7])


def test_individual_ack_of_offset_pending_in_another_txn_conflicts_a3() -> None:
    sub = Sub()
    sub.ack(A, IND, 5)
    with pytest.raises(
        TransactionConflict, match=r"\(0,2\) cannot ack offset 5: already pending in transaction \(0,1\)"
    ):
        sub.state.check(B, IND, [6, 5])


def test_individual_ack_of_offset_pending_in_same_txn_conflicts() -> None:
    sub = Sub()
    sub.ack(A, IND, 5)
    with pytest.raises(TransactionConflict, match="offset 5: already pending in this transaction"):
        sub.state.check(A, IND, [5])


def test_individual_ack_listing_an_offset_twice_conflicts() -> None:
    with pytest.raises(TransactionConflict, match="offset 2: listed twice"):
        PendingAckState(Cursor()).check(A, IND, [2, 3, 2])


def test_individual_ack_at_or_below_another_txns_cumulative_ack_conflicts_a5() -> None:
    sub = Sub()
    sub.ack(A, CUM, 3)
    for o in (0, 3):
        with pytest.raises(
            TransactionConflict, match=rf"offset {o}: transaction \(0,1\) holds a pending cumulative"
        ):
            sub.state.check(B, IND, [o])
    sub.state.check(B, IND, [4])


def test_individual_ack_below_own_cumulative_ack_is_allowed() -> None:
    sub = Sub()
    sub.ack(A, CUM, 3)
    sub.ack(A, IND, 2)
    assert sub.state.pending_txns() == {A: 2}


def test_empty_individual_ack_is_allowed_and_records_nothing() -> None:
    sub = Sub()
    sub.ack(A, IND)
    assert sub.state.pending_txns() == {} and sub.state.pending_count() == 0


def test_check_does_not_change_state() -> None:
    sub = Sub()
    sub.ack(A, IND, 1)
    before = replay(sub.log, Cursor())
    sub.state.check(B, IND, [2, 3])
    sub.state.check(B, CUM, [0])
    with pytest.raises(TransactionConflict):
        sub.state.check(B, IND, [1])
    assert sub.state == before


# ---------------------------------------------------------------------- is_pending, commit, abort
def test_individual_pending_offsets_are_not_deliverable() -> None:
    sub = Sub()
    sub.ack(A, IND, 2, 5)
    assert [sub.state.is_pending(o) for o in range(7)] == [False, False, True, False, False, True, False]


def test_offsets_up_to_a_pending_cumulative_ack_are_pending_unless_acked() -> None:
    sub = Sub()
    sub.state.cursor.ack(1)
    sub.ack(A, CUM, 3)
    assert [sub.state.is_pending(o) for o in range(5)] == [True, False, True, True, False]


def test_commit_acks_individual_offsets_in_the_cursor() -> None:
    sub = Sub()
    sub.ack(A, IND, 0, 1, 4)
    assert sub.end(A, COMMIT) == []
    c = sub.state.cursor
    assert c.mark_delete == 2 and c.acked.ranges() == [(4, 4)]
    assert not sub.state.is_pending(4) and sub.state.pending_count() == 0


def test_commit_of_cumulative_ack_moves_mark_delete() -> None:
    sub = Sub()
    sub.state.cursor.ack(6)
    sub.ack(A, CUM, 5)
    sub.end(A, COMMIT)
    assert sub.state.cursor.mark_delete == 7 and sub.state.stats()["cumulative"] is None


def test_abort_returns_individual_offsets_sorted() -> None:
    sub = Sub()
    sub.ack(A, IND, 9, 2, 5)
    assert list(sub.end(A, ABORT)) == [2, 5, 9]
    assert sub.state.pending_count() == 0 and sub.state.cursor.mark_delete == 0


def test_abort_leaves_out_offsets_acked_meanwhile() -> None:
    sub = Sub()
    sub.ack(A, IND, 2, 5)
    sub.state.cursor.ack(5)  # e.g. a non-transactional ack reached the cursor
    assert list(sub.end(A, ABORT)) == [2]


def test_abort_of_cumulative_ack_releases_unacked_offsets_not_pending_elsewhere() -> None:
    sub = Sub(2)
    sub.state.cursor.ack(4)
    sub.ack(B, IND, 9)
    sub.ack(A, CUM, 7)
    sub.ack(A, IND, 8)
    sub.ack(C, IND, 10)
    assert list(sub.end(A, ABORT)) == [2, 3, 5, 6, 7, 8]
    assert sub.state.pending_txns() == {B: 1, C: 1}


def test_outcome_of_unknown_txn_is_a_no_op() -> None:
    sub = Sub()
    sub.ack(A, IND, 1)
    assert sub.state.apply_outcome(B, COMMIT) == [] and sub.state.apply_outcome(B, ABORT) == []
    assert sub.state.pending_txns() == {A: 1} and sub.state.cursor.mark_delete == 0


@pytest.mark.parametrize("action", [COMMIT, ABORT])
def test_outcome_applied_twice_is_a_no_op_the_second_time(action: TxnAction) -> None:
    sub = Sub()
    sub.ack(A, IND, 1, 3)
    sub.ack(A, CUM, 0)
    sub.end(A, action)
    after = replay(sub.log, Cursor())
    assert list(sub.end(A, action)) == [] and list(sub.end(A, COMMIT if action == ABORT else ABORT)) == []
    assert sub.state == after


def test_an_offset_acked_in_two_txns_stays_pending_until_both_ended() -> None:
    """Two owners at once (a paused consumer and its successor) can both log an ack of one offset.
    Neither claim is dropped: whichever aborts, the offset stays pending in the other."""
    s = PendingAckState(Cursor())
    s.apply_ack(A, IND, [1, 2])
    s.apply_ack(B, IND, [2])
    assert s.pending_txns() == {A: 2, B: 1} and s.pending_count() == 2
    assert s.apply_outcome(A, ABORT) == [1]
    assert s.is_pending(2) and not s.is_pending(1)
    assert s.apply_outcome(B, COMMIT) == [] and s.cursor.acked.ranges() == [(2, 2)]
    assert not s.is_pending(2) and s.pending_count() == 0


def test_an_offset_acked_in_two_txns_is_acked_when_either_commits_and_not_released_by_the_other() -> None:
    s = PendingAckState(Cursor())
    s.apply_ack(A, IND, [2])
    s.apply_ack(B, IND, [2, 3])
    assert s.apply_outcome(A, COMMIT) == [] and s.cursor.acked.ranges() == [(2, 2)]
    assert s.apply_outcome(B, ABORT) == [3]
    assert s.pending_txns() == {} and s.pending_count() == 0


def test_two_pending_cumulative_acks_both_hold_until_ended() -> None:
    s = PendingAckState(Cursor())
    s.apply_ack(B, CUM, [0])
    s.apply_ack(C, CUM, [5])
    assert s.pending_txns() == {B: 1, C: 1} and s.is_pending(5)
    assert s.apply_outcome(C, ABORT) == [1, 2, 3, 4, 5]  # 0 stays pending in B
    assert s.is_pending(0) and not s.is_pending(1)
    with pytest.raises(TransactionConflict):
        s.check(A, CUM, [3])  # B still holds the cumulative ack
    assert s.apply_outcome(B, COMMIT) == [] and s.cursor.mark_delete == 1


def test_the_fold_of_two_claims_does_not_depend_on_which_outcome_comes_first() -> None:
    for first, second in ((A, B), (B, A)):
        s = PendingAckState(Cursor())
        s.apply_ack(A, IND, [1, 2])
        s.apply_ack(B, IND, [2, 3])
        released = [*s.apply_outcome(first, ABORT), *s.apply_outcome(second, COMMIT)]
        committed = {A: {1, 2}, B: {2, 3}}[second]
        assert {o for o in range(5) if s.cursor.is_acked(o)} == committed
        assert sorted(released) == sorted({1, 2, 3} - committed)


def test_stats_report_counts_cumulative_and_mark_delete() -> None:
    sub = Sub(3)
    sub.ack(A, IND, 4, 5)
    sub.ack(B, CUM, 3)
    assert sub.state.stats() == {
        "pending_ack_count": 3,
        "txns": {"(0,1)": 2, "(0,2)": 1},
        "cumulative": "(0,2)@3",
        "mark_delete": 3,
    }


# ---------------------------------------------------------------------- scenarios
def test_a1_abort_of_1000_acks_redelivers_all_and_a_committed_reack_never_redelivers() -> None:
    sub = Sub()
    offsets = list(range(1000))
    sub.ack(A, IND, *offsets)
    assert sub.deliverable(offsets) == []
    assert list(sub.end(A, ABORT)) == offsets
    assert sub.deliverable(offsets) == offsets
    sub.ack(B, IND, *offsets)
    sub.end(B, COMMIT)
    assert sub.deliverable(offsets) == [] and sub.state.cursor.mark_delete == 1000
    restarted = Cursor.decode(sub.state.cursor.mark_delete, sub.state.cursor.encode_ranges()[0])
    assert PendingAckState(restarted).cursor.is_acked(999)


@pytest.mark.parametrize(("action", "redelivered"), [(COMMIT, []), (ABORT, list(range(10)))])
def test_a2_pending_ack_count_is_10_then_0_after_commit_or_abort(
    action: TxnAction, redelivered: list[int]
) -> None:
    sub = Sub()
    for o in range(10):
        sub.ack(A, IND, o)
    assert sub.state.pending_count() == 10 and sub.state.pending_txns() == {A: 10}
    assert sub.state.stats()["pending_ack_count"] == 10
    assert list(sub.end(A, action)) == redelivered
    assert sub.state.pending_count() == 0 and sub.state.pending_txns() == {}
    assert sub.deliverable(range(10)) == redelivered


def test_a3_second_txn_conflicts_then_ack_succeeds_after_first_aborts() -> None:
    sub = Sub()
    sub.ack(A, IND, 7)
    with pytest.raises(TransactionConflict):
        sub.ack(B, IND, 7)
    assert list(sub.end(A, ABORT)) == [7]
    assert sub.deliverable([7]) == [7]
    sub.ack(B, IND, 7)
    sub.end(B, COMMIT)
    assert sub.state.cursor.is_acked(7)


def test_a4_repeat_cumulative_ack_conflicts_and_multi_id_cumulative_not_allowed() -> None:
    sub = Sub()
    sub.ack(A, CUM, 4)
    with pytest.raises(TransactionConflict):
        sub.ack(A, CUM, 4)
    with pytest.raises(TransactionConflict):
        sub.ack(A, CUM, 2)
    with pytest.raises(NotAllowedError):
        sub.ack(A, CUM, 5, 6)
    assert sub.state.stats()["cumulative"] == "(0,1)@4"


def test_a5_cumulative_ack_blocks_others_and_abort_redelivers_all_five() -> None:
    sub = Sub()
    sub.ack(A, CUM, 3)
    with pytest.raises(TransactionConflict):
        sub.ack(B, IND, 3)
    with pytest.raises(TransactionConflict):
        sub.ack(B, CUM, 3)
    assert sub.deliverable(range(5)) == [4]
    assert list(sub.end(A, ABORT)) == [0, 1, 2, 3]
    assert sub.deliverable(range(5)) == [0, 1, 2, 3, 4]
    sub.ack(B, CUM, 3)


def test_a6_committed_offsets_conflict_and_aborted_offsets_can_be_acked_again() -> None:
    sub = Sub()
    sub.ack(A, IND, 0, 1, 2)
    sub.end(A, COMMIT)
    sub.ack(B, IND, 3, 4)
    sub.end(B, ABORT)
    with pytest.raises(TransactionConflict, match="offset 1: already acked"):
        sub.ack(C, IND, 1)
    with pytest.raises(TransactionConflict, match="offset 2: already acked"):
        sub.ack(C, CUM, 2)
    sub.ack(C, IND, 3, 4)
    sub.end(C, COMMIT)
    assert sub.state.cursor.mark_delete == 5


def test_a7_one_txn_acking_on_two_subscriptions_commits_both() -> None:
    sub1, sub2 = Sub(), Sub()
    sub1.ack(A, IND, 3)
    sub2.ack(A, IND, 3)
    with pytest.raises(TransactionConflict):
        sub1.ack(B, IND, 3)
    sub1.end(A, COMMIT)
    sub2.end(A, COMMIT)
    assert sub1.state.cursor.is_acked(3) and sub2.state.cursor.is_acked(3)
    assert sub1.state.pending_count() == sub2.state.pending_count() == 0


def test_a8_crash_before_commit_redelivers_the_input_after_restart() -> None:
    sub = Sub()
    sub.ack(A, IND, 0, 1, 2)  # the attempt; the process dies before committing
    restarted = replay(sub.log, Cursor())
    assert [restarted.is_pending(o) for o in range(3)] == [True, True, True]
    assert list(restarted.apply_outcome(A, ABORT)) == [0, 1, 2]  # the coordinator's timeout aborts it
    restarted.check(B, IND, [0, 1, 2])
    restarted.apply_ack(B, IND, [0, 1, 2])
    restarted.apply_outcome(B, COMMIT)
    assert restarted.cursor.mark_delete == 3 and restarted.pending_count() == 0


def _r3_sub() -> Sub:
    sub = Sub(2)
    sub.ack(A, IND, 2, 3)
    sub.ack(B, IND, 5, 6)
    sub.ack(TxnID(0, 9), IND, 8, 12)
    sub.end(A, COMMIT)
    sub.ack(C, CUM, 4)
    sub.end(TxnID(0, 9), ABORT)
    sub.ack(TxnID(0, 10), IND, 8)
    return sub


def test_r3_replaying_the_log_on_a_fresh_cursor_rebuilds_the_same_state() -> None:
    sub = _r3_sub()
    rebuilt = replay(sub.log, Cursor(sub.start))
    assert rebuilt == sub.state
    assert rebuilt.stats() == sub.state.stats()
    assert repr(rebuilt) == repr(sub.state)


def test_r3_replaying_onto_the_committed_cursor_gives_the_same_state() -> None:
    sub = _r3_sub()
    committed = sub.state.cursor
    persisted = Cursor.decode(committed.mark_delete, committed.encode_ranges()[0])
    assert replay(sub.log, persisted) == sub.state


def test_r3_pending_acks_survive_restart_conflict_and_resolve() -> None:
    sub = _r3_sub()
    restarted = replay(sub.log, Cursor(sub.start))
    with pytest.raises(TransactionConflict):
        restarted.check(TxnID(0, 11), IND, [5])
    with pytest.raises(TransactionConflict):
        restarted.check(TxnID(0, 11), IND, [4])
    with pytest.raises(TransactionConflict):
        restarted.check(TxnID(0, 11), IND, [2])
    restarted.apply_outcome(B, COMMIT)
    assert list(restarted.apply_outcome(C, ABORT)) == [4]
    assert restarted.cursor.is_acked(5) and restarted.cursor.is_acked(6)
    assert not restarted.cursor.is_acked(4) and not restarted.is_pending(4)


# ---------------------------------------------------------------------- properties
_TXNS = [TxnID(0, i) for i in range(4)]
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("ind"), st.integers(0, 3), st.lists(st.integers(0, 30), max_size=4)),
        st.tuples(st.just("cum"), st.integers(0, 3), st.integers(0, 30).map(lambda o: [o])),
        st.tuples(st.just("commit"), st.integers(0, 3), st.just([])),
        st.tuples(st.just("abort"), st.integers(0, 3), st.just([])),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5), _ops)
def test_checked_acks_keep_invariants_and_replay_to_the_same_state(
    start: int, ops: list[tuple[str, int, list[int]]]
) -> None:
    sub = Sub(start)
    s = sub.state
    pending: dict[TxnID, set[int]] = {}  # model: every offset a txn's acks made undeliverable
    for op, t, offsets in ops:
        txn = _TXNS[t]
        if op in ("ind", "cum"):
            kind = IND if op == "ind" else CUM
            try:
                sub.ack(txn, kind, *offsets)
            except TransactionConflict:
                continue
            covered = set(offsets) if kind == IND else set(range(offsets[0] + 1))
            pending.setdefault(txn, set()).update(o for o in covered if not s.cursor.is_acked(o))
        else:
            mine = pending.pop(txn, set())
            before = {o for o in range(40) if s.cursor.is_acked(o)}
            released = sub.end(txn, COMMIT if op == "commit" else ABORT)
            others = set[int]().union(*pending.values())
            if op == "commit":
                assert released == []
                assert {o for o in range(40) if s.cursor.is_acked(o)} == before | mine
            else:
                assert list(released) == sorted(mine - others)
        # nothing is both acked and pending; pending is exactly what open txns cover
        for o in range(40):
            acked = s.cursor.is_acked(o)
            assert not (acked and o in s._individual)
            assert s.is_pending(o) == (not acked and any(o in p for p in pending.values()))
        assert s.pending_count() == sum(s.pending_txns().values())
    assert replay(sub.log, Cursor(start)) == s


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5), _ops, st.integers(0, 3), st.lists(st.integers(0, 30), max_size=6))
def test_a_list_is_refused_at_once_exactly_when_one_of_its_offsets_is_refused_alone(
    start: int, ops: list[tuple[str, int, list[int]]], t: int, offsets: list[int]
) -> None:
    """``check`` of an individual ack tests a whole list with set operations first; it must refuse
    exactly the lists the one-by-one rules refuse (a repeat within the list included)."""
    sub = Sub(start)
    for op, u, offs in ops:
        if op in ("ind", "cum"):
            try:
                sub.ack(_TXNS[u], IND if op == "ind" else CUM, *offs)
            except TransactionConflict:
                pass
        else:
            sub.end(_TXNS[u], COMMIT if op == "commit" else ABORT)
    s, txn = sub.state, _TXNS[t]
    assert s._no_conflict(txn, offsets) == (s._first_conflict(txn, offsets) is None)


# ---------------------------------------------------------------------- the log's fold
def _ack_rec(offset: int, txn: TxnID, offsets: list[int]) -> StoredRecord:
    value, headers = encode_pending_ack(txn, AckKind.INDIVIDUAL, offsets)
    return StoredRecord("pa", 0, offset, None, value, headers, 0)


def _marker_rec(offset: int, txn: TxnID, action: TxnAction) -> StoredRecord:
    value, headers = encode_marker(TxnMarker(txn, action, 0, 0))
    return StoredRecord("pa", 0, offset, None, value, headers, 0)


def test_fold_ignores_an_ack_record_written_after_its_txns_outcome() -> None:
    t, u = TxnID(0, 1), TxnID(0, 2)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    fold.apply(_ack_rec(0, u, [1]))
    fold.apply(_marker_rec(1, t, TxnAction.ABORT))
    fold.apply(_ack_rec(2, t, [5]))  # late: t has ended
    assert not fold.state.is_pending(5) and fold.state.pending_txns() == {u: 1}
    fold.note_written(t, 3)  # nor does a late write of the live consumer pin the replay start
    assert fold.replay_start() == 0 and fold.first_record == {u: 0}


def test_live_fold_skips_its_own_ack_records_and_folds_another_writers() -> None:
    t, u = TxnID(0, 1), TxnID(0, 2)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    fold.state.apply_ack(t, AckKind.INDIVIDUAL, [1])  # applied live, then written
    fold.note_written(t, 0)
    fold.apply(_ack_rec(0, t, [1]), live=True)
    fold.apply(_ack_rec(1, u, [2]), live=True)  # e.g. the partition's previous owner, written late
    assert fold.state.pending_txns() == {t: 1, u: 1}
    assert fold.first_record == {t: 0, u: 1}
    assert fold.apply(_marker_rec(2, u, TxnAction.COMMIT), live=True) == [(u, TxnAction.COMMIT, [])]
    assert fold.state.cursor.is_acked(2) and fold.replay_start() == 0


def test_fold_tells_whether_the_log_grew_by_its_own_writes_only() -> None:
    t = TxnID(0, 1)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    fold.apply(_ack_rec(0, t, [1]))
    fold.note_written(t, 1)
    assert fold.read_all_but_own(1) and fold.read_all_but_own(2)
    assert not fold.read_all_but_own(3)  # offset 2: someone else's


def _marker_lwm(offset: int, txn: TxnID, action: TxnAction, low_watermark: int) -> StoredRecord:
    value, headers = encode_marker(TxnMarker(txn, action, low_watermark, 0))
    return StoredRecord("pa", 0, offset, None, value, headers, 0)


def test_a_late_ack_record_replayed_without_its_txns_marker_is_released_at_the_next_low_watermark() -> None:
    """The log: t's abort marker (a timeout) at 10, t's ack record written late at 15, then u's
    marker. A replay that starts at 12 (another transaction was pending there) sees t's record but
    not its marker; u's marker says every txn of TC 0 up to 1 has ended, so t aborted."""
    t, u = TxnID(0, 1), TxnID(0, 2)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    fold.apply(_ack_rec(15, t, [5]))
    assert fold.state.is_pending(5) and fold.replay_start() == 15
    outcomes = fold.apply(_marker_lwm(20, u, TxnAction.COMMIT, low_watermark=1))
    assert outcomes == [(u, TxnAction.COMMIT, []), (t, TxnAction.ABORT, [5])]
    assert not fold.state.is_pending(5) and fold.state.pending_txns() == {}
    assert fold.replay_start() == 21  # t pins nothing any more
    fold.apply(_ack_rec(22, t, [6]))  # and a further late record of it is ignored
    assert not fold.state.is_pending(6)


def test_the_low_watermark_releases_only_its_own_tcs_ended_txns() -> None:
    ended, open_, other_tc, u = TxnID(0, 3), TxnID(0, 4), TxnID(1, 3), TxnID(0, 5)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    fold.apply(_ack_rec(0, ended, [1]))
    fold.apply(_ack_rec(1, open_, [2]))  # open: its TC's low watermark stays below it
    fold.apply(_ack_rec(2, other_tc, [3]))  # another TC's watermark says nothing about it
    outcomes = fold.apply(_marker_lwm(3, u, TxnAction.ABORT, low_watermark=3))
    assert outcomes == [(u, TxnAction.ABORT, []), (ended, TxnAction.ABORT, [1])]
    assert fold.state.pending_txns() == {open_: 1, other_tc: 1}
    assert fold.replay_start() == 1


def test_a_marker_never_releases_the_txn_it_is_about_through_its_own_low_watermark() -> None:
    t = TxnID(0, 7)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    fold.apply(_ack_rec(0, t, [4]))
    # A well-formed marker's watermark is below its own txn; a malformed one must not flip its outcome.
    assert fold.apply(_marker_lwm(1, t, TxnAction.COMMIT, low_watermark=9)) == [(t, TxnAction.COMMIT, [])]
    assert fold.state.cursor.is_acked(4)


def test_replay_start_covers_committed_acks_the_cursors_metadata_left_out() -> None:
    """t committed acks of 5 and 9 (its ack record at 0, marker at 1), u is open (record at 2). While
    the cursor persists every ack, replay starts at u's record; once its metadata leaves out the
    acks from 9 on, replay starts at t's record, so a restart redoes t's commit; once the
    mark-delete passes 9, t's acks are persisted by it and t is forgotten."""
    t, u = TxnID(0, 1), TxnID(0, 2)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    fold.apply(_ack_rec(0, t, [5, 9]))
    fold.apply(_marker_rec(1, t, TxnAction.COMMIT))
    fold.apply(_ack_rec(2, u, [20]))
    assert fold.replay_start() == 2
    assert fold.replay_start(unpersisted_from=10) == 2  # t's acks are all below the cut
    assert fold.replay_start(unpersisted_from=9) == 0
    fold.forget_committed_below(9)
    assert fold.replay_start(unpersisted_from=9) == 0  # 9 is not below the mark-delete yet
    fold.forget_committed_below(10)
    assert fold.replay_start(unpersisted_from=9) == 2


def test_a_seek_forgets_committed_acks_instead_of_redoing_them() -> None:
    t = TxnID(0, 1)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    fold.apply(_ack_rec(0, t, [5]))
    fold.apply(_marker_rec(1, t, TxnAction.COMMIT))
    fold.carry_begin()
    fold.carry_end({})
    assert fold.replay_start(unpersisted_from=0) == 2


def test_cursor_names_the_first_offset_its_metadata_left_out() -> None:
    c = Cursor()
    rng = random.Random(3)
    acked = [o for o in range(1, 4000) if rng.random() < 0.5]  # irregular: compresses poorly
    for offset in acked:
        c.ack(offset)
    metadata, dropped = c.encode_ranges(200)
    cut = c.unpersisted_from(dropped)
    assert dropped > 0 and cut is not None
    kept = Cursor.decode(c.mark_delete, metadata)
    assert all(kept.is_acked(o) for o in acked if o < cut) and not kept.is_acked(cut)
    assert c.unpersisted_from(0) is None


def test_the_committed_transactions_a_fold_remembers_stay_within_their_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the bound the one with the lowest acks goes (the cursor keeps the lowest ranges first),
    from the dict and the heap that orders it alike: before, the heap kept every one."""
    import pulsar_txn.pendingack.log as log_module

    monkeypatch.setattr(log_module, "_COMMITTED_MAX", 3)
    fold = PendingAckFold(PendingAckState(Cursor()), "pa", 0)
    for i in range(10):
        txn = TxnID(0, i)
        fold.state.apply_ack(txn, AckKind.INDIVIDUAL, [100 - i])
        fold.note_written(txn, i)
        fold.apply_outcome(txn, TxnAction.COMMIT)
    assert len(fold._committed) == len(fold._committed_by_last) == 3
    assert sorted(last for _first, last in fold._committed.values()) == [98, 99, 100]


def _forged(offset: int, **fields: object) -> StoredRecord:
    """A well-formed PendingAck record with any field values (what a plain Kafka producer can write)."""
    from pulsar_txn.buffer.marker import CTL_HEADER
    from pulsar_txn.pendingack.log import PENDING_ACK, PENDING_ACK_CTL

    record = {"txn_most": 0, "txn_least": 1, "kind": "INDIVIDUAL", "offsets": [1], "written_at_ms": 0}
    record |= {"topic": "", "subscription": ""}
    record.update(fields)
    value = PENDING_ACK.encode(record)
    return StoredRecord("pa", 0, offset, None, value, [(CTL_HEADER, PENDING_ACK_CTL)], 0)


def test_ack_records_naming_no_real_transaction_or_offset_are_skipped_not_folded_or_raised() -> None:
    """A negative TxnID raised out of the fold (a consumer never opened the partition; the live tail
    lost the rest of its batch); a TC the cluster does not have, or a negative offset, held
    messages pending for good. Each is skipped and counted."""
    fold = PendingAckFold(PendingAckState(Cursor(0)), "pa", 0, num_tcs=4)
    bad = [
        _forged(0, txn_most=-1, txn_least=5),
        _forged(1, txn_least=-3),
        _forged(2, txn_most=999),
        _forged(3, offsets=[-1]),
        _forged(4, offsets=[]),
    ]
    for rec in bad:
        assert fold.apply(rec) == []
    assert fold.skipped == len(bad)
    assert not fold.state.pending_txns()
    assert fold.apply(_forged(5, txn_most=3, offsets=[7])) == []  # TC 3 of 4: a real one
    assert list(fold.state.pending_txns()) == [TxnID(3, 1)]


def test_with_a_marker_secret_only_signed_ack_records_are_folded() -> None:
    """A plain Kafka producer's ack record (unsigned, or signed with another key or for another
    partition) is ignored: a later commit of the TxnID it names would apply its acks too."""
    secret = b"s3cret"
    fold = PendingAckFold(PendingAckState(Cursor(0)), "pa", 0, marker_secret=secret)
    txn = TxnID(0, 7)

    def signed(offset: int, key: bytes, partition: int) -> StoredRecord:
        value, headers = encode_pending_ack(
            txn, AckKind.INDIVIDUAL, [offset + 10], topic="pa", partition=partition, secret=key
        )
        return StoredRecord("pa", 0, offset, None, value, headers, 0)

    fold.apply(_ack_rec(0, txn, [10]))  # unsigned
    fold.apply(signed(1, b"other key", 0))
    fold.apply(signed(2, secret, 1))  # signed for partition 1 of the log, copied here
    assert fold.skipped == 3 and not fold.state.pending_txns()
    fold.apply(signed(3, secret, 0))
    assert list(fold.state.pending_txns()) == [txn] and fold.skipped == 3


def test_fold_skips_the_acks_of_another_subscription_sharing_its_log_name_and_stops_trimming() -> None:
    """Topic "a-b" with subscription "c" and topic "a" with subscription "b-c" both get the log
    "a-b-c__transaction_pending_ack" (Pulsar's naming). A fold takes only its own subscription's
    (v2) records, and never trims past the first of the other's; v1 records (no owner) count."""
    ours, theirs = ("a", "b-c"), ("a-b", "c")
    t, u, v = TxnID(0, 1), TxnID(0, 2), TxnID(0, 3)

    def rec(offset: int, txn: TxnID, offsets: list[int], owner: tuple[str, str]) -> StoredRecord:
        value, headers = encode_pending_ack(txn, AckKind.INDIVIDUAL, offsets, owner=owner)
        return StoredRecord("pa", 0, offset, None, value, headers, 0)

    fold = PendingAckFold(PendingAckState(Cursor(0)), "pa", 0, owner=ours)
    fold.apply(rec(0, t, [1], ours))
    fold.apply(rec(1, u, [2], theirs))
    fold.apply(rec(2, v, [3], ("", "")))  # v1-like: names no subscription
    assert fold.state.pending_txns() == {t: 1, v: 1}
    fold.apply(_marker_rec(3, u, TxnAction.COMMIT))  # their commit acks nothing of ours
    assert not fold.state.cursor.is_acked(2)
    for txn in (t, v):
        fold.apply(_marker_rec(4, txn, TxnAction.COMMIT))
    fold.forget_committed_below(10)  # our cursor holds our committed acks
    assert fold.trim_point() == 1  # not past their first record (5 without it)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10),
    st.lists(st.integers(0, 60), max_size=15),
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 60), st.booleans()), max_size=10),
    st.integers(1, 3),
)
def test_an_abort_releases_exactly_what_is_neither_acked_nor_pending(
    mark_delete: int, plain_acks: list[int], txn_acks: list[tuple[int, int, bool]], aborted: int
) -> None:
    """A cumulative abort's released offsets are found by walking the cursor's gaps; they must be
    exactly the offsets up to the position (and the txn's own) that are neither acked nor still
    pending in another transaction."""
    cursor = Cursor(mark_delete)
    for o in plain_acks:
        cursor.ack(o)
    state = PendingAckState(cursor)
    for n, offset, cumulative in txn_acks:
        txn = TxnID(0, n)
        kind = AckKind.CUMULATIVE if cumulative else AckKind.INDIVIDUAL
        try:
            state.check(txn, kind, [offset])
        except (TransactionConflict, NotAllowedError):
            continue
        state.apply_ack(txn, kind, [offset])
    txn = TxnID(0, aborted)
    cum = state._cum.get(txn)
    mine = set(state._by_txn.get(txn, ()))
    released = state.apply_outcome(txn, TxnAction.ABORT)
    span = set(range(cursor.mark_delete, cum + 1)) if cum is not None else set()
    expected = sorted(o for o in span | mine if not cursor.is_acked(o) and not state.is_pending(o))
    assert released == expected


def test_a_cumulative_abort_far_past_a_held_mark_delete_releases_only_the_gaps() -> None:
    """One message unacked at the mark-delete, millions acked individually after it (one range):
    the abort of a cumulative ack past them releases the two offsets, without walking the span."""
    cursor = Cursor(0)
    cursor.acked.add(1, 4_999_999)
    state = PendingAckState(cursor)
    txn = TxnID(0, 1)
    state.apply_ack(txn, AckKind.CUMULATIVE, [5_000_000])
    assert state.apply_outcome(txn, TxnAction.ABORT) == [0, 5_000_000]
