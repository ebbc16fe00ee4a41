"""Exactly-once pipeline: ours (consume, produce and ack in one of our transactions per batch) side by
side with the same pipeline on Kafka's own transactions (confluent-kafka: transactional producer +
``send_offsets_to_transaction`` + read_committed consumer), same broker, same run.

Two phases per pipeline:
- throughput: a backlog of N x 1 KB input messages (3 partitions), batches of 100 per transaction;
  input messages/s from the first committed batch to the last;
- latency: input published live at a fixed rate while the pipeline runs; end-to-end latency from the
  input's publish time to the output message becoming visible to a read-committed reader.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer

from bench._common import (
    CoordinatorProcess,
    Probes,
    fmt,
    fmt_ratio,
    fmt_rounds,
    format_table,
    paired_ratios,
    percentile,
    run_rounds,
    run_suite,
    scratch_topics,
    step,
    wait_until_quiet,
)
from kafka_store import KafkaConfig, poll_ready
from pulsar_txn._gc import SERVICE_THRESHOLDS, tune_for_service
from pulsar_txn.client import Client
from pulsar_txn.errors import Timeout
from pulsar_txn.message import Message
from pulsar_txn.pipeline import ExactlyOncePipeline, PipelineProgress, PipelineSettings

PARTITIONS = 3
BATCH = 100
PAYLOAD = os.urandom(1024)
INDEX_BYTES = 8  # each input's payload starts with its index: the output is checked input by input
WARMUP_S = 2.0  # live phase: inputs of the first seconds are published and read, not sampled
BUSY_PCT = 20.0
TPUT_ROUNDS = 3  # rotated order: each pipeline runs first once


@dataclass(frozen=True)
class Sizes:
    backlog: int
    live_rate: int  # input messages/s during the latency phase
    live_s: float


DEFAULT = Sizes(backlog=30_000, live_rate=1_000, live_s=15.0)
QUICK = Sizes(backlog=6_000, live_rate=500, live_s=5.0)


def transform(msg: Message[bytes]) -> bytes:
    return bytes(msg.data)  # identical work on both sides: the payload is copied through


def _payload(index: int) -> bytes:
    """1 KB: the input's index, then random bytes (the same for every input)."""
    return index.to_bytes(INDEX_BYTES, "big") + PAYLOAD[INDEX_BYTES:]


def _index(value: bytes | None) -> int:
    return int.from_bytes((value or b"")[:INDEX_BYTES], "big")


class _Samples:
    """End-to-end latencies of the live phase, by input index: the first ``warm`` inputs (published
    during the warm-up: connections, output producers and the first transactions of each side) are
    read but not sampled, and a duplicate is counted, not sampled twice."""

    def __init__(self, warm: int, total: int) -> None:
        self.warm, self.total = warm, total
        self.by_index: dict[int, float] = {}
        self.duplicates = 0
        self._lock = threading.Lock()

    def add(self, index: int, latency_ms: float) -> None:
        with self._lock:
            if index in self.by_index:
                self.duplicates += 1
            else:
                self.by_index[index] = latency_ms

    def done(self) -> bool:
        return len(self.by_index) >= self.warm + self.total

    def summary(self) -> dict[str, Any]:
        timed = [v for i, v in self.by_index.items() if self.warm <= i < self.warm + self.total]
        return {
            "p50_ms": percentile(timed, 50),  # percentile() takes 0..100 (0.50 gave the ~minimum)
            "p99_ms": percentile(timed, 99),
            "received": len(timed),
            "expected": self.total,
            "warmup_inputs": self.warm,
            "duplicates": self.duplicates,
            "unknown": sum(1 for i in self.by_index if not 0 <= i < self.warm + self.total),
        }


