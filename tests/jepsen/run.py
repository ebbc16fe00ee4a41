"""One Jepsen-style run: client processes under a nemesis, then a quiet phase, a final read and the
checker (``tests/jepsen/checker.py``).

1. Topics: two data topics (3 and 2 partitions), an input topic filled with ``prefill`` plain
   messages, an output topic. A coordinator in its own process (4 TCs, TB service on).
2. Two writers, transfer consumers (two Failover subscriptions), a reader and a READ_UNCOMMITTED
   consumer of the data topics run for ``seconds``
   while the nemesis, every 0.7-2.5 s, SIGKILLs the coordinator (restarted after a moment), SIGSTOPs
   it for up to 2.5 s (clients time out, transactions time out), or SIGKILLs a client process
   (restarted at once as a new incarnation), or has a third transfer consumer join or leave the
   group (a rebalance); each kind of fault comes once before any repeats.
3. Quiet phase: the coordinator runs undisturbed until no partition holds an open transaction (the
   abandoned and interrupted ones are aborted by its timeouts); then the transfers drain the input.
4. Final state: every topic read from the beginning with a fresh read-committed Reader; the
   coordinator's word on every TxnID from its log (``TransactionsAdmin``); the checker.

Bounded: the fault phase is ``seconds`` long (or as long as one fault of each kind takes), each
wait below has a limit. All on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kafka_store import Appender, KafkaConfig, end_offsets, free_port, read_range
from pulsar_txn import Client, PulsarTxnError, Timeout, TransactionsAdmin, TxnAction, TxnID
from pulsar_txn.buffer.marker import TXN_HEADER, TxnMarker, marker_record
from pulsar_txn.buffer.reader import is_control
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.naming import TopicName, pending_ack_topic
from tests.conftest import REPO, CoordinatorProcess
from tests.jepsen.checker import Report, check
from tests.jepsen.history import load_observations, load_ops

NUM_TCS = 4
TXN_TIMEOUT_S = 4.0
UNTYPED_CRASH = 1  # exit status of a worker that died of an exception that is not a PulsarTxnError
# The random faults after the first round, by weight.
FAULT_WEIGHTS = [
    *["kill-coordinator"] * 6,
    *["pause-coordinator"] * 4,
    *["kill-writer"] * 5,
    *["kill-xfer"] * 5,
    *["kill-reader"] * 4,
    *["kill-dirty"] * 2,
    *["churn-xfer"] * 5,
    *["forge-markers"] * 3,
]
SECRET_ENV = "PULSAR_TXN_MARKER_SECRET"
EndTxnReply = Literal["after_markers", "after_decision"]


@dataclass
class Result:
    report: Report
    events: list[tuple[float, str]] = field(default_factory=list)  # (seconds into the run, what)
    crashes: list[str] = field(default_factory=list)  # workers that died of an untyped exception
    torn_lines: int = 0
    forged: int = 0  # forged markers written
    forged_open: list[str] = field(default_factory=list)  # values of forged transaction messages
    drained: bool = False
    workdir: Path = Path()

    @property
    def passed(self) -> bool:
        """No anomaly, no untyped crash, and drained: undrained, lost inputs could not be checked."""
        return self.report.valid and not self.crashes and self.drained

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for _t, what in self.events:
            kinds[what.split()[0]] = kinds.get(what.split()[0], 0) + 1
        lines = [
            self.report.summary(),
            f"nemesis: {kinds}; forged markers: {self.forged}; forged txn messages: {len(self.forged_open)};"
            f" torn history lines: {self.torn_lines};"
            f" drained: {self.drained}",
        ]
        if not self.drained:
            lines.append(
                "NOT DRAINED: a transfer consumer did not finish the drain; lost inputs were not checked"
            )
        lines += [f"untyped crash: {c}" for c in self.crashes]
        lines.append(f"files: {self.workdir}")
        return "\n".join(lines)


class _Worker:
    """One client role; each start is a new incarnation with a settings file of its own."""

    def __init__(
        self,
        role: str,
        name: str,
        base: dict[str, Any],
        workdir: Path,
        env: dict[str, str],
        *,
        killable: bool = True,
    ) -> None:
        self.role, self.name, self.base, self.workdir = role, name, base, workdir
        self.killable = killable
        self.env = {**os.environ, **env}
        self.inc = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"{name}.log"

    def start(self, **overrides: Any) -> None:
        self.inc += 1
        settings = {**self.base, **overrides, "proc": self.name, "inc": self.inc}
        path = self.workdir / f"{self.name}-{self.inc}.json"
        path.write_text(json.dumps(settings))
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.jepsen.workload", self.role, str(path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=self.env,
            )

    def crash_report(self) -> str:
        """This incarnation and the end of its log, for a worker that died of an untyped error."""
        return f"{self.name}#{self.inc}: {self.log.read_text()[-1500:]}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def leave(self, timeout: float) -> int | None:
        """SIGTERM: a transfer consumer finishes its batch, leaves the group and exits."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


