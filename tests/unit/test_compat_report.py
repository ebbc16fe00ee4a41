"""The compatibility table is rendered from recorded outcomes: a skip is never shown as a pass."""

from __future__ import annotations

from types import SimpleNamespace

from compat_tests import _report


def _rep(name: str, when: str, outcome: str, reason: str = "") -> SimpleNamespace:
    longrepr = ("file.py", 1, f"Skipped: {reason}") if outcome == "skipped" else None
    return SimpleNamespace(
        nodeid=f"compat_tests/test_x.py::{name}",
        when=when,
        duration=0.5,
        failed=outcome == "failed",
        skipped=outcome == "skipped",
        longrepr=longrepr,
    )


def test_skips_and_failures_are_reported_as_such_and_only_full_passes_pass() -> None:
    saved = dict(_report._results)  # this session's own compat results, if any, are kept
    _report._results.clear()
    try:
        _check_rendering()
    finally:
        _report._results.clear()
        _report._results.update(saved)


def _check_rendering() -> None:
    for name in ("test_P1_a", "test_R1_b", "test_R4_c", "test_R4_d", "test_E1_e"):
        _report.record(_rep(name, "setup", "passed"))
    _report.record(_rep("test_P1_a", "call", "passed"))
    _report.record(_rep("test_R1_b", "setup", "skipped", "needs restart hook"))
    _report.record(_rep("test_R4_c", "call", "passed"))
    _report.record(_rep("test_R4_d", "setup", "skipped", "needs restart hook"))
    _report.record(_rep("test_E1_e", "call", "passed"))
    _report.record(_rep("test_E1_e", "teardown", "failed"))
    _report.record(_rep("not_a_scenario", "call", "passed"))
    data = {"mode": "embedded", "finished_at": "now", "tests": list(_report._results.values())}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in _report.render(data).splitlines()}
    assert rows["P1"].endswith("| pass (1 test, 1.0 s) |")
    assert "skipped (needs restart hook)" in rows["R1"] and "pass" not in rows["R1"]
    assert "skipped (needs restart hook); 1 of 2 tests passed" in rows["R4"]
    assert "**FAIL** (`test_E1_e`)" in rows["E1"]
    assert rows["P2"].endswith("| not run |")
