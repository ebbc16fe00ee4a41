"""The Jepsen-style checker on histories made by hand: a correct one passes, and each rule catches
the history that breaks it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.jepsen.checker import ABORTED, COMMITTED, UNKNOWN, Report, check, status
from tests.jepsen.history import Observations, Op, Recorder, load_observations, load_ops

D = "data"


def op(
    n: int,
    outcome: str,
    *values: tuple[int, str],
    txn: str | None = None,
    f: str = "txn",
    tc_status: str | None = None,
) -> Op:
    o = Op("w1", 1, n, f=f, outcome=outcome, txn=txn or f"(0,{n})", tc_status=tc_status)
    o.writes = [(D, p, v) for p, v in values]
    o.begun = (n * 10, n * 10 + 5)
    return o


def kinds(report: Report) -> set[str]:
    return {a.kind for a in report.anomalies}


def test_a_correct_history_is_valid() -> None:
    ops = [op(1, "ok", (0, "a"), (1, "b")), op(2, "fail", (0, "c")), op(3, "info", (0, "d"))]
    final = {(D, 0): [(0, "a"), (5, "d")], (D, 1): [(1, "b")]}
    seen = {("r1", 1): [(D, 0, 0, "a"), (D, 1, 1, "b"), (D, 0, 5, "d")]}
    report = check(ops, seen, final)
    assert report.valid, report.summary()
    assert report.counts["txn:committed"] == 1 and report.counts["txn:unknown"] == 1


def test_status_prefers_the_clients_certainty_then_the_coordinators_log() -> None:
    assert status(op(1, "ok")) == COMMITTED
    assert status(op(1, "fail")) == ABORTED
    assert status(op(1, "info", tc_status="COMMITTED")) == COMMITTED
    assert status(op(1, "info", tc_status="ABORTED")) == ABORTED
    assert status(op(1, "info")) == UNKNOWN
    never_begun = Op("w1", 1, 1, f="txn", outcome="info")
    assert status(never_begun) == ABORTED  # nothing is written before ``begun`` is recorded


def test_a_committed_write_that_is_missing_is_a_lost_write() -> None:
    report = check([op(1, "ok", (0, "a"), (0, "b"))], {}, {(D, 0): [(0, "a")]})
    assert kinds(report) == {"lost-write"}


def test_an_aborted_write_that_is_visible_is_caught() -> None:
    report = check([op(1, "fail", (0, "a"))], {}, {(D, 0): [(0, "a")]})
    assert kinds(report) == {"aborted-visible"}
    # The coordinator's log decides an op the client could not see the end of.
    report = check([op(1, "info", (0, "a"), tc_status="ABORTED")], {}, {(D, 0): [(0, "a")]})
    assert kinds(report) == {"aborted-visible"}


def test_an_unknown_transaction_must_be_all_or_nothing() -> None:
    report = check([op(1, "info", (0, "a"), (1, "b"))], {}, {(D, 0): [(0, "a")]})
    assert kinds(report) == {"partial-transaction"}


def test_duplicates_wrong_partitions_and_values_nobody_wrote_are_caught() -> None:
    ops = [op(1, "ok", (0, "a")), op(2, "ok", (1, "b"))]
    final = {(D, 0): [(0, "a"), (1, "a"), (2, "b"), (3, "zz")]}
    assert kinds(check(ops, {}, final)) == {"duplicate", "wrong-partition", "unexpected-value"}


def test_writes_of_one_transaction_out_of_send_order_are_caught() -> None:
    report = check([op(1, "ok", (0, "a"), (0, "b"))], {}, {(D, 0): [(0, "b"), (1, "a")]})
    assert kinds(report) == {"txn-order"}


def test_a_reader_that_delivered_an_aborted_value_made_a_dirty_read() -> None:
    ops = [op(1, "ok", (0, "a")), op(2, "fail", (0, "x"))]
    seen = {("r1", 1): [(D, 0, 0, "a"), (D, 0, 1, "x")]}
    report = check(ops, seen, {(D, 0): [(0, "a")]})
    assert kinds(report) == {"dirty-read"}
    assert "(of w1.1.2 (0,2), aborted)" in report.anomalies[0].detail


def test_a_reader_that_skipped_or_reordered_committed_messages_is_caught() -> None:
    ops = [op(1, "ok", (0, "a"), (0, "b"), (0, "c"))]
    final = {(D, 0): [(0, "a"), (1, "b"), (2, "c")]}
    assert kinds(check(ops, {("r1", 1): [(D, 0, 0, "a"), (D, 0, 2, "c")]}, final)) == {"read-order"}
    assert kinds(check(ops, {("r1", 1): [(D, 0, 1, "b"), (D, 0, 0, "a")]}, final)) == {"read-order"}
    # A prefix is fine: the reader stopped (or was killed) before the rest was committed.
    assert check(ops, {("r1", 1): [(D, 0, 0, "a")], ("r1", 2): []}, final).valid


def test_outcomes_the_client_and_the_coordinator_disagree_on_are_caught() -> None:
    ops = [op(1, "ok", tc_status="ABORTED"), op(2, "fail", tc_status="COMMITTED")]
    report = check(ops, {}, {})
    assert [a.kind for a in report.anomalies] == ["outcome-mismatch", "outcome-mismatch"]


def test_a_txn_id_given_twice_or_out_of_real_time_order_is_caught() -> None:
    a, b = op(1, "ok", txn="(0,7)"), op(2, "ok", txn="(0,7)")
    assert "txn-id-reused" in kinds(check([a, b], {}, {}))
    # b's begin started after a's returned, yet b got the smaller sequence: the TC went back.
    a, b = op(1, "ok", txn="(0,9)"), op(2, "ok", txn="(0,8)")
    assert kinds(check([a, b], {}, {})) == {"txn-id-order"}
    # Overlapping begins may be numbered either way; other TCs have sequences of their own.
    a.begun, b.begun = (10, 30), (20, 40)
    assert check([a, b], {}, {}).valid
    assert check([op(1, "ok", txn="(1,9)"), op(2, "ok", txn="(0,8)")], {}, {}).valid


def xfer(n: int, outcome: str, inputs: list[tuple[int, str]], sub: str = "s", out: str = "out") -> Op:
    o = op(n, outcome, f="xfer")
    o.sub = sub
    o.reads = [("in", 0, off, v) for off, v in inputs]
    o.writes = [(out, 0, f"{v}>{o.key}") for _off, v in inputs]
    return o


S = [("s", "out")]


def test_transfers_each_input_exactly_once_with_aborts_redelivered() -> None:
    first = xfer(1, "fail", [(0, "in.0"), (1, "in.1")])
    second = xfer(2, "ok", [(0, "in.0"), (1, "in.1")])
    final = {("in", 0): [(0, "in.0"), (1, "in.1")], ("out", 0): [(0, "in.0>w1.1.2"), (1, "in.1>w1.1.2")]}
    report = check(
        [first, second], {}, final, inputs=["in.0", "in.1"], input_topic="in", transfers=S, drained=True
    )
    assert report.valid, report.summary()
    assert report.counts["inputs_processed[s]"] == 2


def test_an_input_processed_by_two_committed_transactions_is_caught() -> None:
    a, b = xfer(1, "ok", [(0, "in.0")]), xfer(2, "ok", [(0, "in.0")])
    final = {("in", 0): [(0, "in.0")], ("out", 0): [(0, "in.0>w1.1.1"), (1, "in.0>w1.1.2")]}
    report = check([a, b], {}, final, inputs=["in.0"], input_topic="in", transfers=S, drained=True)
    assert kinds(report) == {"double-ack", "double-processing"}


def test_each_subscription_processes_every_input_once_on_its_own() -> None:
    a, b = xfer(1, "ok", [(0, "in.0")], "s", "out"), xfer(2, "ok", [(0, "in.0")], "t", "out2")
    final = {("in", 0): [(0, "in.0")], ("out", 0): [(0, "in.0>w1.1.1")], ("out2", 0): [(0, "in.0>w1.1.2")]}
    groups = [("s", "out"), ("t", "out2")]
    assert check([a, b], {}, final, inputs=["in.0"], input_topic="in", transfers=groups, drained=True).valid
    lost = {("in", 0): [(0, "in.0")], ("out", 0): [(0, "in.0>w1.1.1")]}
    b.outcome = "fail"
    report = check([a, b], {}, lost, inputs=["in.0"], input_topic="in", transfers=groups, drained=True)
    assert [a.detail for a in report.anomalies] == ["t: input 'in.0' has no output after the drain"]


def test_an_input_never_processed_after_the_drain_is_lost_and_a_misread_input_is_caught() -> None:
    aborted = xfer(1, "fail", [(0, "in.0")])
    final = {("in", 0): [(0, "in.0")]}
    report = check([aborted], {}, final, inputs=["in.0"], input_topic="in", transfers=S, drained=True)
    assert kinds(report) == {"lost-input"}
    assert check([aborted], {}, final, inputs=["in.0"], input_topic="in", transfers=S).valid
    misread = xfer(1, "fail", [(0, "in.9")])
    report = check([misread], {}, final, inputs=["in.0"], input_topic="in", transfers=S)
    assert kinds(report) == {"xfer-read-mismatch"}


def test_an_input_consumed_by_a_committed_probe_after_the_holder_aborted_is_not_lost() -> None:
    # The holder (op 1) timed out; the probe (op 2, a second transaction acking the held message,
    # no output) then legitimately acked and committed it: the input was consumed once.
    holder = xfer(1, "fail", [(0, "in.0")])
    probe = xfer(2, "ok", [(0, "in.0")])
    probe.writes = []
    final = {("in", 0): [(0, "in.0")]}
    report = check([holder, probe], {}, final, inputs=["in.0"], input_topic="in", transfers=S, drained=True)
    assert report.valid, report.summary()
    assert report.counts["inputs_acked_by_probe[s]"] == 1
    # Both committed: the probe should have met a conflict.
    holder.outcome = "ok"
    final[("out", 0)] = [(0, "in.0>w1.1.1")]
    report = check([holder, probe], {}, final, inputs=["in.0"], input_topic="in", transfers=S, drained=True)
    assert kinds(report) == {"double-ack"}


def test_histories_survive_a_torn_last_line(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "ops-w1.jsonl", "w1", 2)
    rec.event(1, "invoke", f="txn", writes=[[D, 0, "a"]], intent="commit")
    rec.event(1, "begun", txn="(0,1)", b0=1, b2=2, b1=2)
    rec.close()
    with (tmp_path / "ops-w1.jsonl").open("a") as f:
        f.write(json.dumps({"proc": "w1", "inc": 2, "op": 1, "type": "ok"})[:20])  # the kill hit here
    obs = Observations(tmp_path / "obs-r1.jsonl", "r1", 1)
    obs.seen([(D, 0, 0, "a")])
    obs.seen([])
    obs.close()
    ops, torn = load_ops([tmp_path / "ops-w1.jsonl"])
    assert torn == 1 and len(ops) == 1
    assert (ops[0].key, ops[0].txn, ops[0].outcome, ops[0].writes) == (
        "w1.2.1",
        "(0,1)",
        "info",
        [(D, 0, "a")],
    )
    seen, torn = load_observations([tmp_path / "obs-r1.jsonl"])
    assert (seen, torn) == ({("r1", 1): [(D, 0, 0, "a")]}, 0)


def test_a_read_uncommitted_consumer_sees_aborted_values_in_order_but_never_a_marker() -> None:
    ops = [op(1, "ok", (0, "a")), op(2, "fail", (0, "x")), op(3, "ok", (0, "b"))]
    final = {(D, 0): [(0, "a"), (3, "b")]}  # x at 1, the markers at 2 and 4
    fine = {("d1", 1): [(D, 0, 0, "a"), (D, 0, 1, "x"), (D, 0, 3, "b")], ("d1", 2): [(D, 0, 0, "a")]}
    report = check(ops, {}, final, uncommitted=fine)
    assert report.valid, report.summary()
    assert report.counts["uncommitted_only"] == 1 and report.counts["observed_uncommitted"] == 4
    marker = {("d1", 1): [(D, 0, 0, "a"), (D, 0, 1, "x"), (D, 0, 2, "\x00marker")]}
    assert kinds(check(ops, {}, final, uncommitted=marker)) == {"uncommitted-unexpected"}
    backwards = {("d1", 1): [(D, 0, 1, "x"), (D, 0, 0, "a")]}  # a run that starts at "x"
    assert kinds(check(ops, {}, final, uncommitted=backwards)) == {"uncommitted-skip"}
    skipped = {("d1", 1): [(D, 0, 1, "x"), (D, 0, 3, "b")]}  # passed the committed "a"
    assert kinds(check(ops, {}, final, uncommitted=skipped)) == {"uncommitted-skip"}


def test_against_the_raw_partition_a_read_uncommitted_consumer_may_skip_nothing() -> None:
    ops = [op(1, "ok", (0, "a")), op(2, "fail", (0, "x")), op(3, "ok", (0, "b"))]
    final = {(D, 0): [(0, "a"), (3, "b")]}
    raw = {(D, 0): [(0, "a"), (1, "x"), (3, "b")]}  # the markers (2, 4) left out
    filtering = {("d1", 1): [(D, 0, 0, "a"), (D, 0, 3, "b")]}  # reads like READ_COMMITTED
    assert check(ops, {}, final, uncommitted=filtering).valid  # the committed view cannot tell
    assert kinds(check(ops, {}, final, uncommitted=filtering, raw=raw)) == {"uncommitted-skip"}
    # Starting over (a group re-join: nothing was acknowledged) is fine, from the first record.
    restarted = {("d1", 1): [(D, 0, 0, "a"), (D, 0, 1, "x"), (D, 0, 0, "a"), (D, 0, 1, "x"), (D, 0, 3, "b")]}
    report = check(ops, {}, final, uncommitted=restarted, raw=raw)
    assert report.valid, report.summary()
    assert report.counts["uncommitted_restarts"] == 1
    resumed_midway = {("d1", 1): [(D, 0, 0, "a"), (D, 0, 1, "x"), (D, 0, 1, "x")]}
    assert kinds(check(ops, {}, final, uncommitted=resumed_midway, raw=raw)) == {"uncommitted-skip"}


def test_a_run_that_did_not_drain_does_not_pass_though_the_checker_found_nothing() -> None:
    """Undrained, the check for lost inputs is skipped: the run must not exit 0 (Jepsen review)."""
    from tests.jepsen.checker import Report
    from tests.jepsen.run import Result

    assert Result(Report(), drained=True).passed
    undrained = Result(Report(), drained=False)
    assert undrained.report.valid and not undrained.passed
    assert "NOT DRAINED" in undrained.summary()
    assert not Result(Report(), drained=True, crashes=["xfer-a: RuntimeError"]).passed
