"""The consumer's unacked-message index agrees with a plain dict under any mix of deliveries,
individual removals and take-up-to-a-position (cumulative acks), and its offset lists stay bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsar_txn.subscription.unacked import Unacked

TPS = [("a", 0), ("a", 1), ("b", 0)]
ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "pop", "upto", "all", "clear"]), st.sampled_from(TPS), st.integers(0, 60)
    ),
    max_size=300,
)


class _EagerRebuild(Unacked[int]):
    _SLACK = 3  # rebuilds every few leftovers: the property below then covers them too


@settings(max_examples=300, deadline=None)
@given(ops, st.booleans())
def test_the_index_behaves_as_a_dict_with_take_upto(
    steps: list[tuple[str, tuple[str, int], int]], eager: bool
) -> None:
    index: Unacked[int] = _EagerRebuild() if eager else Unacked()
    model: dict[tuple[str, int, int], int] = {}
    for i, (op, tp, offset) in enumerate(steps):
        key = (tp[0], tp[1], offset)
        if op == "add":
            index[key] = i
            model[key] = i
        elif op == "pop":
            assert index.pop(key, None) == model.pop(key, None)
        elif op in ("upto", "all"):
            limit = offset if op == "upto" else float("inf")
            taken = index.take_partition(tp) if op == "all" else index.take_upto(tp, limit)
            expected = sorted((k, v) for k, v in model.items() if (k[0], k[1]) == tp and k[2] <= limit)
            for k, _v in expected:
                del model[k]
            assert taken == expected
        else:
            index.clear()
            model.clear()
        assert sorted(index.items()) == sorted(model.items()) and len(index) == len(model)


def test_offsets_removed_one_by_one_do_not_pile_up() -> None:
    index: Unacked[int] = Unacked()
    for offset in range(100_000):  # delivered and acked individually, never cumulatively
        index[("t", 0, offset)] = offset
        index.pop(("t", 0, offset))
    assert index._listed <= 2 * len(index) + 1024


def test_the_entry_whose_insert_triggers_a_rebuild_is_still_taken() -> None:
    # The rebuild re-lists what the dict holds: the new entry was put in the dict only after it, so
    # its offset was in no list, and a cumulative ack (or a cumulative abort's redelivery) missed it.
    index: Unacked[str] = Unacked()
    for offset in range(1024):  # delivered and acked individually: leftovers in the offset list
        index[("t", 0, offset)] = "m"
        index.pop(("t", 0, offset))
    for offset in range(1024, 1029):
        index[("t", 0, offset)] = "m"
    assert [k[2] for k, _v in index.take_upto(("t", 0), 1028)] == [1024, 1025, 1026, 1027, 1028]
    assert len(index) == 0
