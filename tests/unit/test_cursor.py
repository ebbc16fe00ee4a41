"""RangeSet and Cursor (Pulsar's ManagedCursor over Kafka offsets), and the commit-metadata encoding of
individually acked ranges."""

from __future__ import annotations

import base64
import itertools
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsar_txn.subscription.cursor import Cursor, RangeSet


def _ranges_of(ints: set[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for x in sorted(ints):
        if out and out[-1][1] == x - 1:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return out


def _cursor(mark_delete: int, *acked: int) -> Cursor:
    c = Cursor(mark_delete)
    for o in acked:
        c.ack(o)
    return c


# ---------------------------------------------------------------------- RangeSet
def test_rangeset_starts_empty() -> None:
    rs = RangeSet()
    assert rs.ranges() == [] and len(rs) == 0 and rs.count() == 0 and 0 not in rs and rs.first() is None


def test_rangeset_add_single_and_closed_range() -> None:
    rs = RangeSet()
    rs.add(5)
    rs.add(10, 12)
    assert rs.ranges() == [(5, 5), (10, 12)]
    assert [x for x in range(15) if x in rs] == [5, 10, 11, 12]
    assert len(rs) == 2 and rs.count() == 4


def test_rangeset_add_merges_adjacent_ranges() -> None:
    rs = RangeSet()
    rs.add(1, 3)
    rs.add(5, 6)
    rs.add(4)
    assert rs.ranges() == [(1, 6)]
    rs.add(7)
    rs.add(0)
    assert rs.ranges() == [(0, 7)]


def test_rangeset_add_bridging_many_ranges_merges_them_all() -> None:
    rs = RangeSet()
    for lo in range(0, 100, 10):
        rs.add(lo, lo + 2)
    rs.add(25, 61)
    assert rs.ranges() == [(0, 2), (10, 12), (20, 22), (25, 62), (70, 72), (80, 82), (90, 92)]


def test_rangeset_add_inside_existing_range_changes_nothing() -> None:
    rs = RangeSet()
    rs.add(10, 20)
    rs.add(12, 15)
    rs.add(20)
    assert rs.ranges() == [(10, 20)]


def test_rangeset_add_before_all_ranges_keeps_order() -> None:
    rs = RangeSet()
    rs.add(50)
    rs.add(10, 11)
    rs.add(30)
    assert rs.ranges() == [(10, 11), (30, 30), (50, 50)]


def test_rangeset_add_rejects_reversed_range() -> None:
    with pytest.raises(ValueError, match=r"empty range \[5, 4\]"):
        RangeSet().add(5, 4)


def test_rangeset_remove_below_trims_straddling_range_and_drops_lower_ones() -> None:
    rs = RangeSet()
    rs.add(1, 2)
    rs.add(5, 9)
    rs.add(20)
    rs.remove_below(7)
    assert rs.ranges() == [(7, 9), (20, 20)]
    rs.remove_below(10)
    assert rs.ranges() == [(20, 20)]
    rs.remove_below(21)
    assert rs.ranges() == []


def test_rangeset_remove_below_at_range_start_keeps_range() -> None:
    rs = RangeSet()
    rs.add(5, 9)
    rs.remove_below(5)
    rs.remove_below(0)
    assert rs.ranges() == [(5, 9)]


def test_rangeset_equality_compares_ranges() -> None:
    a, b = RangeSet(), RangeSet()
    a.add(1, 3)
    b.add(3)
    b.add(1, 2)
    assert a == b
    b.add(7)
    assert a != b


_rs_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 200), st.integers(0, 6)),
        st.tuples(st.just("below"), st.integers(0, 210), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_rs_ops)
def test_rangeset_behaves_like_a_set_of_ints(ops: list[tuple[str, int, int]]) -> None:
    rs, model = RangeSet(), set[int]()
    for op, x, width in ops:
        if op == "add":
            if width == 0:
                rs.add(x)
            else:
                rs.add(x, x + width)
            model.update(range(x, x + width + 1))
        else:
            rs.remove_below(x)
            model = {v for v in model if v >= x}
        assert rs.ranges() == _ranges_of(model)
    assert [x in rs for x in range(-2, 215)] == [x in model for x in range(-2, 215)]
    assert rs.count() == len(model) and len(rs) == len(_ranges_of(model))


# ---------------------------------------------------------------------- Cursor
def test_cursor_defaults_to_nothing_acked() -> None:
    c = Cursor()
    assert c.mark_delete == 0 and not c.is_acked(0) and len(c.acked) == 0


def test_cursor_rejects_negative_mark_delete() -> None:
    with pytest.raises(ValueError, match="mark_delete"):
        Cursor(-1)
    with pytest.raises(ValueError, match="mark_delete"):
        Cursor().reset(-5)


def test_cursor_everything_below_mark_delete_is_acked() -> None:
    c = Cursor(10)
    assert c.is_acked(0) and c.is_acked(9) and not c.is_acked(10)


def test_cursor_in_order_acks_advance_mark_delete() -> None:
    c = Cursor()
    for o in range(100):
        assert c.ack(o)
    assert c.mark_delete == 100 and c.acked.ranges() == []


