"""``python -m bench spark``: batch-read throughput of the ``pulsar_txn`` Spark source.

One topic of 4 partitions holds N committed 1 KB records (1 M; ``--quick`` 100 k) written in our
storage format by a raw batching producer: transactions of 100 messages, every 100th aborted (1% of
the messages), each ended by a marker. A TB snapshot is written afterwards (as the TB service would),
so planning reads the snapshot instead of scanning the whole topic on the driver.

Readers, alternating, best of the runs:

* ours: ``spark.read.format("pulsar_txn")`` (local[2]), the action is ``count(*)`` plus
  ``sum(length(value))`` so every value crosses into Spark;
* ours with ``transactionFilter=false`` (the raw read: every record, markers included);
* a plain confluent-kafka Consumer in this process reading the same partitions, summing value bytes.

Target: the filter costs <= 15% versus the filter off.
"""

from __future__ import annotations

import os
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench._common import fmt, run_suite, step, wait_until_quiet
from kafka_store import KafkaConfig, TopicAdmin, end_offsets, poll_ready
from pulsar_txn._meta_header import META_HEADER, encode_meta
from pulsar_txn.buffer.marker import TXN_HEADER, TxnMarker, encode_marker
from pulsar_txn.buffer.reader import BufferOptions, load_state
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.txnid import TxnAction, TxnID

PARTITIONS = 4
TXN_SIZE = 100
ABORT_EVERY = 100
VALUE_SIZE = 1024
FETCH_EXTRA = {"receive.message.max.bytes": "2147483647"}  # noida-db ignores fetch limits
SNAPSHOT_TOPIC = "__bench_tb_snapshot"


def _write(bootstrap: str, topic: str, committed_target: int) -> dict[str, int]:
    """Transactions of 100 per partition, round robin, until ``committed_target`` committed messages."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    payload = random.Random(7).randbytes(VALUE_SIZE)
    name = f"bench-{uuid.uuid4().hex[:6]}".encode()
    counts = {"records": 0, "committed": 0, "aborted": 0, "markers": 0, "txns": 0}
    seq = [0] * PARTITIONS

    def produce(partition: int, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        while True:
            try:
                producer.produce(topic, value, partition=partition, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        counts["records"] += 1

    n = 0
    while counts["committed"] < committed_target:
        partition = n % PARTITIONS
        tc = partition  # one TC per partition keeps the low watermark simple (sequential per TC)
        txn = TxnID(tc, seq[tc])
        seq[tc] += 1
        n += 1
        counts["txns"] += 1
        abort = counts["txns"] % ABORT_EVERY == 0
        raw = txn.to_bytes()
        for i in range(TXN_SIZE):
            produce(
                partition,
                payload,
                [(META_HEADER, encode_meta(i, name)), (TXN_HEADER, raw)],
            )
        action = TxnAction.ABORT if abort else TxnAction.COMMIT
        value, headers = encode_marker(TxnMarker(txn, action, txn.least_bits - 1, int(time.time() * 1000)))
        produce(partition, value, headers)
        counts["markers"] += 1
        counts["aborted" if abort else "committed"] += TXN_SIZE
    left = producer.flush(300)
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return counts


def _snapshot(kafka: KafkaConfig, topic: str) -> dict[str, float]:
    """Write a TB snapshot per partition (the TB service's job), and time planning with and without it."""
    t0 = time.perf_counter()
    store = SnapshotStore(kafka, topic=SNAPSHOT_TOPIC)
    opts = BufferOptions(num_tcs=PARTITIONS)
    try:
        for p in range(PARTITIONS):
            state, _ = load_state(kafka, topic, p, options=opts)
            store.write(state).result(30)
        full_scan = time.perf_counter() - t0
        t1 = time.perf_counter()
        for p in range(PARTITIONS):
            load_state(kafka, topic, p, store=SnapshotStore(kafka, topic=SNAPSHOT_TOPIC), options=opts)
        from_snapshot = time.perf_counter() - t1
    finally:
        store.close()
    return {"full_scan_all_partitions_s": full_scan, "load_from_snapshot_all_partitions_s": from_snapshot}


def _plain(bootstrap: str, topic: str, ends: dict[tuple[str, int], int]) -> dict[str, Any]:
    t0 = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-plain-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            **FETCH_EXTRA,
        }
    )
    records = value_bytes = 0
    try:
        consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
        todo = {tp for tp, end in ends.items() if end > 0}
        deadline = t0 + 600
        while todo and time.perf_counter() < deadline:
            for msg in poll_ready(consumer, 10_000, 0.5):
                if msg.error() is not None:
                    continue
                value = msg.value()
                records += 1
                value_bytes += len(value) if value is not None else 0
                tp = (msg.topic(), msg.partition())
                if msg.offset() + 1 >= ends[tp]:
                    todo.discard(tp)
    finally:
        consumer.close()
    return {"rows": records, "value_bytes": value_bytes, "seconds": time.perf_counter() - t0}