def _coordinator_config(uid: str, end_txn_reply: EndTxnReply) -> CoordinatorConfig:
    return CoordinatorConfig(
        end_txn_reply=end_txn_reply,
        log_topic=f"__jlog_{uid}",
        owners_topic=f"__jowners_{uid}",
        coordinator_group=f"jcoord_{uid}",
        num_tcs=NUM_TCS,
        ownership="static",
        static_tc_ids=tuple(range(NUM_TCS)),
        port=free_port(),
        log_write_timeout_ms=2000,
        end_retry_max_backoff_ms=200,
        end_txn_retention_ms=3_600_000,  # the final check asks the log about every transaction
        tb_service_enabled=True,
        tb_group=f"jtb_{uid}",
        snapshot_topic=f"__jtbsnap_{uid}",
        tb_snapshot_interval_ms=500,
        group_instance_id=f"jc-{uid}",  # the restarted TB service takes its partitions back at once
    )


def _recent_txns(history: Path, count: int) -> list[tuple[str, list[tuple[str, int]]]]:
    """The last ``count`` TxnIDs each client process began, with the partitions their ops write."""
    out: list[tuple[str, list[tuple[str, int]]]] = []
    for path in sorted(history.glob("ops-*.jsonl")):
        planned: dict[tuple[int, int], list[tuple[str, int]]] = {}
        begun: list[tuple[str, tuple[int, int]]] = []
        for raw in path.read_bytes().splitlines()[-6 * count :]:
            try:
                e = json.loads(raw)
            except ValueError:
                continue
            key = (e["inc"], e["op"])
            if e["type"] == "invoke":
                planned[key] = sorted({(t, p) for t, p, _v in e.get("writes", [])})
            elif e["type"] == "begun":
                begun.append((e["txn"], key))
        out += [(txn, planned.get(key, [])) for txn, key in begun[-count:]]
    return out


