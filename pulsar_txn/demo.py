"""``pulsar-txn demo``: an embedded broker and coordinator, a scripted series of transactions over the
Pulsar protocol, and a summary read back from Kafka."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

from kafka_store import Appender, KafkaConfig, LocalBroker, TopicAdmin, read_range
from pulsar_txn.buffer.marker import CTL_HEADER, MARKER_CTL, TXN_HEADER, decode_marker
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.errors import InvalidTxnStatusError
from pulsar_txn.tc_client import SyncTcClient
from pulsar_txn.txnid import TxnAction, TxnID

TOPIC = "demo-orders"
PARTITIONS = 3
MESSAGES_PER_PARTITION = 5


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else 0.0


def run_demo(data_dir: Path, *, transactions: int = 200, seed: int = 7) -> int:
    rng = random.Random(seed)
    print(f"starting embedded Kafka broker (data in {data_dir}) ...", flush=True)
    broker = LocalBroker(data_dir / "broker")
    broker.start()
    try:
        kafka = broker.kafka_config()
        TopicAdmin(kafka).ensure_topic(TOPIC, PARTITIONS)
        config = CoordinatorConfig(num_tcs=4, ownership="static", static_tc_ids=(0, 1, 2, 3), port=0)
        with EmbeddedCoordinator(kafka, config) as coordinator:
            print(f"coordinator serving the Pulsar protocol at {coordinator.url}", flush=True)
            return _script(kafka, coordinator, transactions, rng)
    finally:
        broker.stop()


def _script(
    kafka: KafkaConfig, coordinator: EmbeddedCoordinator, transactions: int, rng: random.Random
) -> int:
    assert coordinator.url is not None
    appender = Appender(kafka)
    outcomes: dict[TxnID, str] = {}
    commit_ms: list[float] = []
    started = time.perf_counter()
    with SyncTcClient(coordinator.url, operation_timeout=30) as client:
        for i in range(transactions):
            txn = client.new_txn(30_000)
            partitions = rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS))
            client.add_partitions(txn, [f"{TOPIC}-partition-{p}" for p in partitions])
            sends = [
                appender.append(TOPIC, p, f"order {i}.{n}".encode(), headers=[(TXN_HEADER, txn.to_bytes())])
                for p in partitions
                for n in range(MESSAGES_PER_PARTITION)
            ]
            for future in sends:
                future.result(30)  # commit only after every send of the transaction is stored
            action = TxnAction.COMMIT if rng.random() < 0.8 else TxnAction.ABORT
            t0 = time.perf_counter()
            client.end_txn(txn, action)
            commit_ms.append((time.perf_counter() - t0) * 1000)
            outcomes[txn] = action.name
            if (i + 1) % 50 == 0 or i + 1 == transactions:
                print(f"  {i + 1}/{transactions} transactions ended", flush=True)
        elapsed = time.perf_counter() - started
        # Three transactions that nobody ends: the coordinator aborts them when their 1 s timeout passes.
        forgotten = [client.new_txn(1_000) for _ in range(3)]
        for txn in forgotten:
            client.add_partitions(txn, [f"{TOPIC}-partition-0"])
            appender.append(TOPIC, 0, b"never committed", headers=[(TXN_HEADER, txn.to_bytes())]).result(30)
        print("  left 3 transactions open with a 1 s timeout ...", flush=True)
        time.sleep(2.5)
        for txn in forgotten:
            try:
                client.end_txn(txn, TxnAction.COMMIT)
                outcomes[txn] = "COMMIT (unexpected!)"
            except InvalidTxnStatusError:
                outcomes[txn] = "TIMED OUT"
    appender.close()
    return _summary(kafka, coordinator, outcomes, commit_ms, elapsed)


def _summary(
    kafka: KafkaConfig,
    coordinator: EmbeddedCoordinator,
    outcomes: dict[TxnID, str],
    commit_ms: list[float],
    elapsed: float,
) -> int:
    markers: Counter[tuple[int, str]] = Counter()
    visible: Counter[int] = Counter()
    hidden: Counter[int] = Counter()
    for p in range(PARTITIONS):
        records = list(read_range(kafka, TOPIC, p))
        verdict = {}
        for rec in records:
            if rec.header(CTL_HEADER) == MARKER_CTL:
                marker = decode_marker(rec.value)
                verdict[marker.txn_id] = marker.action
                markers[(p, marker.action.name)] += 1
        for rec in records:
            raw = rec.header(TXN_HEADER)
            if raw is None or rec.header(CTL_HEADER) is not None:
                continue
            if verdict.get(TxnID.from_bytes(raw)) is TxnAction.COMMIT:
                visible[p] += 1
            else:
                hidden[p] += 1
    stats = coordinator.stats()["coordinators"]
    tally = Counter(outcomes.values())
    ended = len(commit_ms)
    print()
    print("summary")
    print(
        f"  transactions: {ended} ended in {elapsed:.2f} s ({ended / elapsed:.0f}/s over the Pulsar protocol)"
    )
    print(f"  outcomes: {dict(sorted(tally.items()))}")
    print(f"  end-txn latency: p50 {_pct(commit_ms, 0.5):.2f} ms, p99 {_pct(commit_ms, 0.99):.2f} ms")
    header = ("partition", "commit markers", "abort markers", "committed msgs", "hidden msgs")
    print("  " + " ".join(f"{h:>15}" for h in header))
    for p in range(PARTITIONS):
        row = (p, markers[(p, "COMMIT")], markers[(p, "ABORT")], visible[p], hidden[p])
        print("  " + " ".join(f"{v:>15}" for v in row))
    print(
        f"  {'TC':>3} {'created':>8} {'committed':>10} {'aborted':>8} {'timed out':>10} {'low watermark':>14}"
    )
    for tc_id, s in stats.items():
        print(
            f"  {tc_id:>3} {s['created_count']:>8} {s['committed_count']:>10} {s['aborted_count']:>8} "
            f"{s['timeout_count']:>10} {s['low_water_mark']:>14}"
        )
    ok = tally.get("TIMED OUT", 0) == 3 and "COMMIT (unexpected!)" not in tally
    print("demo OK" if ok else "demo FAILED: a timed-out transaction was committed")
    return 0 if ok else 1