# ---------------------------------------------------------------------------------------------- ours
def _ours_throughput(client: Client, topic: str, n: int) -> dict[str, Any]:
    uid = uuid.uuid4().hex[:6]
    out = f"ours_out_{uid}"
    client.create_topic(out, PARTITIONS)
    marks: list[tuple[float, int]] = []
    stop = threading.Event()

    def on_progress(p: PipelineProgress) -> None:
        # When the batch's commit finished, not when the pipeline loop noticed it (up to a receive
        # timeout later); Kafka's marks are taken right after commit_transaction returns.
        marks.append((p.last_commit_at or time.time(), p.processed))
        if p.processed >= n:
            stop.set()

    settings = PipelineSettings(
        topic, out, subscription=f"ours_{uid}", instance_id=f"ours-{uid}", batch_size=BATCH
    )
    pipeline = ExactlyOncePipeline(client, settings, transform, on_progress)
    worker = threading.Thread(target=pipeline.run, args=(stop,), daemon=True)
    worker.start()
    worker.join(600)
    stop.set()
    pipeline.close()
    return _rate(marks, n) | {
        "transactions": len(marks),
        "failed": pipeline.progress.failed_batches,
        "out": out,
    }


def _ours_latency(client: Client, sizes: Sizes) -> dict[str, Any]:
    uid = uuid.uuid4().hex[:6]
    src, out = f"ours_live_in_{uid}", f"ours_live_out_{uid}"
    client.create_topic(src, PARTITIONS)
    client.create_topic(out, PARTITIONS)
    stop = threading.Event()
    settings = PipelineSettings(src, out, subscription=f"ol_{uid}", instance_id=f"ol-{uid}", batch_size=BATCH)
    pipeline = ExactlyOncePipeline(client, settings, transform)
    worker = threading.Thread(target=pipeline.run, args=(stop,), daemon=True)
    worker.start()
    samples = _live_samples(sizes)
    reader = client.create_reader(out)

    def read() -> None:
        deadline = time.monotonic() + WARMUP_S + sizes.live_s + 60
        while not samples.done() and time.monotonic() < deadline:
            try:
                msg = reader.read_next(1000)
            except Timeout:
                continue
            samples.add(_index(msg.data), time.time() * 1000 - float(msg.event_timestamp or 0))

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    time.sleep(2.0)  # the pipeline has subscribed
    producer = client.create_producer(src)
    _paced(
        samples.warm + samples.total,
        sizes.live_rate,
        lambda i: producer.send_async(_payload(i), event_timestamp=int(time.time() * 1000)),
    )
    producer.flush()
    reading.join(sizes.live_s + 90)
    stop.set()
    worker.join(60)
    pipeline.close()
    reader.close()
    return samples.summary()