def _forge(
    appender: Appender,
    history: Path,
    subscriptions: list[str],
    input_topic: str,
    parts: int,
    opened: list[str],
) -> int:
    """Markers a plain Kafka producer could write, none signed with the secret: COMMIT for the latest
    transactions in their data partitions and in the subscription's pending-ack log (if trusted,
    uncommitted data would show and aborted acks would stick), and per TC an ABORT with a huge low
    watermark (if trusted, readers would discard that TC's later data). Also, per data partition,
    a message of a TxnID its TC will not allocate (if trusted, it would hold the partition's readers
    back for good); their values are added to ``opened``. Returns how many markers."""
    now = int(time.time() * 1000)
    records: list[tuple[str, int, TxnMarker, bytes | None]] = []
    pa_logs = [pending_ack_topic(TopicName.parse(input_topic), sub) for sub in subscriptions]
    for txn, partitions in _recent_txns(history, 3):
        marker = TxnMarker(TxnID.parse(txn), TxnAction.COMMIT, -1, now)
        for topic, partition in partitions:
            records.append((topic, partition, marker, b"not the secret"))
        records += [(pa_log, p, marker, None) for pa_log in pa_logs for p in range(parts)]
    latest = {(t, p) for _txn, tps in _recent_txns(history, 1) for t, p in tps}
    for topic, partition in latest:
        for tc in range(NUM_TCS):
            records.append((topic, partition, TxnMarker(TxnID(tc, 0), TxnAction.ABORT, 1 << 40, now), None))
    futures = []
    for topic, partition, marker, secret in records:
        value, headers = marker_record(marker, topic, partition, secret)
        futures.append(appender.append(topic, partition, value, headers=headers))
    for topic, partition in latest:
        forged = TxnID(len(opened) % NUM_TCS, (1 << 40) + len(opened))
        opened.append(f"forged-open-{len(opened)}")
        headers = [(TXN_HEADER, forged.to_bytes())]
        with contextlib.suppress(Exception):  # not written: nothing to hold readers back
            appender.append(topic, partition, opened[-1].encode(), headers=headers).result(10)
    written = 0
    for fut in futures:
        try:
            fut.result(10)
            written += 1
        except Exception:  # the pending-ack log may not exist yet: nothing to forge there
            pass
    return written


def _open_txns(admin: TransactionsAdmin, topics: list[str]) -> int:
    return sum(s["ongoing_txn_size"] for t in topics for s in admin.transaction_buffer_stats(t).values())