def test_cursor_out_of_order_ack_is_kept_as_individual_range() -> None:
    c = _cursor(0, 3, 4, 5, 9)
    assert c.mark_delete == 0
    assert c.acked.ranges() == [(3, 5), (9, 9)]
    assert c.is_acked(4) and not c.is_acked(6)


def test_cursor_ack_at_mark_delete_jumps_past_contiguous_acked_ranges() -> None:
    c = _cursor(0, 1, 2, 4, 7)
    assert c.ack(0)
    assert c.mark_delete == 3 and c.acked.ranges() == [(4, 4), (7, 7)]
    assert c.ack(3)
    assert c.mark_delete == 5 and c.acked.ranges() == [(7, 7)]


def test_cursor_ack_returns_false_when_already_acked() -> None:
    c = _cursor(5, 8)
    assert not c.ack(4)
    assert not c.ack(8)
    assert c.ack(9)
    assert c.acked.ranges() == [(8, 9)]


def test_cursor_cumulative_ack_advances_and_absorbs_contiguous_ranges() -> None:
    c = _cursor(0, 5, 6, 10)
    c.ack_cumulative(4)
    assert c.mark_delete == 7 and c.acked.ranges() == [(10, 10)]


def test_cursor_cumulative_ack_drops_ranges_below_and_absorbs_straddling_one() -> None:
    c = _cursor(0, 2, 5, 6, 7, 12)
    c.ack_cumulative(5)
    assert c.mark_delete == 8 and c.acked.ranges() == [(12, 12)]


def test_cursor_cumulative_ack_below_mark_delete_changes_nothing() -> None:
    c = _cursor(10, 12)
    c.ack_cumulative(3)
    c.ack_cumulative(9)
    assert c.mark_delete == 10 and c.acked.ranges() == [(12, 12)]


def test_cursor_reset_seeks_and_forgets_individual_acks() -> None:
    c = _cursor(0, 3, 5)
    c.reset(2)
    assert c.mark_delete == 2 and c.acked.ranges() == []
    assert c.is_acked(1) and not c.is_acked(3)
    c.reset(0)
    assert not c.is_acked(1)


