"""The checker: DESIGN.md's invariants, decided from histories, observations and the final state.

Pure functions of their inputs (no Kafka here), so they are unit-tested with histories made by hand,
including ones that break each rule.

An operation's status is what the client saw when that is certain (``ok``: committed; ``fail``:
not committed), else the coordinator's final word (``tc_status``, read from its log after the run),
else unknown. Unknown transactions may have gone either way, but only all or nothing.

Rules (anomaly kinds):

* ``lost-write``: a committed operation's write is missing at the end (durability, atomicity).
* ``aborted-visible``: a write of an operation that did not commit is there (atomicity).
* ``partial-transaction``: some but not all writes of an operation of unknown status are there.
* ``wrong-partition``: a write landed in another partition than it was sent to.
* ``txn-order``: one operation's writes to a partition are there in another order than sent.
* ``duplicate``: a value is there more than once (idempotent producer, exactly once).
* ``unexpected-value``: a value nobody wrote.
* ``dirty-read``: a reader delivered a value that is not committed at the end (read committed).
* ``read-order``: a reader's delivery on a partition is not a prefix of the partition's committed
  messages in offset order: a committed message skipped, or delivered out of order (invariant 2).
* ``outcome-mismatch``: the client saw one outcome and the coordinator logged the other.
* ``txn-id-reused``: two operations got the same TxnID (the coordinator's sequence after a crash).
* ``txn-id-order``: a TxnID allocated after another one had been returned is not larger (E7).
* ``double-processing``: an input has more than one committed output (exactly once, invariant 4).
* ``double-ack``: two committed transactions acknowledged the same input (isolation, invariant 5).
* ``xfer-read-mismatch``: a consumer delivered a value other than the one committed at its offset.
* ``lost-input``: after the final drain an input has no output (an aborted ack never redelivered).
* ``uncommitted-unexpected``: a READ_UNCOMMITTED consumer delivered a value nobody wrote (a marker,
  forged or not, or another control record, delivered as data).
* ``uncommitted-skip``: its deliveries on a partition are not exactly the partition's data records
  in offset order from the first one: one skipped (committed, aborted or open), another value at an
  offset, or an offset out of order (a run that starts over after a group re-join is fine).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tests.jepsen.history import Location, Op, Read

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
OUTPUT_SEPARATOR = ">"  # an output value is "<input value>><op key>"


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str


@dataclass
class Report:
    anomalies: list[Anomaly] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def add(self, kind: str, detail: str) -> None:
        self.anomalies.append(Anomaly(kind, detail))

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(a.kind for a in self.anomalies))

    def summary(self, limit: int = 20) -> str:
        lines = [f"{'VALID' if self.valid else 'INVALID'}: {dict(sorted(self.counts.items()))}"]
        if self.anomalies:
            lines.append(f"anomalies: {self.by_kind()}")
            lines += [f"  {a.kind}: {a.detail}" for a in self.anomalies[:limit]]
        return "\n".join(lines)


def status(op: Op) -> str:
    if op.outcome == "ok":
        return COMMITTED
    if op.outcome == "fail":
        return ABORTED
    if op.f in ("txn", "xfer") and op.txn is None:
        return ABORTED  # never begun: nothing was written (``begun`` precedes the first write)
    if op.tc_status == "COMMITTED":
        return COMMITTED
    if op.tc_status in ("ABORTED", "ABORTING"):
        return ABORTED
    return UNKNOWN


def check(
    ops: Iterable[Op],
    observations: Mapping[tuple[str, int], list[Read]],
    final: Mapping[tuple[str, int], list[tuple[int, str]]],
    *,
    inputs: Iterable[str] = (),
    input_topic: str | None = None,
    transfers: Iterable[tuple[str, str]] = (),
    drained: bool = False,
    uncommitted: Mapping[tuple[str, int], list[Read]] | None = None,
    raw: Mapping[tuple[str, int], list[tuple[int, str]]] | None = None,
    forged: Iterable[str] = (),
) -> Report:
    """``final``: per (topic, partition), the committed messages in offset order, read after the run.
    ``inputs``: values written to ``input_topic`` before the run (the transfers' other inputs are
    the plain sends to it). ``transfers``: (subscription, output topic) of each consume-process-
    produce group; each must hold every input exactly once. ``drained``: the transfers ran until
    nothing was left to process. ``uncommitted``: what READ_UNCOMMITTED consumers delivered, per
    (consumer, incarnation); ``raw``: every data record of their partitions (see
    ``_check_uncommitted``). ``forged``: values of data records the forger wrote (a READ_UNCOMMITTED
    consumer delivers them; nobody else may)."""
    ops = list(ops)
    report = Report()
    where: dict[str, list[Location]] = defaultdict(list)
    for (topic, partition), messages in final.items():
        for offset, value in messages:
            where[value].append((topic, partition, offset))
    report.counts["final_values"] = len(where)
    for value, places in where.items():
        if len(places) > 1:
            report.add("duplicate", f"{value!r} at {places}")
    inputs = set(inputs)
    _check_writes(ops, where, inputs, report)
    _check_observations(observations, final, ops, report)
    _check_txn_ids(ops, report)
    if uncommitted:
        written = inputs | {w[2] for op in ops for w in op.writes} | set(forged)
        _check_uncommitted(uncommitted, final, written, raw, report)
    if input_topic is not None:
        for (topic, _p), messages in final.items():
            if topic == input_topic:
                inputs.update(v for _o, v in messages)
        report.counts["inputs"] = len(inputs)
        for subscription, output_topic in transfers:
            mine = [op for op in ops if op.f == "xfer" and op.sub == subscription]
            _check_transfers(mine, final, inputs, subscription, output_topic, drained, report)
    return report


def _check_writes(
    ops: list[Op], where: Mapping[str, list[Location]], inputs: set[str], report: Report
) -> None:
    written = set(inputs)
    for op in ops:
        st = status(op)
        report.counts[f"{op.f}:{st}"] += 1
        if op.error and op.error.startswith("TransactionConflict"):
            report.counts["conflicts"] += 1
        if op.outcome == "ok" and op.tc_status in ("ABORTED", "ABORTING"):
            report.add(
                "outcome-mismatch", f"{op.key} {op.txn}: client saw a commit, TC logged {op.tc_status}"
            )
        if op.outcome == "fail" and op.tc_status in ("COMMITTED", "COMMITTING"):
            report.add(
                "outcome-mismatch", f"{op.key} {op.txn}: client saw no commit, TC logged {op.tc_status}"
            )
        present = []
        for topic, partition, value in op.writes:
            written.add(value)
            places = where.get(value)
            if not places:
                continue
            present.append(places[0])
            if places[0][:2] != (topic, partition):
                report.add(
                    "wrong-partition", f"{op.key}: {value!r} sent to {topic}[{partition}], at {places[0]}"
                )
        if st == COMMITTED and len(present) < len(op.writes):
            missing = [v for _t, _p, v in op.writes if v not in where]
            report.add("lost-write", f"{op.key} {op.txn} ({op.f}, {op.outcome}): missing {missing[:5]}")
        elif st == ABORTED and present:
            report.add(
                "aborted-visible",
                f"{op.key} {op.txn} ({op.f}, {op.outcome}, intent {op.intent}): {present[:5]}",
            )
        elif st == UNKNOWN and 0 < len(present) < len(op.writes):
            report.add("partial-transaction", f"{op.key} {op.txn}: {len(present)} of {len(op.writes)} writes")
        if len(present) == len(op.writes):
            by_partition: dict[tuple[str, int], list[int]] = defaultdict(list)
            for topic, partition, offset in present:
                by_partition[(topic, partition)].append(offset)
            for tp, offsets in by_partition.items():
                if offsets != sorted(offsets):
                    report.add("txn-order", f"{op.key} {op.txn}: offsets {offsets} in {tp[0]}[{tp[1]}]")
    report.counts["written_values"] = len(written)
    unexpected = [v for v in where if v not in written]
    for value in unexpected[:20]:
        report.add("unexpected-value", f"{value!r} at {where[value]}")


def _check_observations(
    observations: Mapping[tuple[str, int], list[Read]],
    final: Mapping[tuple[str, int], list[tuple[int, str]]],
    ops: list[Op],
    report: Report,
) -> None:
    committed_values = {v for messages in final.values() for _o, v in messages}
    owner = {w[2]: op for op in ops for w in op.writes}
    for (reader, inc), seen in observations.items():
        per_partition: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
        for topic, partition, offset, value in seen:
            per_partition[(topic, partition)].append((offset, value))
        for tp, delivered in per_partition.items():
            report.counts["observed"] += len(delivered)
            expected = final.get(tp, [])
            for i, (offset, value) in enumerate(delivered):
                if value not in committed_values:
                    op = owner.get(value)
                    why = f" (of {op.key} {op.txn}, {status(op)})" if op else ""
                    report.add(
                        "dirty-read", f"{reader}#{inc} delivered {value!r} at {tp[0]}[{tp[1]}]@{offset}{why}"
                    )
                    break
                if i >= len(expected) or expected[i] != (offset, value):
                    want = expected[i] if i < len(expected) else None
                    report.add(
                        "read-order",
                        f"{reader}#{inc} delivery #{i} on {tp[0]}[{tp[1]}] was {(offset, value)},"
                        f" committed: {want}",
                    )
                    break


def _check_uncommitted(
    uncommitted: Mapping[tuple[str, int], list[Read]],
    final: Mapping[tuple[str, int], list[tuple[int, str]]],
    written: set[str],
    raw: Mapping[tuple[str, int], list[tuple[int, str]]] | None,
    report: Report,
) -> None:
    """``raw``: per partition, every data record (control records left out) in offset order, read
    after the run. With it, each run of deliveries must be exactly a stretch of it, from the
    partition's first record: nothing skipped, committed or not. Without it, only the committed
    messages are checked that way."""
    committed_values = {v for messages in final.values() for _o, v in messages}
    expected_all = raw if raw is not None else final
    for (consumer, inc), seen in uncommitted.items():
        per_partition: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
        for topic, partition, offset, value in seen:
            per_partition[(topic, partition)].append((offset, value))
        for tp, delivered in per_partition.items():
            report.counts["observed_uncommitted"] += len(delivered)
            report.counts["uncommitted_only"] += sum(v not in committed_values for _o, v in delivered)
            where = f"{consumer}#{inc} on {tp[0]}[{tp[1]}]"
            unexpected = [(o, v) for o, v in delivered if v not in written]
            if unexpected:
                report.add("uncommitted-unexpected", f"{where}: {unexpected[:3]}")
            # A consumer that never acknowledges starts over after a group re-join: each new run
            # starts where its offsets go back, and must again start at the partition's beginning.
            runs: list[list[tuple[int, str]]] = []
            for item in delivered:
                if runs and item[0] > runs[-1][-1][0]:
                    runs[-1].append(item)
                else:
                    runs.append([item])
            report.counts["uncommitted_restarts"] += len(runs) - 1
            expected = expected_all.get(tp, [])
            for run in runs:
                gap = _first_gap(run, expected, exact=raw is not None)
                if gap is not None:
                    report.add("uncommitted-skip", f"{where}: {gap}")
                    break


def _first_gap(run: list[tuple[int, str]], expected: list[tuple[int, str]], *, exact: bool) -> str | None:
    """Where ``run`` (increasing offsets) departs from ``expected``: with ``exact``, it must equal
    ``expected``'s first len(run) entries; else it must contain every expected entry up to its last
    offset (it may hold more: records of transactions that did not commit)."""
    if exact:
        for i, item in enumerate(run):
            want = expected[i] if i < len(expected) else None
            if item != want:
                return f"delivery #{i} was {item}, the partition holds {want}"
        return None
    got = dict(run)
    last = run[-1][0]
    for offset, value in expected:
        if offset > last:
            break
        if got.get(offset) != value:
            return f"committed {value!r}@{offset}, delivered {got.get(offset)!r}"
    return None


def _check_txn_ids(ops: list[Op], report: Report) -> None:
    begun = [op for op in ops if op.txn is not None and op.begun is not None]
    by_id: dict[str, list[Op]] = defaultdict(list)
    for op in begun:
        by_id[op.txn or ""].append(op)
    for txn, holders in by_id.items():
        if len(holders) > 1:
            report.add("txn-id-reused", f"{txn} given to {[o.key for o in holders]}")
    report.counts["txn_ids"] = len(by_id)
    # Per TC: a begin invoked after another begin returned must get a larger sequence number.
    per_tc: dict[str, list[tuple[int, int, int, Op]]] = defaultdict(list)
    for op in begun:
        assert op.txn is not None and op.begun is not None
        tc, sequence = op.txn.strip("()").split(",")
        per_tc[tc].append((op.begun[0], op.begun[1], int(sequence), op))
    for tc, items in per_tc.items():
        by_end = sorted(items, key=lambda x: x[1])
        best: tuple[int, Op] | None = None  # the largest sequence among begins returned so far
        i = 0
        for b0, _b1, seq, op in sorted(items, key=lambda x: x[0]):
            while i < len(by_end) and by_end[i][1] < b0:
                if best is None or by_end[i][2] > best[0]:
                    best = (by_end[i][2], by_end[i][3])
                i += 1
            if best is not None and best[0] >= seq:
                report.add(
                    "txn-id-order",
                    f"TC {tc}: {op.key} got ({tc},{seq}) after {best[1].key} had returned ({tc},{best[0]})",
                )


def _check_transfers(
    ops: list[Op],
    final: Mapping[tuple[str, int], list[tuple[int, str]]],
    inputs: set[str],
    subscription: str,
    output_topic: str,
    drained: bool,
    report: Report,
) -> None:
    """One subscription's transfers (``ops``) into ``output_topic``."""
    outputs: dict[str, list[str]] = defaultdict(list)
    for (topic, _p), messages in final.items():
        if topic == output_topic:
            for _o, value in messages:
                source, _sep, op_key = value.rpartition(OUTPUT_SEPARATOR)
                outputs[source].append(op_key)
    committed_reads: dict[str, list[str]] = defaultdict(list)
    # Inputs a committed probe (a second transaction acking a held message, no output: see
    # workload._ack_again) consumed: legitimate when the first transaction had ended (e.g. timed
    # out) before the probe's ack; if both committed, that is a double-ack.
    probed: set[str] = set()
    at = {(t, p, o): v for (t, p), messages in final.items() for o, v in messages}
    for op in ops:
        for topic, partition, offset, value in op.reads:
            if at.get((topic, partition, offset)) != value:
                report.add(
                    "xfer-read-mismatch",
                    f"{op.key} read {value!r} at {topic}[{partition}]@{offset}, committed:"
                    f" {at.get((topic, partition, offset))!r}",
                )
            if status(op) == COMMITTED:
                committed_reads[value].append(op.key)
                if not op.writes:
                    probed.add(value)
    for value, keys in committed_reads.items():
        if len(keys) > 1:
            report.add("double-ack", f"{subscription}: input {value!r} acknowledged by committed {keys}")
    report.counts[f"inputs_processed[{subscription}]"] = sum(1 for v in inputs if outputs.get(v))
    if probed:
        report.counts[f"inputs_acked_by_probe[{subscription}]"] = len(probed & inputs)
    for value in sorted(inputs):
        made = outputs.get(value, [])
        if len(made) > 1:
            report.add("double-processing", f"{subscription}: input {value!r} has outputs of {made}")
        elif not made and drained and value not in probed:
            report.add("lost-input", f"{subscription}: input {value!r} has no output after the drain")