# ---------------------------------------------------------------------------------------------- Kafka
def _kafka_pipeline(
    bootstrap: str, src: str, out: str, stop: threading.Event, marks: list[tuple[float, int]]
) -> dict[str, Any]:
    uid = uuid.uuid4().hex[:6]
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kafka_{uid}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = KafkaProducer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uid}", "linger.ms": 0}
    )
    producer.init_transactions(30)
    consumer.subscribe([src])
    processed = aborted = 0
    try:
        while not stop.is_set():
            msgs = [m for m in consumer.consume(BATCH, 0.05) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                value = bytes(m.value() or b"")  # the same copy as transform() on our side
                producer.produce(out, value=value, partition=m.partition(), timestamp=m.timestamp()[1])
            positions: dict[int, int] = {}
            for m in msgs:
                positions[m.partition()] = int(m.offset() or 0) + 1
            try:
                producer.send_offsets_to_transaction(
                    [TopicPartition(src, p, o) for p, o in positions.items()],
                    consumer.consumer_group_metadata(),
                    30,
                )
                producer.commit_transaction(30)
            except KafkaException:
                producer.abort_transaction(30)
                aborted += 1
                # Its input must be processed again: back to the group's committed offsets.
                for tp in consumer.committed(consumer.assignment(), 30):
                    consumer.seek(TopicPartition(src, tp.partition, max(tp.offset, 0)))
                continue
            processed += len(msgs)
            marks.append((time.time(), processed))
    finally:
        consumer.close()
    return {"aborted": aborted}


def _kafka_throughput(bootstrap: str, topic: str, n: int, admin_client: Client) -> dict[str, Any]:
    out = f"kafka_out_{uuid.uuid4().hex[:6]}"
    admin_client.create_topic(out, PARTITIONS)
    marks: list[tuple[float, int]] = []
    stop = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result.update(_kafka_pipeline(bootstrap, topic, out, stop, marks))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 600
    while (not marks or marks[-1][1] < n) and time.monotonic() < deadline and worker.is_alive():
        time.sleep(0.02)
    stop.set()
    worker.join(60)
    return _rate(marks, n) | {"transactions": len(marks), "failed": result.get("aborted", 0), "out": out}


def _kafka_latency(bootstrap: str, client: Client, sizes: Sizes) -> dict[str, Any]:
    uid = uuid.uuid4().hex[:6]
    src, out = f"kafka_live_in_{uid}", f"kafka_live_out_{uid}"
    client.create_topic(src, PARTITIONS)
    client.create_topic(out, PARTITIONS)
    stop = threading.Event()
    worker = threading.Thread(target=_kafka_pipeline, args=(bootstrap, src, out, stop, []), daemon=True)
    worker.start()
    samples = _live_samples(sizes)
    # Like our Reader: every partition assigned from its start (no group join to wait for), and each
    # record taken as soon as it is there (consume(500, 0.2) held every batch for up to 0.2 s).
    reader = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kafka_reader_{uid}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    reader.assign([TopicPartition(out, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

    def read() -> None:
        deadline = time.monotonic() + WARMUP_S + sizes.live_s + 60
        while not samples.done() and time.monotonic() < deadline:
            for m in poll_ready(reader, 500, 0.2):
                if m.error() is None:
                    samples.add(_index(m.value()), time.time() * 1000 - m.timestamp()[1])

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    time.sleep(2.0)
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})

    def send(i: int) -> None:
        producer.produce(src, value=_payload(i), partition=i % PARTITIONS, timestamp=int(time.time() * 1000))
        producer.poll(0)

    _paced(samples.warm + samples.total, sizes.live_rate, send)
    producer.flush(30)
    reading.join(sizes.live_s + 90)
    stop.set()
    worker.join(60)
    reader.close()
    return samples.summary()


# ---------------------------------------------------------------------------------------------- shared
def _paced(total: int, rate: int, send: Any) -> None:
    started = time.perf_counter()
    for i in range(total):
        due = started + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(i)


def _rate(marks: list[tuple[float, int]], n: int) -> dict[str, Any]:
    if len(marks) < 2:
        return {"rate": 0.0, "processed": marks[-1][1] if marks else 0, "complete": False}
    (t0, p0), (t1, p1) = marks[0], marks[-1]
    return {"rate": (p1 - p0) / max(1e-9, t1 - t0), "processed": p1, "complete": p1 >= n, "seconds": t1 - t0}


def _read_output(bootstrap: str, client: Client, topic: str, ours: bool, n: int) -> dict[str, Any]:
    """The committed output of ``topic`` input by input: through our Reader (ours), or a
    read_committed consumer (Kafka's transactions); read until 3 s pass without a new message.
    ``exact``: each of the ``n`` inputs is there once (a loss and a duplicate would not cancel out)."""
    indices: list[int] = []
    if ours:
        reader = client.create_reader(topic)
        try:
            while True:
                try:
                    indices.append(_index(reader.read_next(3000).data))
                except Timeout:
                    break
        finally:
            reader.close()
    else:
        consumer = KafkaConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench_count_{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            while batch := poll_ready(consumer, 10_000, 3.0):
                indices.extend(_index(m.value()) for m in batch if m.error() is None)
        finally:
            consumer.close()
    distinct = set(indices)
    return {
        "output": len(indices),
        "output_distinct": len(distinct),
        "output_exact": len(indices) == n and distinct == set(range(n)),
    }


def _live_samples(sizes: Sizes) -> _Samples:
    return _Samples(int(sizes.live_rate * WARMUP_S), int(sizes.live_rate * sizes.live_s))


def _fill(client: Client, topic: str, n: int) -> None:
    client.create_topic(topic, PARTITIONS)
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send_async(_payload(i), partition_key=str(i))
    producer.flush()


def _measure(quick: bool, bootstrap: str, workdir: Path) -> dict[str, Any]:
    sizes = QUICK if quick else DEFAULT
    raw: dict[str, Any] = {"quick": quick, "sizes": sizes.__dict__, "batch": BATCH}
    # Both pipelines run in this process: give it the GC settings `pulsar-txn pipeline` runs with.
    tune_for_service()
    raw["gc_thresholds"] = SERVICE_THRESHOLDS
    busy, waited = wait_until_quiet(BUSY_PCT, 60.0, sample_s=2.0)
    raw["machine"] = {"cpus": os.cpu_count(), "busy_before_pct": busy, "waited_for_quiet_s": waited}
    kafka = KafkaConfig(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    # Two coordinators: Pulsar's END_TXN reply (after the markers, the default) and Kafka's (after the
    # durable decision: `end_txn_reply: after_decision`), the like-for-like peer of Kafka's EndTxn.
    with (
        CoordinatorProcess(bootstrap, workdir) as coord,
        CoordinatorProcess(bootstrap, workdir, end_txn_reply="after_decision") as coord_d,
    ):
        assert coord.proc is not None and coord_d.proc is not None
        probes = Probes(workdir, coord.proc.pid)
        probes.pids["coordinator_d"] = coord_d.proc.pid
        client = Client(coord.url, kafka=kafka, num_tcs=coord.num_tcs)
        client_d = Client(coord_d.url, kafka=kafka, num_tcs=coord_d.num_tcs)
        try:
            runs: dict[str, Any] = {}
            # Throughput rounds run the three pipelines back to back, the order rotated each round
            # (the machine's speed drifts); each round's ratio to Kafka's run counts (paired_ratios).
            # Every run reads a backlog of its own and its topics are deleted after it, so each run
            # finds the same broker store (the embedded broker's cost grows with what it stores:
            # bench/_common.scratch_topics). Then one latency run each.
            tput: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
                "kafka_tput": (
                    "Kafka transactions: backlog",
                    lambda src: _kafka_throughput(bootstrap, src, sizes.backlog, client),
                ),
                "ours_tput": ("ours: backlog", lambda src: _ours_throughput(client, src, sizes.backlog)),
                "ours_dec_tput": (
                    "ours (reply after decision): backlog",
                    lambda src: _ours_throughput(client_d, src, sizes.backlog),
                ),
            }

            def throughput(i: int, key: str) -> dict[str, Any]:
                label, fn = tput[key]
                with scratch_topics(bootstrap):
                    src = f"pipeline_input_{uuid.uuid4().hex[:6]}"
                    step(
                        f"write {sizes.backlog:,} x 1 KB input messages",
                        lambda: _fill(client, src, sizes.backlog),
                    )
                    wait_until_quiet(BUSY_PCT, 15.0, sample_s=1.0)
                    value, cpu = probes.measure(lambda: step(f"{label} (round {i + 1})", lambda: fn(src)))
                    # Outside the clock: the output holds each input once (committed reads only).
                    value |= step(
                        "check the committed output",
                        lambda: _read_output(
                            bootstrap, client, value["out"], key != "kafka_tput", sizes.backlog
                        ),
                    )
                runs[f"{key}#{i + 1}"] = value | {"cpu": cpu}
                return runs[f"{key}#{i + 1}"]

            raw["rounds"] = run_rounds(list(tput), TPUT_ROUNDS, throughput)
            latency: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
                (
                    "kafka_lat",
                    f"Kafka transactions: live {sizes.live_rate}/s",
                    lambda: _kafka_latency(bootstrap, client, sizes),
                ),
                ("ours_lat", f"ours: live {sizes.live_rate}/s", lambda: _ours_latency(client, sizes)),
                (
                    "ours_dec_lat",
                    f"ours (reply after decision): live {sizes.live_rate}/s",
                    lambda: _ours_latency(client_d, sizes),
                ),
            ]
            for key, label, fn in latency:
                with scratch_topics(bootstrap):
                    value, cpu = probes.measure(lambda fn=fn, label=label: step(label, fn))
                    runs[key] = value | {"cpu": cpu}
            raw["runs"] = runs
        finally:
            client_d.close()
            client.close()
    return raw


def _rows(raw: dict[str, Any]) -> list[list[str]]:
    r, rounds = raw["runs"], raw["rounds"]
    backlog = raw["sizes"]["backlog"]

    def valid(run: dict[str, Any]) -> bool:
        return bool(run.get("complete")) and run.get("output") == backlog and bool(run.get("output_exact"))

    invalid = [k for k, v in r.items() if k.split("#")[0].endswith("_tput") and not valid(v)]

    def tput_row(label: str, key: str) -> list[str]:
        ratio = paired_ratios(rounds, key, "kafka_tput", "rate")
        if invalid:
            verdict = f"INVALID (incomplete or wrong output: {', '.join(invalid)})"
        else:
            verdict = f"{'yes' if ratio['median'] >= 1 else 'NO'} ({fmt_ratio(ratio)})"
        return [
            label,
            fmt_rounds(rounds, key, "rate") + " /s",
            f"Kafka txns {fmt_rounds(rounds, 'kafka_tput', 'rate')} /s",
            ">= Kafka's own",
            verdict,
        ]

    def lat_problems(run: dict[str, Any]) -> str:
        """Why a live run's percentiles do not stand (the missing samples would be the slowest)."""
        problems = []
        if run["received"] != run["expected"]:
            problems.append(f"{run['received']} of {run['expected']} samples")
        if run.get("duplicates"):
            problems.append(f"{run['duplicates']} duplicates")
        if run.get("unknown"):
            problems.append(f"{run['unknown']} unknown outputs")
        return ", ".join(problems)

    def lat_rows(key: str, label: str) -> list[list[str]]:
        bad = "; ".join(f"{k}: {p}" for k in (key, "kafka_lat") if (p := lat_problems(r[k])))
        return [
            [
                f"{label} p{p}",
                fmt(r[key][f"p{p}_ms"], " ms"),
                f"Kafka txns {fmt(r['kafka_lat'][f'p{p}_ms'], ' ms')}",
                "report",
                f"INVALID ({bad})" if bad else "-",
            ]
            for p in (50, 99)
        ]

    return [
        tput_row(f"throughput, input msg/s (1 KB, {BATCH}/txn), per round", "ours_tput"),
        tput_row("  same, END_TXN answered after the decision", "ours_dec_tput"),
        *lat_rows("ours_lat", "end-to-end latency"),
        *lat_rows("ours_dec_lat", "  same, after the decision: latency"),
    ]


def run(quick: bool) -> int:
    raw, path = run_suite("pipeline", quick, _measure, _rows)
    r = raw["runs"]
    print("\nruns:")
    print(
        format_table(
            [
                "run",
                "processed/received",
                "output",
                "transactions",
                "failed",
                "machine CPU",
                "broker CPU",
                "coordinator CPU",
                "coord. (after decision) CPU",
            ],
            [
                [
                    k,
                    str(v.get("processed", v.get("received"))),
                    str(v.get("output", "-")),
                    str(v.get("transactions", "-")),
                    str(v.get("failed", "-")),
                    fmt(v["cpu"].get("machine_pct", 0.0), "%", 0),
                    fmt(v["cpu"].get("broker0_pct", 0.0), "%", 0),
                    fmt(v["cpu"].get("coordinator_pct", 0.0), "%", 0),
                    fmt(v["cpu"].get("coordinator_d_pct", 0.0), "%", 0),
                ]
                for k, v in r.items()
            ],
        )
    )
    print(f"\nraw numbers: {path}  (total {raw['total_runtime_s']:.0f}s)")
    return 0
