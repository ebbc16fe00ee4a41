"""Incremental TB snapshots (``pulsar_txn/buffer/_segments.py``): a snapshot writes only the aborted
segments whose content changed, and the segments it plans always hold exactly the aborted set."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsar_txn.buffer._segments import NewSegment, Planned, StoredSegment, free_indexes, plan_segments
from pulsar_txn.txnid import TxnID


def _aborted(lo: int, hi: int) -> dict[TxnID, int]:
    return {TxnID(1, i): 10 * i for i in range(lo, hi)}


def _store(
    plan: list[Planned], snapshot_id: str, before: list[StoredSegment] | None = None
) -> list[StoredSegment]:
    """What a write of ``plan`` leaves stored (new segments at the lowest indexes neither the last
    snapshot nor a reused segment has)."""
    used = {s.index for s in before or ()} | {p.index for p in plan if isinstance(p, StoredSegment)}
    free = free_indexes(used)
    return [
        StoredSegment(next(free), snapshot_id, p.entries) if isinstance(p, NewSegment) else p for p in plan
    ]


def _written(plan: list[Planned]) -> int:
    return sum(isinstance(p, NewSegment) for p in plan)


def test_unchanged_segments_are_reused_and_new_aborts_go_to_a_new_segment() -> None:
    aborted = _aborted(0, 1000)
    first = _store(plan_segments([], aborted, 100), "s1")
    assert [s.index for s in first] == list(range(10)) and _written(first) == 0
    aborted |= _aborted(1000, 1050)
    plan = plan_segments(first, aborted, 100)
    assert plan[:10] == first  # the same objects: taken over, not written
    assert plan[10] == NewSegment(_aborted(1000, 1050))
    second = _store(plan, "s2", first)
    assert second[10].index == 10
    # The part-full last segment is topped up (written anew) before a new one starts.
    aborted |= _aborted(1050, 1180)
    plan = plan_segments(second, aborted, 100)
    assert plan[:10] == first and _written(plan) == 2
    assert plan[10] == NewSegment(_aborted(1000, 1100))
    assert plan[11] == NewSegment(_aborted(1100, 1180))
    # At keys the last snapshot does not use (it stays whole until the new head is stored).
    assert [s.index for s in _store(plan, "s3", second)[10:]] == [11, 12]


def test_a_late_message_moves_one_entry_so_only_its_segment_is_written_again() -> None:
    aborted = _aborted(0, 500)
    stored = _store(plan_segments([], aborted, 100), "s1")
    aborted[TxnID(1, 250)] = 99_999  # a message of an aborted txn after its marker (state.py)
    plan = plan_segments(stored, aborted, 100)
    assert [type(p) for p in plan] == [StoredSegment, StoredSegment, NewSegment, StoredSegment, StoredSegment]
    assert plan[2].entries[TxnID(1, 250)] == 99_999


def test_pruning_drops_emptied_segments_and_rewrites_only_the_cut_one() -> None:
    aborted = _aborted(0, 500)
    stored = _store(plan_segments([], aborted, 100), "s1")
    pruned = _aborted(150, 500)  # retention deleted the data of the first 150
    plan = plan_segments(stored, pruned, 100)
    assert plan[0] == NewSegment(_aborted(150, 200))
    assert plan[1:] == stored[2:]


def test_segments_left_part_empty_by_pruning_are_packed_again() -> None:
    aborted = _aborted(0, 1000)
    stored = _store(plan_segments([], aborted, 100), "s1")
    # One entry left in each segment: 10 segments for 10 entries, where one would do.
    sparse = {t: o for t, o in aborted.items() if t.least_bits % 100 == 99}
    plan = plan_segments(stored, sparse, 100)
    assert len(plan) == 1 and isinstance(plan[0], NewSegment)
    assert plan[0].entries == sparse


_ops = st.lists(
    st.tuples(st.sampled_from(["abort", "prune", "late"]), st.integers(0, 400)), min_size=1, max_size=25
)


@settings(max_examples=200, deadline=None)
@given(_ops, st.integers(1, 50))
def test_the_planned_segments_hold_exactly_the_aborted_set(ops: list[tuple[str, int]], size: int) -> None:
    aborted: dict[TxnID, int] = {}
    stored: list[StoredSegment] = []
    next_txn = 0
    for n, (op, k) in enumerate(ops):
        if op == "abort":
            aborted |= _aborted(next_txn, next_txn + k)
            next_txn += k
        elif op == "prune":
            aborted = {t: o for t, o in aborted.items() if o >= 10 * k}
        elif aborted:
            victim = list(aborted)[k % len(aborted)]
            aborted[victim] += 1
        plan = plan_segments(stored, aborted, size)
        assert all(0 < len(p.entries) <= size for p in plan)
        held = [e for p in plan for e in p.entries.items()]
        assert len(held) == len(aborted) and dict(held) == aborted
        assert len(plan) <= 2 * -(-len(aborted) // size) + 1  # fragmentation stays bounded
        stored = _store(plan, f"s{n}", stored)
        assert len({s.index for s in stored}) == len(stored)  # one key per segment
