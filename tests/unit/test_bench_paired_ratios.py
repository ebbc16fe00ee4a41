"""The benchmarks' verdict function: the median of per-round ratios, with its range."""

from __future__ import annotations

import math

from bench._common import fmt_ratio, fmt_rounds, paired_ratios, run_rounds


def _round(ours: float, plain: float) -> dict[str, dict[str, float]]:
    return {"ours": {"rate": ours}, "plain": {"rate": plain}}


def test_the_verdict_is_the_median_of_each_rounds_own_ratio() -> None:
    # The rates drift between rounds; each round's ratio is taken before any averaging.
    rounds = [_round(80, 100), _round(40, 100), _round(90, 100), _round(170, 200), _round(60, 50)]
    summary = paired_ratios(rounds, "ours", "plain", "rate")
    assert summary == {"median": 0.85, "min": 0.4, "max": 1.2, "n": 5}
    assert fmt_ratio(summary) == "85% (40-120%, 5 rounds)"


def test_an_even_number_of_rounds_averages_the_middle_two() -> None:
    rounds = [_round(70, 100), _round(90, 100), _round(80, 100), _round(60, 100)]
    assert math.isclose(paired_ratios(rounds, "ours", "plain", "rate")["median"], 0.75)


def test_rounds_missing_a_side_or_with_a_zero_rate_are_left_out() -> None:
    rounds = [_round(80, 100), {"ours": {"rate": 50.0}}, _round(10, 0), _round(0, 100)]
    summary = paired_ratios(rounds, "ours", "plain", "rate")
    assert summary["n"] == 1 and summary["median"] == 0.8


def test_no_usable_round_gives_no_verdict() -> None:
    summary = paired_ratios([], "ours", "plain", "rate")
    assert summary["n"] == 0 and math.isnan(summary["median"])
    assert fmt_ratio(summary) == "n/a"


def test_rounds_rotate_the_order_so_no_point_always_runs_first() -> None:
    calls: list[tuple[int, str]] = []

    def measure(i: int, key: str) -> dict[str, float]:
        calls.append((i, key))
        return {"rate": float(len(calls))}

    rounds = run_rounds(["a", "b", "c"], 4, measure)
    assert [r["order"] for r in rounds] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert calls[:4] == [(0, "a"), (0, "b"), (0, "c"), (1, "b")]
    assert fmt_rounds(rounds, "a", "rate") == "1 / 6 / 8 / 10"