def _spark_read(session: Any, options: dict[str, str]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    df = session.read.format("pulsar_txn").options(**options).load()
    row = df.select(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    return {"rows": int(row["n"]), "value_bytes": int(row["b"] or 0), "seconds": time.perf_counter() - t0}


def _executor_loop(bootstrap: str, topic: str, transaction_filter: bool) -> dict[str, Any]:
    """The executors' read path without Spark: plan in-process, then ``read_partition`` per partition
    in this process (isolates the filter's cost from Spark's scheduling and Arrow transfer)."""
    from spark._options import parse_options
    from spark._plan import Planner
    from spark._read import read_partition

    t0 = time.perf_counter()
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "snapshotTopic": SNAPSHOT_TOPIC,
        "numTcs": str(PARTITIONS),
        "transactionFilter": str(transaction_filter).lower(),
    }
    planner = Planner(parse_options(options, streaming=False))
    try:
        tps = planner.partitions()
        bounds = planner.bounds(tps)
        parts = [planner.range_partition(tp, 0, bounds[tp].limit) for tp in tps]
    finally:
        planner.close()
    rows = value_bytes = 0
    for part in parts:
        for batch in read_partition(part):
            rows += batch.num_rows
            value_bytes += batch.column(1).nbytes
    return {"rows": rows, "value_bytes": value_bytes, "seconds": time.perf_counter() - t0}


def _session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark as pulsar_spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pulsar-txn-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pulsar_spark.register(session)
    return session


def _measure(quick: bool, bootstrap: str, workdir: Path) -> dict[str, Any]:
    committed = 100_000 if quick else 1_000_000
    runs = 4 if quick else 2
    raw: dict[str, Any] = {"quick": quick, "committed_target": committed, "partitions": PARTITIONS}
    busy, waited = wait_until_quiet(20.0, 30.0, sample_s=2.0)
    raw["machine"] = {"cpus": os.cpu_count(), "busy_before_pct": busy, "waited_for_quiet_s": waited}
    if busy > 20:
        print(f"  WARNING: the machine is {busy:.0f}% busy before starting; numbers will be low", flush=True)
    kafka = KafkaConfig(bootstrap_servers=bootstrap, request_timeout_ms=30_000, extra=FETCH_EXTRA)
    topic = "sparkbench"
    TopicAdmin(kafka).ensure_topic(topic, PARTITIONS)
    raw["written"] = step(
        f"write {committed:,} committed 1 KB records (+1% aborted)",
        lambda: _write(bootstrap, topic, committed),
    )
    raw["planning"] = step(
        "TB snapshot per partition (as the TB service would)", lambda: _snapshot(kafka, topic)
    )
    ends = end_offsets(kafka, [(topic, p) for p in range(PARTITIONS)])
    session = step("start local Spark", _session)
    base = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "snapshotTopic": SNAPSHOT_TOPIC,
        "numTcs": str(PARTITIONS),
        **{f"kafka.{k}": v for k, v in FETCH_EXTRA.items()},
    }
    variants = {
        "filter_on": lambda: _spark_read(session, base),
        "filter_off": lambda: _spark_read(session, {**base, "transactionFilter": "false"}),
        "plain_consumer": lambda: _plain(bootstrap, topic, ends),
        "loop_filter_on": lambda: _executor_loop(bootstrap, topic, True),
        "loop_filter_off": lambda: _executor_loop(bootstrap, topic, False),
    }
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
    try:
        step(
            "warm-up read (Python workers, JIT)",
            lambda: _spark_read(session, {**base, "endingOffsets": '{"sparkbench":{"0":1000}}'}),
        )
        names = list(variants)
        for i in range(runs):
            # Alternate the order each round (on/off, then off/on, ...): the first Spark query after
            # a pause pays for restarting idle Python workers, which must not land on one side.
            order = names if i % 2 == 0 else names[1::-1] + names[2:3] + names[4:2:-1]
            for name in order:
                results[name].append(step(f"run {i + 1}: {name}", variants[name]))
    finally:
        session.stop()
    raw["runs"] = results
    raw["best"] = {k: min(v, key=lambda r: r["seconds"]) for k, v in results.items()}
    raw["expected_rows"] = {
        "filter_on": raw["written"]["committed"],
        "filter_off": raw["written"]["records"],
        "loop_filter_on": raw["written"]["committed"],
        "loop_filter_off": raw["written"]["records"],
    }
    raw["machine"]["busy_after_pct"] = wait_until_quiet(20.0, 0.0)[0]
    return raw


