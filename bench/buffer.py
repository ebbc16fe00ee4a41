"""``python -m bench buffer``: transaction-buffer produce, read-committed read, recovery and memory.

One fresh embedded broker for everything (every process stopped at the end):
  1. produce throughput, 1 KB messages: our Producer without a transaction (the baseline), our
     transactions of 1/10/100/1000 messages (sequential, one client; also 4 threads), Kafka's own
     transactional producer with the same batch sizes, and a plain idempotent Kafka producer;
  2. read-committed read of one partition (plain records, committed and aborted transactions):
     ``CommittedReader`` vs a plain confluent Consumer, alternating, best of two each;
  3. TB recovery of a 1M-record partition (300k with ``--quick``): full scan, snapshot, ~1000 more
     records, then ``load_state`` from the snapshot (fresh ``SnapshotStore`` each time); then snapshot
     writes of a 200k-aborted and of a 300k-ended state (50k each with ``--quick``): only changed
     segments vs all of them;
  4. peak RSS of a fresh process reading that partition: ``CommittedReader`` vs a plain Consumer.
"""

from __future__ import annotations

import functools
import math
import multiprocessing as mp
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import KafkaException, Producer

from bench._common import (
    CoordinatorProcess,
    Probes,
    ensure_topic,
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
from bench._txndata import (
    FETCH_EXTRA,
    NUM_TCS,
    ReadResult,
    SyntheticWriter,
    Written,
    committed_read,
    plain_read,
    rss_worker,
)
from kafka_store import KafkaConfig, TopicAdmin, end_offsets
from pulsar_txn.buffer.reader import BufferOptions, load_state
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.client import Client
from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.message import MessageId
from pulsar_txn.producer import Producer as OurProducer
from pulsar_txn.transaction import Transaction
from pulsar_txn.txnid import TxnID

T = TypeVar("T")

PAYLOAD = os.urandom(1024)
TXN_SIZES = (1, 10, 100, 1000)
THREADED = ((4, 1), (4, 100))  # (threads, messages per transaction)
TARGET_SIZE = 100
OVERLAP_WINDOW = 8  # commits in flight at most in the overlapped variant (one thread)
BEGUN_AHEAD = 4  # transactions begun (NEW_TXN sent) ahead of use in that variant
BUSY_PCT = 20.0
OTHERS_FLAG_PCT = 30.0
SNAPSHOT_TOPIC = "__bench_tb_snapshot"
READ_TOPIC = "bench_read"
RECOVERY_TOPIC = "bench_recovery"
TAIL_RECORDS = 1000
LOADS = 3
SNAPSHOT_WRITES = 4  # per kind, alternating
SNAPSHOT_NEW_ENTRIES = 100
# Alternating; each (plain, ours) pair back to back gives one ratio, the median of those decides.
READ_ORDER = ("plain", "ours", "ours", "plain") * 3
PAIRED = ("ours_plain", f"ours_txn_{TARGET_SIZE}_overlap", f"kafka_txn_{TARGET_SIZE}")


@dataclass(frozen=True)
class Sizes:
    produce_msgs: int  # per point (bounded also by produce_max_s)
    produce_max_s: float
    read_records: int
    recovery_records: int
    read_runs: int  # per reader
    pair_rounds: int  # rounds of the #3 target's three points back to back (plain, overlapped, Kafka)
    pair_msgs: int  # messages per point in those rounds
    snapshot_aborted: int  # aborted txns in the snapshot-write point's state
    snapshot_ended: int  # ended txns in the other snapshot-write point's state


DEFAULT = Sizes(
    produce_msgs=30_000,
    produce_max_s=5.0,
    read_records=200_000,
    recovery_records=1_000_000,
    read_runs=5,
    pair_rounds=5,
    pair_msgs=60_000,
    snapshot_aborted=200_000,
    snapshot_ended=300_000,
)
QUICK = Sizes(
    produce_msgs=10_000,
    produce_max_s=2.0,
    read_records=100_000,
    recovery_records=300_000,
    read_runs=2,
    pair_rounds=3,
    pair_msgs=20_000,
    snapshot_aborted=50_000,
    snapshot_ended=50_000,
)


@dataclass
class ProducePoint:
    label: str
    messages: int = 0
    txns: int = 0
    seconds: float = 0.0
    txn_ms: list[float] = field(default_factory=list)
    errors: int = 0
    cpu: dict[str, float] = field(default_factory=dict)

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "msgs_per_s": self.per_s,
            "txn_per_s": self.txns / self.seconds if self.seconds else 0.0,
            "messages": self.messages,
            "txns": self.txns,
            "seconds": self.seconds,
            "txn_ms": {
                "p50": percentile(self.txn_ms, 50),
                "p99": percentile(self.txn_ms, 99),
                "max": percentile(self.txn_ms, 100),
            },
            "errors": self.errors,
            "cpu": self.cpu,
        }