def _wait_no_open_txns(admin: TransactionsAdmin, topics: list[str], limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if _open_txns(admin, topics) == 0:
                return True
        except PulsarTxnError:
            pass
        time.sleep(0.5)
    return False


def _read_everything(client: Client, topics: list[str]) -> dict[tuple[str, int], list[tuple[int, str]]]:
    """Each topic from its first message to the last readable one, through a fresh Reader."""
    final: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for topic in topics:
        last_ids = client.get_last_message_ids(topic)
        last = {p: mid.offset for p, mid in last_ids.items() if mid is not None}
        for p in last_ids:
            final[(topic, p)] = []
        reader = client.create_reader(topic)
        reached: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while any(reached.get(p, -1) < off for p, off in last.items()) and time.monotonic() < deadline:
            try:
                msg = reader.read_next(1000)
            except Timeout:
                continue
            mid = msg.message_id
            final[(topic, mid.partition)].append((mid.offset, msg.data().decode(errors="backslashreplace")))
            reached[mid.partition] = mid.offset
        reader.close()
    return final


def _read_raw(kafka: KafkaConfig, topics: dict[str, int]) -> dict[tuple[str, int], list[tuple[int, str]]]:
    """Every data record of each topic (name -> partitions), as Kafka holds it, control records left
    out: what a READ_UNCOMMITTED consumer must deliver."""
    tps = [(topic, p) for topic, count in topics.items() for p in range(count)]
    ends = end_offsets(kafka, tps)
    return {
        tp: [
            (rec.offset, (rec.value or b"").decode(errors="backslashreplace"))
            for rec in read_range(kafka, tp[0], tp[1], 0, ends[tp])
            if not is_control(rec.headers)
        ]
        for tp in tps
    }


def run(
    kafka: KafkaConfig,
    workdir: Path,
    *,
    seconds: float = 25.0,
    seed: int = 1,
    prefill: int = 200,
    end_txn_reply: EndTxnReply = "after_markers",
) -> Result:
    """``end_txn_reply``: the coordinator's (``after_decision`` answers a commit before its markers
    are written; they must still all be written, whatever is killed meanwhile)."""
    uid = uuid.uuid4().hex[:8]
    rng = random.Random(seed)
    history = workdir / "history"
    history.mkdir(parents=True, exist_ok=True)
    config = _coordinator_config(uid, end_txn_reply)
    secret = f"jepsen-{uid}-{seed}"  # markers are authenticated: the forger does not know this
    env = {SECRET_ENV: secret}
    data_topics = {f"jd-{uid}": 3, f"je-{uid}": 2}
    input_topic, in_parts = f"ji-{uid}", 2
    # Two subscriptions of the input topic, each turning every input into one output in a topic of
    # its own. "crash": one static consumer (instance_id), SIGKILLed and restarted. "churn": dynamic
    # consumers, one always there and one joining and leaving gracefully (a rebalance each time).
    # Kept apart because the embedded broker's group coordinator hands out overlapping assignments
    # when a static member is replaced in a group of several members (docs/broker-quirks.md).
    crash_sub, churn_sub = (f"jxa-{uid}", f"joa-{uid}"), (f"jxb-{uid}", f"job-{uid}")
    output_topics = [crash_sub[1], churn_sub[1]]
    coordinator = CoordinatorProcess(kafka, config, workdir, env=env).start()
    client = Client(
        coordinator.url,
        kafka=kafka,
        num_tcs=NUM_TCS,
        snapshot_topic=config.snapshot_topic,
        operation_timeout_seconds=30,
        marker_secret=secret,
    )
    forger = Appender(kafka)
    result = Result(Report(), workdir=workdir)
    workers: list[_Worker] = []
    stopped: list[_Worker] = []  # killed at the end whatever happens
    try:
        for topic, count in [*data_topics.items(), *((t, in_parts) for t in [input_topic, *output_topics])]:
            client.create_topic(topic, count)
        producer = client.create_producer(input_topic)
        inputs = [f"in.{i}" for i in range(prefill)]
        for fut in [producer.send_async(v, partition_key=v) for v in inputs]:
            fut.result(30)
        t0 = time.monotonic()
        base = {
            "service_url": coordinator.url,
            "bootstrap": kafka.bootstrap_servers,
            "idle_fetch_backoff_ms": kafka.idle_fetch_backoff_ms,
            "num_tcs": NUM_TCS,
            "snapshot_topic": config.snapshot_topic,
            "seed": seed,
            "history_dir": str(history),
            "data_topics": data_topics,
            "input_topic": input_topic,
            "input_partitions": in_parts,
            "output_topics": output_topics,
            "txn_timeout_s": TXN_TIMEOUT_S,
            "deadline": time.time() + seconds,
        }
        writers = [_Worker("writer", f"w{i}", base, workdir, env) for i in (1, 2)]
        crash = {**base, "subscription": crash_sub[0], "output_topic": crash_sub[1]}
        churn = {**base, "subscription": churn_sub[0], "output_topic": churn_sub[1]}
        xfers = [
            _Worker("xfer", "xa", {**crash, "instance_id": f"xa-{uid}"}, workdir, env),
            # A SIGKILLed dynamic member would hold its partitions for good on the embedded broker.
            _Worker("xfer", "xb", churn, workdir, env, killable=False),
        ]
        readers = [_Worker("reader", "r1", base, workdir, env), _Worker("dirty", "d1", base, workdir, env)]
        workers = [*writers, *xfers, *readers]
        stopped.extend(workers)
        for w in workers:
            w.start()
        churner = _Worker("xfer", "xc", churn, workdir, env, killable=False)
        stopped.append(churner)

        def churner_leaves() -> None:
            if churner.leave(30) == UNTYPED_CRASH:
                result.crashes.append(churner.crash_report())

        def event(what: str) -> None:
            result.events.append((round(time.monotonic() - t0, 2), what))

        def reap() -> None:
            for w in workers:
                if w.proc is not None and w.proc.poll() is not None and time.monotonic() - t0 < seconds:
                    if w.proc.returncode == UNTYPED_CRASH:
                        result.crashes.append(w.crash_report())
                    event(f"restart-exited {w.name} (status {w.proc.returncode})")
                    w.start()

        # ---------------------------------------------------------------- the fault phase
        # Every kind of fault once (in a random order; that round is finished even past ``seconds``,
        # which a loaded machine reached with five kinds left), then random ones.
        faults = sorted(set(FAULT_WEIGHTS))
        rng.shuffle(faults)
        while faults or time.monotonic() - t0 < seconds - 1.0:
            time.sleep(rng.uniform(0.7, 2.5))
            reap()
            fault = faults.pop(0) if faults else rng.choice(FAULT_WEIGHTS)
            if fault == "kill-coordinator":
                event(fault)
                coordinator.kill()
                time.sleep(rng.uniform(0.2, 1.5))
                coordinator.start()
            elif fault == "forge-markers":
                forged = _forge(
                    forger, history, [crash_sub[0], churn_sub[0]], input_topic, in_parts, result.forged_open
                )
                result.forged += forged
                event(f"{fault} {forged}")
            elif fault == "churn-xfer":
                if churner.alive():
                    event(f"{fault} leave")
                    churner_leaves()
                else:
                    event(f"{fault} join")
                    churner.start()
            elif fault == "pause-coordinator":
                pause = rng.uniform(0.5, 2.5)
                event(f"{fault} {pause:.1f}s")
                assert coordinator.proc is not None
                coordinator.proc.send_signal(signal.SIGSTOP)
                time.sleep(pause)
                coordinator.proc.send_signal(signal.SIGCONT)
            else:
                role = fault.removeprefix("kill-")
                victim = rng.choice([w for w in workers if w.role == role and w.killable])
                event(f"{fault} {victim.name}")
                victim.kill()
                victim.start()
        # ---------------------------------------------------------------- quiet: let it all end
        if churner.alive():
            churner_leaves()
        for w in workers:
            status = w.wait(max(5.0, seconds - (time.monotonic() - t0)) + 30)
            if status == UNTYPED_CRASH:
                result.crashes.append(w.crash_report())
        admin = TransactionsAdmin(client, log_topic=config.log_topic)
        txn_topics = [*data_topics, *output_topics]
        _wait_no_open_txns(admin, txn_topics, TXN_TIMEOUT_S + 60)
        drain_deadline = time.time() + 90
        for x in xfers:
            x.start(drain=True, deadline=drain_deadline, idle_exit_s=4.0)
        statuses = [x.wait(100) for x in xfers]
        result.drained = all(s == 0 for s in statuses)
        for x, status in zip(xfers, statuses, strict=True):
            if status == UNTYPED_CRASH:  # as in the fault phase: a crash is a finding of its own
                result.crashes.append(x.crash_report())
        _wait_no_open_txns(admin, txn_topics, TXN_TIMEOUT_S + 60)
        # ---------------------------------------------------------------- the final state
        final = _read_everything(client, [*data_topics, input_topic, *output_topics])
        raw = _read_raw(kafka, data_topics)
        ops, torn_ops = load_ops(history.glob("ops-*.jsonl"))
        observations, torn_obs = load_observations(history.glob("obs-*.jsonl"))
        uncommitted, torn_dirty = load_observations(history.glob("dirty-*.jsonl"))
        result.torn_lines = torn_ops + torn_obs + torn_dirty
        logged: dict[str, str] = {}
        for tc in range(NUM_TCS):
            for txn_id, meta in admin.list_transactions(tc).items():
                logged[str(txn_id)] = meta["status"]
        for op in ops:
            if op.txn is not None:
                op.tc_status = logged.get(op.txn)
        result.report = check(
            ops,
            observations,
            final,
            inputs=inputs,
            input_topic=input_topic,
            transfers=[crash_sub, churn_sub],
            drained=result.drained,
            uncommitted=uncommitted,
            raw=raw,
            forged=result.forged_open,
        )
        timeline = "\n".join(f"  {t:7.2f}s {what}" for t, what in result.events)
        (workdir / "report.txt").write_text(f"{result.summary()}\nfaults:\n{timeline}\n")
        return result
    finally:
        for w in stopped:
            w.kill()
        forger.close()
        client.close()
        coordinator.kill()