def _rows(raw: dict[str, Any]) -> list[list[str]]:
    best, w = raw["best"], raw["written"]
    rate = {k: v["rows"] / v["seconds"] for k, v in best.items()}
    mb = {k: v["value_bytes"] / v["seconds"] / 1e6 for k, v in best.items()}
    on, off = best["filter_on"], best["filter_off"]
    # Cost of the filter: time per partition offset (both read every offset from Kafka).
    cost = (on["seconds"] / off["seconds"] - 1) * 100
    lon, loff = best["loop_filter_on"], best["loop_filter_off"]
    loop_cost = (lon["seconds"] / loff["seconds"] - 1) * 100
    rows = [
        [
            f"data: {w['records']:,} records in {PARTITIONS} partitions",
            f"{w['committed']:,} committed, {w['aborted']:,} aborted, {w['markers']:,} markers",
            "",
            "",
            "",
        ],
        [
            "pulsar_txn source, transaction filter on",
            f"{fmt(rate['filter_on'], ' rows/s', 0)} ({fmt(mb['filter_on'], ' MB/s')};"
            f" {on['seconds']:.2f} s)",
            f"filter off: {fmt(rate['filter_off'], ' rows/s', 0)} ({off['seconds']:.2f} s)",
            "filter costs <= 15%",
            "yes" if cost <= 15 else "NO",
        ],
        ["  filter cost (wall time, on vs off)", f"{cost:+.1f}%", "", "", ""],
        [
            "  plain confluent Consumer, same data",
            f"{fmt(rate['plain_consumer'], ' rows/s', 0)}"
            f" ({best['plain_consumer']['seconds']:.2f} s, 1 thread)",
            "(reference)",
            "",
            "",
        ],
        [
            "executor read loop without Spark, filter on",
            f"{fmt(rate['loop_filter_on'], ' rows/s', 0)} ({lon['seconds']:.2f} s)",
            f"filter off: {fmt(rate['loop_filter_off'], ' rows/s', 0)} ({loff['seconds']:.2f} s)",
            "filter costs <= 15%",
            "yes" if loop_cost <= 15 else "NO",
        ],
        ["  filter cost (read loop, on vs off)", f"{loop_cost:+.1f}%", "", "", ""],
        [
            "  rows delivered correct",
            " / ".join(f"{k} {best[k]['rows']:,}" for k in raw["expected_rows"]),
            " / ".join(f"{v:,}" for v in raw["expected_rows"].values()),
            "exact",
            "yes" if all(best[k]["rows"] == v for k, v in raw["expected_rows"].items()) else "NO",
        ],
        [
            "  planning: TB state of all partitions",
            f"{raw['planning']['load_from_snapshot_all_partitions_s']:.2f} s from snapshots",
            f"full scan: {raw['planning']['full_scan_all_partitions_s']:.2f} s",
            "",
            "",
        ],
    ]
    return rows


def run(quick: bool) -> int:
    _raw, path = run_suite("spark", quick, _measure, _rows)
    print(f"\nraw numbers: {path}")
    return 0