# ---------------------------------------------------------------------------------------------- 1
def _ours_plain(client: Client, topic: str, sizes: Sizes) -> ProducePoint:
    """send_async ``produce_msgs`` messages without a transaction, then wait for all of them."""
    producer = client.create_producer(topic)
    for fut in [producer.send_async(PAYLOAD) for _ in range(1000)]:  # warm-up
        fut.result(30)
    point = ProducePoint("ours plain")
    t0 = time.perf_counter()
    deadline = t0 + sizes.produce_max_s
    futures: list[Future[MessageId]] = []
    while len(futures) < sizes.produce_msgs and (len(futures) % 1000 or time.perf_counter() < deadline):
        futures.append(producer.send_async(PAYLOAD))
    for fut in futures:
        try:
            fut.result(60)
            point.messages += 1
        except PulsarTxnError:
            point.errors += 1
    point.seconds = time.perf_counter() - t0
    return point


def _ours_txn(client: Client, topic: str, size: int, sizes: Sizes, threads: int = 1) -> ProducePoint:
    """Transactions of ``size`` messages (send_async all, then commit), ``threads`` at a time."""
    point = ProducePoint(f"ours txn x{size}" + (f", {threads} threads" if threads > 1 else ""))
    lock = threading.Lock()
    claimed = [0]
    ready = threading.Barrier(threads + 1, timeout=120)
    t0 = [0.0]

    def one_txn(producer: OurProducer) -> None:
        txn = client.transaction(60)
        for _ in range(size):
            producer.send_async(PAYLOAD, txn=txn)
        txn.commit()

    def worker() -> None:
        producer = client.create_producer(topic)
        for _ in range(max(1, 20 // size)):  # warm-up: connections, partition registration path
            one_txn(producer)
        ready.wait()
        ready.wait()  # the clock starts between the two barriers
        deadline = t0[0] + sizes.produce_max_s
        while True:
            with lock:
                if claimed[0] >= sizes.produce_msgs or time.perf_counter() >= deadline:
                    return
                claimed[0] += size
            started = time.perf_counter()
            try:
                one_txn(producer)
            except Exception:  # a failed or timed-out transaction is an error of the point, not a crash
                with lock:
                    point.errors += 1
                continue
            took = time.perf_counter() - started
            with lock:
                point.messages += size
                point.txns += 1
                point.txn_ms.append(took * 1000)

    workers = [threading.Thread(target=worker, name=f"bench-txn-{i}", daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    ready.wait()
    t0[0] = time.perf_counter()
    ready.wait()
    for w in workers:
        w.join(sizes.produce_max_s + 120)
    point.seconds = time.perf_counter() - t0[0]
    return point


def _kafka_producer(bootstrap: str, **extra: str | int | bool) -> Producer:
    """The settings of our Appender (idempotent, acks=all, linger.ms=0, batches of up to 10k)."""
    conf: dict[str, str | int | bool] = {
        "bootstrap.servers": bootstrap,
        "client.id": "pulsar-txn-bench",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,
        "batch.num.messages": 10_000,
        "compression.type": "none",
    }
    conf.update(extra)
    return Producer(conf)


def _produce(producer: Producer, topic: str) -> None:
    while True:
        try:
            producer.produce(topic, PAYLOAD, partition=0)
            return
        except BufferError:
            producer.poll(0.01)


def _ours_txn_overlapped(client: Client, topic: str, size: int, sizes: Sizes) -> ProducePoint:
    """One thread, transactions of ``size`` with Pulsar's asynchronous API: each transaction was begun
    a few transactions earlier (``build_async``), its sends go out, then ``commit_async``; at most
    ``OVERLAP_WINDOW`` commits are in flight. The clock stops when the last commit has returned."""
    point = ProducePoint(f"ours txn x{size}, overlapped")
    producer = client.create_producer(topic)

    def begin() -> Future[Transaction]:
        return client.new_transaction().with_transaction_timeout(60).build_async()

    for _ in range(max(1, 20 // size)):  # warm-up
        with client.transaction(60) as txn:
            for _ in range(size):
                producer.send_async(PAYLOAD, txn=txn)
    committing: deque[tuple[Future[None], float]] = deque()

    def finish() -> None:
        done, started = committing.popleft()
        try:
            done.result(60)
        except PulsarTxnError:
            point.errors += 1
            return
        point.messages += size
        point.txns += 1
        point.txn_ms.append((time.perf_counter() - started) * 1000)

    ahead = deque(begin() for _ in range(BEGUN_AHEAD))
    t0 = time.perf_counter()
    deadline = t0 + sizes.produce_max_s
    sent = 0
    while sent < sizes.produce_msgs and time.perf_counter() < deadline:
        started = time.perf_counter()
        txn = ahead.popleft().result(30)
        ahead.append(begin())
        for _ in range(size):
            producer.send_async(PAYLOAD, txn=txn)
        committing.append((txn.commit_async(), started))
        sent += size
        while len(committing) > OVERLAP_WINDOW:
            finish()
    while committing:
        finish()
    point.seconds = time.perf_counter() - t0
    for begun in ahead:
        begun.result(30).abort()
    return point


def _kafka_txn(producer: Producer, topic: str, size: int, sizes: Sizes) -> ProducePoint:
    """Kafka's transactional producer: begin -> produce ``size`` -> commit_transaction, sequentially."""
    point = ProducePoint(f"Kafka txn x{size}")

    def one_txn() -> None:
        producer.begin_transaction()
        for _ in range(size):
            _produce(producer, topic)
        producer.commit_transaction(30)

    for _ in range(max(1, 20 // size)):
        one_txn()
    t0 = time.perf_counter()
    deadline = t0 + sizes.produce_max_s
    while point.messages < sizes.produce_msgs and time.perf_counter() < deadline:
        started = time.perf_counter()
        try:
            one_txn()
        except KafkaException:
            point.errors += 1
            try:
                producer.abort_transaction(30)
            except KafkaException:
                pass
            continue
        point.txn_ms.append((time.perf_counter() - started) * 1000)
        point.messages += size
        point.txns += 1
    point.seconds = time.perf_counter() - t0
    return point


def _kafka_plain(bootstrap: str, topic: str, sizes: Sizes) -> ProducePoint:
    """A plain idempotent Kafka producer with our Appender's settings: produce all, then flush."""
    producer = _kafka_producer(bootstrap)
    for _ in range(1000):
        _produce(producer, topic)
    producer.flush(30)
    point = ProducePoint("Kafka plain")
    failed = [0]

    def delivered(err: Any, _msg: Any) -> None:
        failed[0] += err is not None

    t0 = time.perf_counter()
    for _ in range(sizes.produce_msgs):
        while True:
            try:
                producer.produce(topic, PAYLOAD, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    point.errors = producer.flush(60) + failed[0]  # still queued, or refused by the broker
    point.messages = sizes.produce_msgs - point.errors
    point.seconds = time.perf_counter() - t0
    return point


def _phase_produce(raw: dict[str, Any], sizes: Sizes, bootstrap: str, workdir: Path, probes: Probes) -> None:
    """Every point twice (sizes ascending, then descending), the better run counts: the machine is
    shared, and one disturbed window should not decide a target. Each run writes a topic of its own,
    deleted after it, so that every run finds the same store (``scratch_topics``)."""
    points: dict[str, dict[str, Any]] = {}

    def record(key: str, label: str, fn: Callable[[str], ProducePoint]) -> None:
        with scratch_topics(bootstrap):
            topic = f"bench_produce_{key}_{uuid.uuid4().hex[:6]}"
            ensure_topic(bootstrap, topic, 1)
            point, cpu = probes.measure(lambda: step(label, lambda: fn(topic)))
        point.cpu = cpu
        entry = points.setdefault(key, {"runs": []})
        entry["runs"].append(point.summary())
        entry["best"] = max(entry["runs"], key=lambda r: float(r["msgs_per_s"]))

    producer = _kafka_producer(bootstrap, **{"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    # The coordinator's own transaction-buffer service is off: it would scan every data partition of
    # this suite (1M records included) and compete for the 2 cores; we write snapshots ourselves.
    with CoordinatorProcess(bootstrap, workdir, tb_service_enabled=False) as coord:
        raw["coordinator_config"] = coord.coordinator
        assert coord.proc is not None
        probes.pids["coordinator"] = coord.proc.pid
        client = Client(coord.url, kafka=KafkaConfig(bootstrap_servers=bootstrap), num_tcs=coord.num_tcs)
        try:
            for pass_no, order in enumerate((TXN_SIZES, TXN_SIZES[::-1])):
                tag = f" (pass {pass_no + 1}/2)"
                if pass_no == 0:
                    record(
                        "ours_plain",
                        "ours: plain sends (no txn)" + tag,
                        functools.partial(_ours_plain, client, sizes=sizes),
                    )
                for size in order:
                    record(
                        f"ours_txn_{size}",
                        f"ours: txns of {size}" + tag,
                        functools.partial(_ours_txn, client, size=size, sizes=sizes),
                    )
                record(
                    f"ours_txn_{TARGET_SIZE}_overlap",
                    f"ours: txns of {TARGET_SIZE}, overlapped (commit_async)" + tag,
                    functools.partial(_ours_txn_overlapped, client, size=TARGET_SIZE, sizes=sizes),
                )
                if pass_no == 0:
                    for threads, size in THREADED:
                        record(
                            f"ours_txn_{size}_t{threads}",
                            f"ours: txns of {size}, {threads} threads",
                            functools.partial(_ours_txn, client, size=size, sizes=sizes, threads=threads),
                        )
                else:
                    record(
                        "ours_plain",
                        "ours: plain sends (no txn)" + tag,
                        functools.partial(_ours_plain, client, sizes=sizes),
                    )
            raw["target_rounds"] = _paired_rounds(client, producer, sizes, bootstrap, probes)
        finally:
            client.close()
            del probes.pids["coordinator"]
    for pass_no, order in enumerate((TXN_SIZES, TXN_SIZES[::-1])):
        for size in order:
            record(
                f"kafka_txn_{size}",
                f"Kafka transactional producer: txns of {size} (pass {pass_no + 1}/2)",
                functools.partial(_kafka_txn, producer, size=size, sizes=sizes),
            )
    producer.flush(10)
    for pass_no in range(2):
        record(
            "kafka_plain",
            f"Kafka idempotent producer (no txn) (pass {pass_no + 1}/2)",
            functools.partial(_kafka_plain, bootstrap, sizes=sizes),
        )
    raw["produce"] = points


def _paired_rounds(
    client: Client, producer: Producer, sizes: Sizes, bootstrap: str, probes: Probes
) -> list[dict[str, Any]]:
    """The #3 target's three points (our plain sends, our overlapped transactions of 100, Kafka's
    transactional producer with 100 per transaction) back to back, ``pair_rounds`` times, the order
    rotated each round; each round gives its own ratios (``paired_ratios``)."""
    bigger = Sizes(**{**sizes.__dict__, "produce_msgs": sizes.pair_msgs})
    points: dict[str, tuple[str, Callable[[str], ProducePoint]]] = {
        PAIRED[0]: ("ours: plain sends", functools.partial(_ours_plain, client, sizes=bigger)),
        PAIRED[1]: (
            f"ours: txns of {TARGET_SIZE}, overlapped",
            functools.partial(_ours_txn_overlapped, client, size=TARGET_SIZE, sizes=bigger),
        ),
        PAIRED[2]: (
            f"Kafka txns of {TARGET_SIZE}",
            functools.partial(_kafka_txn, producer, size=TARGET_SIZE, sizes=bigger),
        ),
    }

    def measure(i: int, key: str) -> dict[str, Any]:
        label, fn = points[key]
        title = f"paired round {i + 1}/{sizes.pair_rounds}: {label}"
        with scratch_topics(bootstrap):
            topic = f"bench_pair_{uuid.uuid4().hex[:6]}"
            ensure_topic(bootstrap, topic, 1)
            point, cpu = probes.measure(functools.partial(step, title, functools.partial(fn, topic)))
        point.cpu = cpu
        return point.summary()

    return run_rounds(PAIRED, sizes.pair_rounds, measure)


# ---------------------------------------------------------------------------------------------- 2
def _end_offset(kafka: KafkaConfig, topic: str) -> int:
    return end_offsets(kafka, [(topic, 0)])[(topic, 0)]


def _phase_read(
    raw: dict[str, Any], sizes: Sizes, bootstrap: str, kafka: KafkaConfig, probes: Probes
) -> None:
    ensure_topic(bootstrap, READ_TOPIC, 1)
    writer = SyntheticWriter(
        bootstrap, READ_TOPIC, value_size=1024, txn_size=100, txn_share=0.6, abort_every=5, interleave=4
    )

    def generate() -> Written:
        writer.write(sizes.read_records)
        writer.end_all()
        writer.flush()
        return writer.written

    written = step(f"write {sizes.read_records:,} x 1 KB records (raw producer)", generate)
    end = _end_offset(kafka, READ_TOPIC)
    runs: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    best: dict[str, ReadResult] = {}
    readers: dict[str, Callable[[], ReadResult]] = {
        "plain": lambda: plain_read(bootstrap, READ_TOPIC, end),
        "ours": lambda: committed_read(kafka, READ_TOPIC, end),
    }
    for kind in READ_ORDER[: sizes.read_runs * 2]:
        result, cpu = probes.measure(functools.partial(step, f"read {end:,} records: {kind}", readers[kind]))
        result.extra["cpu"] = cpu
        runs.append(result.as_dict())
        if len(runs) % 2 == 0:  # READ_ORDER pairs a plain and an ours run, back to back
            pairs.append({r["kind"]: r for r in runs[-2:] if r["complete"]})
        if result.complete and (kind not in best or result.seconds < best[kind].seconds):
            best[kind] = result
    raw["read"] = {
        "written": written.as_dict(),
        "end_offset": end,
        "runs": runs,
        "best": {k: v.as_dict() for k, v in best.items()},
        "pairs": pairs,
        "ours_delivered_ok": all(
            r["delivered"] == written.visible for r in runs if r["kind"] == "ours" and r["complete"]
        ),
        "plain_delivered_ok": all(
            r["delivered"] == end for r in runs if r["kind"] == "plain" and r["complete"]
        ),
    }
    # 200k x 1 KB is ~0.8 GB in the embedded broker's store file, rewritten on every later write.
    TopicAdmin(kafka).delete_topics([READ_TOPIC])


# ---------------------------------------------------------------------------------------------- 3
def _same_state(a: TxnBufferState, b: TxnBufferState) -> bool:
    return (
        a.scanned_to == b.scanned_to
        and a.ongoing == b.ongoing
        and a.aborted == b.aborted
        and a.ended == b.ended
        and a.lwm == b.lwm
        and a.discarded == b.discarded
        and a.max_read_position == b.max_read_position
    )


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def _phase_recovery(
    raw: dict[str, Any], sizes: Sizes, bootstrap: str, kafka: KafkaConfig, probes: Probes
) -> int:
    ensure_topic(bootstrap, RECOVERY_TOPIC, 1)
    opts = BufferOptions(num_tcs=NUM_TCS)
    writer = SyntheticWriter(
        bootstrap, RECOVERY_TOPIC, value_size=64, txn_size=5, txn_share=0.3, abort_every=3, interleave=8
    )
    n = sizes.recovery_records

    def generate() -> Written:
        writer.write(n)  # 8 transactions stay open across the snapshot
        writer.flush()
        return writer.written

    step(f"write {n:,} x 64 B records (raw producer)", generate)
    first_end = _end_offset(kafka, RECOVERY_TOPIC)
    (state0, _), scan0_s = step(
        f"full scan of {first_end:,} records (state for the snapshot)",
        lambda: _timed(lambda: load_state(kafka, RECOVERY_TOPIC, 0, options=opts)),
    )

    def snapshot() -> int:
        store = SnapshotStore(kafka, topic=SNAPSHOT_TOPIC)
        try:
            return store.write(state0).result(60)
        finally:
            store.close()

    step("write the snapshot", snapshot)

    def tail() -> Written:
        writer.write(TAIL_RECORDS)
        writer.end_all()
        writer.flush()
        return writer.written

    written = step(f"write {TAIL_RECORDS:,} records after the snapshot, end every txn", tail)
    end = _end_offset(kafka, RECOVERY_TOPIC)
    loads: list[dict[str, Any]] = []
    snap_state: TxnBufferState | None = None
    for i in range(LOADS):

        def load() -> tuple[tuple[TxnBufferState, int | None], float]:
            store = SnapshotStore(kafka, topic=SNAPSHOT_TOPIC)  # fresh: nothing cached
            try:
                return _timed(lambda: load_state(kafka, RECOVERY_TOPIC, 0, store=store, options=opts))
            finally:
                store.close()

        ((state, from_offset), secs), cpu = probes.measure(
            functools.partial(step, f"load_state from the snapshot ({i + 1}/{LOADS})", load)
        )
        snap_state = state
        loads.append({"seconds": secs, "snapshot_scanned_to": from_offset, "cpu": cpu})
    assert snap_state is not None
    (full_state, _), full_s = step(
        f"full scan of {end:,} records (no snapshot, for comparison)",
        lambda: _timed(lambda: load_state(kafka, RECOVERY_TOPIC, 0, options=opts)),
    )
    secs_list = [x["seconds"] for x in loads]
    raw["recovery"] = {
        "written": written.as_dict(),
        "snapshot_at": state0.scanned_to,
        "end_offset": end,
        "state_at_snapshot": state0.stats(),
        "state_at_end": full_state.stats(),
        "first_full_scan_s": scan0_s,
        "first_full_scan_records": first_end,
        "full_scan_s": full_s,
        "loads": loads,
        "load_median_s": sorted(secs_list)[len(secs_list) // 2],
        "load_max_s": max(secs_list),
        "snapshot_used": all(x["snapshot_scanned_to"] == state0.scanned_to for x in loads),
        "same_state": _same_state(snap_state, full_state),
    }
    return end


def _phase_snapshot_writes(raw: dict[str, Any], sizes: Sizes, kafka: KafkaConfig) -> None:
    """TB snapshot writes of a partition with a large set, SNAPSHOT_NEW_ENTRIES new entries between
    writes: a store that takes unchanged segments over (the TB service's) against a store with
    nothing to take over, which writes every segment (every write before session 31). Two sets: a
    large aborted set, and a large ``ended`` set (a long-open transaction pins the low watermark)."""
    raw["snapshot_writes"] = {
        "aborted": _snapshot_writes(kafka, "aborted", sizes.snapshot_aborted),
        "ended": _snapshot_writes(kafka, "ended", sizes.snapshot_ended),
    }


def _snapshot_writes(kafka: KafkaConfig, name: str, n: int) -> dict[str, Any]:
    topic = f"{SNAPSHOT_TOPIC}_writes_{name}"
    state = TxnBufferState(f"bench_snapshot_writes_{name}", 0, num_tcs=NUM_TCS)
    target: dict[TxnID, Any] = state.aborted if name == "aborted" else state.ended  # type: ignore[assignment]
    if name == "ended":
        state.ongoing[TxnID(0, 1)] = 0  # the long-open transaction
        state._oldest.append((0, TxnID(0, 1)))

    def grow(lo: int, hi: int) -> None:
        target.update({TxnID(1, i): (3 * i if name == "aborted" else True) for i in range(lo, hi)})

    grow(0, n)
    ours = SnapshotStore(kafka, topic=topic, partitions=1)
    next_txn = n
    runs: dict[str, list[dict[str, float]]] = {"incremental": [], "full": []}
    try:
        ours.write(state).result(60)  # what the following writes take over

        def one(kind: str) -> dict[str, float]:
            nonlocal next_txn
            grow(next_txn, next_txn + SNAPSHOT_NEW_ENTRIES)
            next_txn += SNAPSHOT_NEW_ENTRIES
            store = ours if kind == "incremental" else SnapshotStore(kafka, topic=topic, partitions=1)
            before = _end_offset(kafka, topic)
            try:
                _offset, secs = _timed(lambda: store.write(state).result(60))
            finally:
                if store is not ours:
                    store.close()
            return {"seconds": secs, "records": _end_offset(kafka, topic) - before}

        for i in range(SNAPSHOT_WRITES):
            for kind in ("incremental", "full") if i % 2 == 0 else ("full", "incremental"):
                label = f"snapshot write, {n:,} {name}: {kind} ({i + 1})"
                runs[kind].append(step(label, functools.partial(one, kind)))
    finally:
        ours.close()
    return {
        "entries": n,
        "new_per_write": SNAPSHOT_NEW_ENTRIES,
        "runs": runs,
        "median_s": {k: percentile([r["seconds"] for r in v], 50) for k, v in runs.items()},
        "records": {k: [r["records"] for r in v] for k, v in runs.items()},
    }


# ---------------------------------------------------------------------------------------------- 4
def _phase_memory(raw: dict[str, Any], bootstrap: str, end: int) -> None:
    ctx = mp.get_context("spawn")
    out: dict[str, Any] = {}
    for kind in ("ours", "plain"):

        def run_one(kind: str = kind) -> dict[str, Any]:
            queue = ctx.Queue()
            proc = ctx.Process(
                target=rss_worker,
                args=(kind, bootstrap, RECOVERY_TOPIC, end, queue),
                name=f"bench-rss-{kind}",
            )
            proc.start()
            try:
                result: dict[str, Any] = queue.get(timeout=240)
            except Exception as exc:
                result = {"kind": kind, "error": f"no result: {exc!r}"}
            finally:
                proc.join(10)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(5)
            return result

        out[kind] = step(f"fresh process reads {end:,} records: {kind}", run_one)
    raw["memory"] = out


# ---------------------------------------------------------------------------------------------- run
def _measure(quick: bool, bootstrap: str, workdir: Path) -> dict[str, Any]:
    sizes = QUICK if quick else DEFAULT
    raw: dict[str, Any] = {"quick": quick, "sizes": sizes.__dict__, "bootstrap": bootstrap}
    busy, waited = wait_until_quiet(BUSY_PCT, 60.0, sample_s=2.0)
    raw["machine"] = {"cpus": os.cpu_count(), "busy_before_pct": busy, "waited_for_quiet_s": waited}
    if busy > BUSY_PCT:
        print(
            f"  WARNING: the machine is still {busy:.0f}% busy after waiting {waited:.0f}s;"
            " numbers will be low",
            flush=True,
        )
    elif waited > 2:
        print(f"  (waited {waited:.0f}s for the machine to calm down)", flush=True)
    probes = Probes(workdir)
    kafka = KafkaConfig(bootstrap_servers=bootstrap, request_timeout_ms=30_000, extra=FETCH_EXTRA)
    _phase_produce(raw, sizes, bootstrap, workdir, probes)
    _phase_read(raw, sizes, bootstrap, kafka, probes)
    end = _phase_recovery(raw, sizes, bootstrap, kafka, probes)
    _phase_snapshot_writes(raw, sizes, kafka)
    _phase_memory(raw, bootstrap, end)
    raw["memory"]["ours_delivered_ok"] = (
        raw["memory"]["ours"].get("delivered") == raw["recovery"]["written"]["visible"]
    )
    raw["machine"]["busy_after_pct"] = wait_until_quiet(BUSY_PCT, 0.0)[0]
    return raw


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def _pct(a: float, b: float) -> float:
    return a / b * 100 if b else math.nan


def _rows(raw: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []

    def row(metric: str, measured: str, baseline: str = "", target: str = "", met: str = "") -> None:
        rows.append([metric, measured, baseline, target, met])

    p = {k: v["best"] for k, v in raw["produce"].items()}
    plain = p["ours_plain"]["msgs_per_s"]
    runs = " / ".join(fmt(r["msgs_per_s"], "", 0) for r in raw["produce"]["ours_plain"]["runs"])
    row(
        "produce 1 KB: ours, plain sends (no txn)",
        f"{fmt(plain, ' msg/s', 0)} (runs: {runs})",
        "(the produce baseline)",
    )
    for size in TXN_SIZES:
        ours, kafka = p[f"ours_txn_{size}"], p[f"kafka_txn_{size}"]
        rate, share = fmt(ours["msgs_per_s"], " msg/s", 0), fmt(_pct(ours["msgs_per_s"], plain), "%", 0)
        measured = f"{rate} ({share} of plain; txn p50 {fmt(ours['txn_ms']['p50'])} ms)"
        baseline = f"Kafka txn x{size}: {fmt(kafka['msgs_per_s'], ' msg/s', 0)}"
        if size == TARGET_SIZE:
            ok = ours["msgs_per_s"] >= 0.8 * plain and ours["msgs_per_s"] > kafka["msgs_per_s"]
            target = ">= 80% of plain; > Kafka"
            row(f"  ours, txns of {size} (sequential)", measured, baseline, target, _met(ok))
        else:
            row(f"  ours, txns of {size} (sequential)", measured, baseline)
    ov, kt = p[f"ours_txn_{TARGET_SIZE}_overlap"], p[f"kafka_txn_{TARGET_SIZE}"]
    row(
        f"  ours, txns of {TARGET_SIZE}, overlapped (1 thread: {BEGUN_AHEAD} begun ahead, commit_async,"
        f" <= {OVERLAP_WINDOW} in flight)",
        f"{fmt(ov['msgs_per_s'], ' msg/s', 0)} ({fmt(_pct(ov['msgs_per_s'], plain), '%', 0)} of plain;"
        f" txn p50 {fmt(ov['txn_ms']['p50'])} ms begin to committed)",
        f"Kafka txn x{TARGET_SIZE}: {fmt(kt['msgs_per_s'], ' msg/s', 0)}",
        "(best of 2 passes; the paired rounds decide)",
    )
    rounds = raw["target_rounds"]
    vs_plain = paired_ratios(rounds, PAIRED[1], PAIRED[0], "msgs_per_s")
    vs_kafka = paired_ratios(rounds, PAIRED[1], PAIRED[2], "msgs_per_s")
    errors = sum(r[PAIRED[1]]["errors"] for r in rounds)
    ok = vs_plain["median"] >= 0.8 and vs_kafka["median"] > 1.0 and not errors
    rates = {k: fmt_rounds(rounds, k, "msgs_per_s") for k in PAIRED}
    row(
        f"  #3 target, paired rounds: overlapped txns of {TARGET_SIZE} vs plain sends, back to back"
        f" ({raw['sizes']['pair_msgs']:,} msgs each)",
        f"median {fmt_ratio(vs_plain)} of plain; {fmt_ratio(vs_kafka)} of Kafka txn x{TARGET_SIZE}",
        f"msg/s per round: ours {rates[PAIRED[1]]}; plain {rates[PAIRED[0]]}; Kafka {rates[PAIRED[2]]}",
        ">= 80% of plain; > Kafka",
        _met(ok),
    )
    for threads, size in THREADED:
        ours = p[f"ours_txn_{size}_t{threads}"]
        rate, share = fmt(ours["msgs_per_s"], " msg/s", 0), fmt(_pct(ours["msgs_per_s"], plain), "%", 0)
        row(
            f"  ours, txns of {size}, {threads} threads",
            f"{rate} ({share} of plain)",
            f"Kafka txn x{size} (1 thread): {fmt(p[f'kafka_txn_{size}']['msgs_per_s'], ' msg/s', 0)}",
        )
    kplain = fmt(p["kafka_plain"]["msgs_per_s"], " msg/s", 0)
    row("  Kafka idempotent producer (no txn)", "", f"raw client: {kplain}")

    r = raw["read"]
    best, w = r["best"], r["written"]
    o, pl = best.get("ours"), best.get("plain")
    mix = (
        f"{r['end_offset']:,} x 1 KB: {w['plain']:,} plain, {w['committed_txns']} committed +"
        f" {w['aborted_txns']} aborted txns of 100"
    )
    row(f"read-committed read ({mix})", "", "")
    if o and pl:
        paired = paired_ratios(r["pairs"], "ours", "plain", "offsets_per_s")
        row(
            f"  ours (CommittedReader), best of {raw['sizes']['read_runs']}",
            f"{fmt(o['offsets_per_s'], ' rec/s', 0)}"
            f" ({fmt(_pct(o['offsets_per_s'], pl['offsets_per_s']), '%', 0)} of plain; {o['seconds']:.2f} s)",
            f"plain Consumer: {fmt(pl['offsets_per_s'], ' rec/s', 0)} ({pl['seconds']:.2f} s)",
        )
        row(
            "  paired: each of our reads vs the plain read next to it",
            f"median {fmt_ratio(paired)} of plain",
            "",
            ">= 80% of plain",
            _met(paired["median"] >= 0.8),
        )
    else:
        row("  ours (CommittedReader)", "incomplete read", "", ">= 80% of plain", "NO")
    row(
        "  delivered records correct",
        f"ours {o['delivered'] if o else 'n/a':,} (expected {w['visible']:,})" if o else "n/a",
        f"plain: {pl['delivered']:,} (all offsets)" if pl else "",
        "exact",
        _met(r["ours_delivered_ok"] and r["plain_delivered_ok"] and o is not None),
    )

    rec = raw["recovery"]
    st = rec["state_at_snapshot"]
    row(
        f"TB recovery: {rec['end_offset']:,} records, snapshot at {rec['snapshot_at']:,}",
        f"{rec['load_median_s']:.3f} s median of {LOADS} (max {rec['load_max_s']:.3f} s)",
        f"full scan, no snapshot: {rec['full_scan_s']:.2f} s",
        "< 2 s",
        _met(rec["load_max_s"] < 2.0 and rec["snapshot_used"]),
    )
    row(
        "  snapshot state",
        f"{st['aborted_txn_size']:,} aborted, {st['ongoing_txn_size']} ongoing txns",
        "",
        "same state as full scan",
        _met(rec["same_state"] and rec["snapshot_used"]),
    )
    for name, sw in raw["snapshot_writes"].items():
        row(
            f"TB snapshot write, {sw['entries']:,} {name} txns, +{sw['new_per_write']} between writes",
            f"{sw['median_s']['incremental'] * 1000:.0f} ms median, records {sw['records']['incremental']}",
            f"every segment: {sw['median_s']['full'] * 1000:.0f} ms, records {sw['records']['full']}",
            "(report)",
            "-",
        )

    mem = raw["memory"]
    mo, mp_ = mem.get("ours", {}), mem.get("plain", {})
    if "peak_rss_mb" in mo and mo.get("complete"):
        row(
            f"reader peak RSS, fresh process, {mo['offsets']:,} records",
            f"{fmt(mo['peak_rss_mb'], ' MB', 0)} (at start {fmt(mo['rss_start_mb'], ' MB', 0)};"
            f" {mo['seconds']:.1f} s{'' if mem['ours_delivered_ok'] else '; WRONG record count'})",
            f"plain Consumer: {fmt(mp_.get('peak_rss_mb', math.nan), ' MB', 0)}"
            f" (at start {fmt(mp_.get('rss_start_mb', math.nan), ' MB', 0)};"
            f" {mp_.get('seconds', math.nan):.1f} s)",
            "<= 250 MB",
            _met(mo["peak_rss_mb"] <= 250),
        )
        if "peak_rss_mb" in mp_:
            row(
                "  ours minus plain Consumer (the reader's own share)",
                fmt(mo["peak_rss_mb"] - mp_["peak_rss_mb"], " MB", 0),
                f"sampled peaks: ours {fmt(mo['extra']['rss'].get('sampled_peak_mb', math.nan), ' MB', 0)},"
                f" plain {fmt(mp_['extra']['rss'].get('sampled_peak_mb', math.nan), ' MB', 0)}",
            )
    else:
        row("reader peak RSS", f"failed: {mo.get('error', 'incomplete')}", "", "<= 250 MB", "NO")
    return rows


def _cpu_rows(raw: dict[str, Any]) -> list[list[str]]:
    rows = []
    cores = int(raw["machine"]["cpus"] or 1)

    def add(name: str, cpu: dict[str, float]) -> None:
        def total(prefix: str) -> str:
            vals = [v for k, v in cpu.items() if k.startswith(prefix)]
            return fmt(sum(vals), "%", 0) if vals else "-"

        machine_pct = cpu.get("machine_pct", math.nan)
        ours = sum(v for k, v in cpu.items() if k != "machine_pct" and math.isfinite(v))
        others = machine_pct * cores - ours  # % of one core used by processes not of this run
        flag = " *" if others > OTHERS_FLAG_PCT else ""
        rows.append(
            [
                name,
                fmt(machine_pct, "%", 0),
                total("broker"),
                total("coordinator"),
                total("bench"),
                fmt(max(others, 0.0), "%", 0) + flag,
            ]
        )

    for key, point in raw["produce"].items():
        for i, run in enumerate(point["runs"]):
            add(f"{key} #{i + 1}", run["cpu"])
    for i, run in enumerate(raw["read"]["runs"]):
        add(f"read {i + 1}: {run['kind']}", run["extra"].get("cpu", {}))
    for i, load in enumerate(raw["recovery"]["loads"]):
        add(f"snapshot load {i + 1}", load["cpu"])
    return rows


def run(quick: bool) -> int:
    raw, path = run_suite("buffer", quick, _measure, _rows)
    cores = raw["machine"]["cpus"]
    print(
        f"\nCPU during each point (machine: % of all {cores} cores; processes: % of one core;"
        " others = machine minus this run's processes):"
    )
    cpu_rows = _cpu_rows(raw)
    print(format_table(["point", "machine", "broker", "coordinator", "bench process", "others"], cpu_rows))
    disturbed = sum(1 for r in cpu_rows if r[-1].endswith("*"))
    if disturbed:
        print(
            f"  * {disturbed} point(s) shared the machine with other work (> {OTHERS_FLAG_PCT:.0f}% of a core"
            " used by processes outside this run): their numbers are low; the best run of each point counts"
        )
    m = raw["machine"]
    print(
        f"\nmachine busy before: {m['busy_before_pct']:.0f}% (checked for {m['waited_for_quiet_s']:.0f}s),"
        f" after: {m['busy_after_pct']:.0f}%"
        + ("  WARNING: busy machine, numbers are low" if m["busy_before_pct"] > BUSY_PCT else "")
    )
    print(
        "notes: coordinator with tb_service_enabled=false (snapshots written by the suite);"
        " all readers use receive.message.max.bytes=2147483647 (the embedded broker returns the whole"
        " rest of a partition in one Fetch)"
        + ("; --quick: smaller points and a 300k-record recovery partition" if raw["quick"] else "")
    )
    errors = {
        f"{k} #{i + 1}": r["errors"]
        for k, v in raw["produce"].items()
        for i, r in enumerate(v["runs"])
        if r["errors"]
    }
    if errors:
        print(f"\nerrors during the run: {errors}")
    print(f"\nraw numbers: {path}  (total {raw['total_runtime_s']:.0f}s)")
    return 0