_cursor_ops = st.lists(
    st.one_of(
        st.tuples(st.just("ack"), st.integers(0, 80)),
        st.tuples(st.just("cum"), st.integers(-1, 80)),
        st.tuples(st.just("reset"), st.integers(0, 60)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 20), _cursor_ops)
def test_cursor_behaves_like_a_set_of_acked_offsets(start: int, ops: list[tuple[str, int]]) -> None:
    c = Cursor(start)
    floor, model = start, set[int]()  # acked: everything below floor, plus model

    def acked(x: int) -> bool:
        return x < floor or x in model

    for op, x in ops:
        if op == "ack":
            assert c.ack(x) == (not acked(x))
            model.add(x)
        elif op == "cum":
            c.ack_cumulative(x)
            floor = max(floor, x + 1)
        else:
            c.reset(x)
            floor, model = x, set()
        md = floor
        while md in model:
            md += 1
        assert c.mark_delete == md
        assert all(lo > md for lo, _ in c.acked.ranges())
        assert c.acked.ranges() == _ranges_of({v for v in model if v > md})
    assert [c.is_acked(x) for x in range(90)] == [acked(x) for x in range(90)]
    assert Cursor.decode(c.mark_delete, c.encode_ranges()[0]) == c


# ---------------------------------------------------------------------- commit metadata
def test_encode_ranges_of_a_cursor_without_individual_acks_is_empty() -> None:
    assert Cursor(42).encode_ranges() == ("", 0)


def test_encode_ranges_is_relative_to_mark_delete() -> None:
    c = Cursor(100)
    for o in (*range(103, 106), 109, *range(112, 141)):
        c.ack(o)
    assert c.encode_ranges() == ("r1:3-5,9,12-40", 0)


def test_decode_is_the_inverse_of_encode_ranges() -> None:
    c = Cursor.decode(100, "r1:3-5,9,12-40")
    assert c.mark_delete == 100
    assert c.acked.ranges() == [(103, 105), (109, 109), (112, 140)]
    assert c.encode_ranges() == ("r1:3-5,9,12-40", 0)


@pytest.mark.parametrize("metadata", [None, "", "r1:"])
def test_decode_of_empty_metadata_has_no_individual_acks(metadata: str | None) -> None:
    c = Cursor.decode(7, metadata)
    assert c.mark_delete == 7 and c.acked.ranges() == []


def test_decode_tolerates_unordered_overlapping_ranges_and_an_acked_mark_delete() -> None:
    c = Cursor.decode(10, "r1:5-6,0-1,3,9,8")
    assert c.mark_delete == 12 and c.acked.ranges() == [(13, 13), (15, 16), (18, 19)]


def test_decode_rejects_unknown_format_tag() -> None:
    with pytest.raises(ValueError, match="unknown format tag"):
        Cursor.decode(0, "r9:1-2")
    with pytest.raises(ValueError, match="unknown format tag"):
        Cursor.decode(0, "some other app's metadata")


@pytest.mark.parametrize(
    "metadata",
    [
        "r1:abc",
        "r1:3-",
        "r1:-3",
        "r1:5-3",
        "r1:3,,4",
        "r1: 3",
        "r1:3,",
        "r1:+3",
        "r1:1_000",
        "r1:\u00b2",
        "r1:99999999999999999999",
        "r1:1-" + "9" * 5000,
        "z1:\u00e9t\u00e9",
        "z1:!!!not base64",
        "z1:" + base64.b64encode(b"not zlib").decode(),
        "z1:" + base64.b64encode(zlib.compress(b"\x01\x02")[:-3]).decode(),
        "z1:" + base64.b64encode(zlib.compress(b"\x01")).decode(),
        "z1:" + base64.b64encode(zlib.compress(b"\x01\x82")).decode(),
        "z1:" + base64.b64encode(zlib.compress(b"\x01\x01") + b"junk").decode(),
        "z1:" + base64.b64encode(zlib.compress(b"\xff" * 10 + b"\x01\x00")).decode(),
    ],
)
def test_decode_rejects_garbage_with_value_error(metadata: str) -> None:
    with pytest.raises(ValueError, match="cursor metadata"):
        Cursor.decode(0, metadata)


def test_encode_ranges_keeps_the_earliest_ranges_that_fit_and_counts_the_dropped() -> None:
    c = Cursor(0)
    for o in range(1, 40, 2):  # 20 ranges: 1,3,...,39
        c.ack(o)
    text, dropped = c.encode_ranges(max_chars=12)  # too short for any compressed form
    assert text == "r1:1,3,5,7,9"
    assert dropped == 15
    restored = Cursor.decode(0, text)
    assert restored.acked.ranges() == c.acked.ranges()[:5]


def test_encode_ranges_with_no_room_drops_every_range() -> None:
    c = _cursor(0, 5, 7)
    assert c.encode_ranges(max_chars=3) == ("", 2)


def test_encode_ranges_compresses_when_shorter() -> None:
    c = Cursor(1_000_000)
    for o in range(1_000_001, 1_020_000, 2):  # ~10k ranges, far too many for plain text
        c.ack(o)
    text, dropped = c.encode_ranges()
    assert text.startswith("z1:") and dropped == 0 and len(text) <= 3500
    assert Cursor.decode(1_000_000, text) == c


def _plain(c: Cursor) -> list[str]:
    md = c.mark_delete
    return [str(lo - md) if lo == hi else f"{lo - md}-{hi - md}" for lo, hi in c.acked.ranges()]


def test_encode_ranges_compressed_truncation_keeps_a_prefix_that_fits() -> None:
    rng = random.Random(7)
    c = Cursor(0)
    for o in rng.sample(range(1, 200_000), 5000):
        c.ack(o)
    text, dropped = c.encode_ranges(max_chars=2000)
    assert text.startswith("z1:") and len(text) <= 2000 and 0 < dropped < len(c.acked)
    restored = Cursor.decode(0, text)
    assert restored.acked.ranges() == c.acked.ranges()[: len(c.acked) - dropped]
    tokens = _plain(c)
    plain_fit = max(k for k in range(len(tokens)) if len("r1:" + ",".join(tokens[:k])) <= 2000)
    assert len(c.acked) - dropped > plain_fit  # compression keeps more ranges than plain text would


def test_encode_ranges_stays_readable_for_a_few_ranges() -> None:
    c = _cursor(0, *range(1, 60, 3))
    assert c.encode_ranges() == ("r1:" + ",".join(_plain(c)), 0)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10**12),
    st.sets(st.integers(0, 5000), max_size=400),
    st.integers(0, 400),
)
def test_encode_decode_round_trips_or_keeps_a_prefix(mark_delete: int, rel: set[int], max_chars: int) -> None:
    c = Cursor(mark_delete)
    for o in rel:
        c.ack(mark_delete + o)
    full, none_dropped = c.encode_ranges(max_chars=10**9)
    assert none_dropped == 0 and Cursor.decode(c.mark_delete, full) == c
    assert len(full) <= len("r1:" + ",".join(_plain(c)))  # the shorter of plain and compressed
    text, dropped = c.encode_ranges(max_chars=max_chars)
    assert len(text) <= max_chars
    restored = Cursor.decode(c.mark_delete, text)
    assert restored.mark_delete == c.mark_delete
    assert restored.acked.ranges() == c.acked.ranges()[: len(c.acked) - dropped]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 8)), max_size=12),
    st.integers(0, 70),
    st.integers(0, 70),
)
def test_gaps_are_exactly_the_uncovered_ints_of_the_span(
    ranges: list[tuple[int, int]], lo: int, span: int
) -> None:
    covered = RangeSet()
    for start, length in ranges:
        covered.add(start, start + length)
    hi = lo + span
    gaps = covered.gaps(lo, hi)
    assert [o for a, b in gaps for o in range(a, b + 1)] == [o for o in range(lo, hi + 1) if o not in covered]
    assert all(b + 1 < c for (_a, b), (c, _d) in itertools.pairwise(gaps))  # merged, in order
