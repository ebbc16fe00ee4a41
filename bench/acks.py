"""``python -m bench acks``: acknowledgement throughput, plain and transactional, vs a Kafka consumer group.

One fresh embedded broker and one coordinator subprocess for everything (all stopped at the end):
  1. one topic, one partition, ``messages`` x 1 KB written with our Producer (plain sends);
  2. every variant reads all of it from the beginning under a fresh subscription / consumer group, in
     batches of 100, and acknowledges each batch:
       * ours, plain individual acks (``acknowledge(msg)`` per message) - run first and again last;
       * ours, plain cumulative acks (``acknowledge_cumulative`` of each batch's last message);
       * ours, transactional acks (``client.transaction()``, ``acknowledge_async(msg, txn)`` x 100,
         ``commit()``; the sync ``acknowledge(msg, txn)`` would wait for each pending ack's write);
       * Kafka: a plain confluent ``Consumer`` in a group, ``commit(asynchronous=False)`` per 100
         messages, and ``commit(asynchronous=True)`` per message.

What is timed (the same for every variant): every variant first receives all messages (not timed),
then acknowledges them in batches of 100 back to back; the clock runs over the whole ack phase
(the ack / commit calls; for transactions also beginning them and ``commit()``), so nothing in
flight (overlapped commits) progresses while the clock is stopped. Then, once, the wait until the
acks are durable: for our plain acks and Kafka's async commits until the group's committed offset
(read with an AdminClient, as another process would) reaches the last acked offset + 1; for
overlapped transactions until their last commits returned; for synchronous commits and
transactions ~0 (the calls return once durable). The first ``warmup_batches`` of every variant
are acked (and their commits ended) before the clock starts (connections, pending-ack topic
creation, TC registration). The plain variants' durability wait is 0-100 ms (the cursor is
committed every 100 ms), a fixed cost that weighs less the more messages a run acks: 50,000 by
default. Session 28 changed the timing: before, receive ran between timed ack phases and the
overlapped commits progressed meanwhile, which favoured the transactional variant.
"""

from __future__ import annotations

import functools
import math
import os
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient

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
    step,
    wait_until_quiet,
)
from kafka_store import KafkaConfig, LocalBroker, end_offsets
from pulsar_txn.client import Client
from pulsar_txn.consumer import Consumer
from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.message import Message, MessageId
from pulsar_txn.transaction import Transaction

T = TypeVar("T")

PAYLOAD = os.urandom(1024)
TOPIC = "bench_acks"
BATCH = 100
BUSY_PCT = 20.0
TARGET_SHARE = 0.5  # transactional acks >= 50% of plain individual acks
DURABLE_POLL_S = 0.002

Mode = Literal["individual", "cumulative", "txn", "txn_overlap"]
OVERLAP_WINDOW = 8  # commits in flight at most in the overlapped transactional variant
BEGUN_AHEAD = 4  # transactions begun (NEW_TXN sent) ahead of use in that variant
KafkaMode = Literal["sync100", "async1"]


@dataclass(frozen=True)
class Sizes:
    messages: int
    warmup_batches: int
    max_variant_s: float  # cap on one variant's receive + ack loop
    durable_timeout_s: float
    pair_rounds: int  # rounds of (plain individual, txn acks overlapped) back to back, after ORDER


DEFAULT = Sizes(messages=50_000, warmup_batches=5, max_variant_s=25.0, durable_timeout_s=15.0, pair_rounds=5)
QUICK = Sizes(messages=5_000, warmup_batches=5, max_variant_s=10.0, durable_timeout_s=10.0, pair_rounds=3)
PAIRED = ("plain_individual", "txn100_overlap")


@dataclass
class AckRun:
    """One variant. ``acked``/``ack_s`` cover the timed batches only (after the warm-up)."""

    label: str
    subscription: str
    acked: int = 0  # messages acknowledged in timed batches
    ack_calls: int = 0  # ack / commit calls in timed batches
    ack_s: float = 0.0  # timed ack phases, summed (without the final durability wait)
    durable_wait_s: float = 0.0  # after the last ack: until the acks were durable
    loop_s: float = 0.0  # wall time of the timed part, receive included, durability wait included
    received: int = 0  # all batches, warm-up included
    duplicates: int = 0
    last_offset: int = -1
    committed_offset: int | None = None  # the group's committed offset when we stopped waiting
    durable: bool = False
    complete: bool = False  # every message of the topic received and acked
    batch_ms: list[float] = field(default_factory=list)  # timed ack phase of each batch
    txns: int = 0
    errors: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    # txn_overlap only (not reported): commits in flight and the next transaction, begun ahead
    committing: deque[Future[None]] = field(default_factory=deque)
    ahead: deque[Future[Transaction]] = field(default_factory=deque)

    @property
    def timed_s(self) -> float:
        return self.ack_s + self.durable_wait_s

    @property
    def acks_per_s(self) -> float:
        return self.acked / self.timed_s if self.timed_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "subscription": self.subscription,
            "acks_per_s": self.acks_per_s,
            "acks_per_s_without_durable_wait": self.acked / self.ack_s if self.ack_s else 0.0,
            "receive_and_ack_per_s": self.acked / self.loop_s if self.loop_s else 0.0,
            "acked": self.acked,
            "ack_calls": self.ack_calls,
            "ack_s": self.ack_s,
            "durable_wait_s": self.durable_wait_s,
            "timed_s": self.timed_s,
            "loop_s": self.loop_s,
            "received": self.received,
            "duplicates": self.duplicates,
            "last_offset": self.last_offset,
            "committed_offset": self.committed_offset,
            "durable": self.durable,
            "complete": self.complete,
            "batch_ms": {
                "p50": percentile(self.batch_ms, 50),
                "p99": percentile(self.batch_ms, 99),
                "max": percentile(self.batch_ms, 100),
            },
            "txns": self.txns,
            "errors": self.errors,
            "extra": self.extra,
            "cpu": self.cpu,
        }


class GroupOffsets:
    """A group's committed offset of partition 0, read with one reused AdminClient (no group join)."""

    def __init__(self, bootstrap: str) -> None:
        self._admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "bench-acks-offsets"})

    def committed(self, group: str, topic: str) -> int | None:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
        try:
            result = self._admin.list_consumer_group_offsets([request])[group].result(10)
        except KafkaException:
            return None
        offsets = [tp.offset for tp in result.topic_partitions if tp.offset >= 0]
        return offsets[0] if offsets else None

    def wait_for(self, group: str, topic: str, target: int, timeout: float) -> tuple[bool, int | None, float]:
        """Poll until the committed offset is >= ``target``: (reached, last seen, seconds waited)."""
        t0 = time.perf_counter()
        deadline = t0 + timeout
        seen = self.committed(group, topic)
        while (seen is None or seen < target) and time.perf_counter() < deadline:
            time.sleep(DURABLE_POLL_S)
            seen = self.committed(group, topic)
        return seen is not None and seen >= target, seen, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------- ours
def _subscription(mode: str) -> str:
    return f"bench-acks-{mode}-{uuid.uuid4().hex[:6]}"


def _ack_batch(client: Client, consumer: Consumer, mode: Mode, batch: list[Message], run: AckRun) -> None:
    if mode == "individual":
        for msg in batch:
            consumer.acknowledge(msg)
        run.ack_calls += len(batch)
    elif mode == "cumulative":
        consumer.acknowledge_cumulative(batch[-1])
        run.ack_calls += 1
    elif mode == "txn":
        txn = client.transaction(60)
        for msg in batch:
            consumer.acknowledge_async(msg, txn)  # Java's acknowledgeAsync: the commit waits for them
        txn.commit()
        run.ack_calls += len(batch)
        run.txns += 1
    else:
        # Pulsar's API is asynchronous: this txn was begun during the previous batch, the batch is
        # acked in one call, and the commit overlaps with the next batches (at most a window of them).
        while len(run.ahead) <= BEGUN_AHEAD:
            run.ahead.append(client.new_transaction().with_transaction_timeout(60).build_async())
        txn = run.ahead.popleft().result()
        consumer.acknowledge_async(batch, txn)
        run.committing.append(txn.commit_async())
        if len(run.committing) > OVERLAP_WINDOW:
            run.committing.popleft().result()
        run.ack_calls += 1
        run.txns += 1


def _drain_commits(run: AckRun) -> None:
    """Wait for the overlapped variant's commits in flight."""
    while run.committing:
        try:
            run.committing.popleft().result()
        except PulsarTxnError as exc:
            run.errors += 1
            run.extra.setdefault("first_error", repr(exc))


def _abort_ahead(run: AckRun) -> None:
    """Abort the transactions begun ahead and not used (after the clock: no ack work)."""
    while run.ahead:
        run.ahead.popleft().result().abort()


def _timed_acks(
    run: AckRun,
    batches: list[list[T]],
    sizes: Sizes,
    ack: Callable[[list[T]], None],
    offset: Callable[[T], int],
) -> None:
    """Ack the warm-up batches, then time the rest back to back (every batch was received before:
    nothing but acking runs while the clock runs, so work in flight, such as overlapped commits,
    cannot progress in untimed gaps). ``run.ack_s`` is the wall time of the timed batches."""
    warm, timed = batches[: sizes.warmup_batches], batches[sizes.warmup_batches :]
    for batch in warm:
        try:
            ack(batch)
        except (PulsarTxnError, KafkaException) as exc:
            run.errors += 1
            run.extra.setdefault("first_error", repr(exc))
        run.last_offset = max(run.last_offset, offset(batch[-1]))
    _drain_commits(run)  # the warm-up's commits end before the clock starts
    start = time.perf_counter()
    for batch in timed:
        t0 = time.perf_counter()
        if t0 - start > sizes.max_variant_s:
            break
        try:
            ack(batch)
        except (PulsarTxnError, KafkaException) as exc:
            run.errors += 1
            run.extra.setdefault("first_error", repr(exc))
            continue
        run.batch_ms.append((time.perf_counter() - t0) * 1000)
        run.acked += len(batch)
        run.last_offset = max(run.last_offset, offset(batch[-1]))
    run.ack_s = time.perf_counter() - start


def _ours(client: Client, offsets: GroupOffsets, mode: Mode, label: str, end: int, sizes: Sizes) -> AckRun:
    run = AckRun(label, _subscription(mode))
    consumer = client.subscribe(
        TOPIC, run.subscription, consumer_type="Exclusive", initial_position="Earliest"
    )
    seen: set[int] = set()
    try:
        batches: list[list[Message]] = []
        t0 = time.perf_counter()
        deadline = t0 + sizes.max_variant_s + 30
        while run.received < end and time.perf_counter() < deadline:
            batch = consumer.batch_receive(BATCH, 2000)
            for msg in batch:
                off = msg.message_id.offset
                run.duplicates += off in seen
                seen.add(off)
            run.received += len(batch)
            if batch:
                batches.append(batch)
        receive_s = time.perf_counter() - t0
        _timed_acks(
            run,
            batches,
            sizes,
            lambda batch: _ack_batch(client, consumer, mode, batch, run),
            lambda msg: msg.message_id.offset,
        )
        # Durability: transactions are durable once commit() returned (overlapped ones: once the last
        # commits in flight returned, timed as the durability wait); plain acks once the cursor commit
        # (a background thread, every 100 ms) has reached Kafka.
        if mode == "txn_overlap":
            t0 = time.perf_counter()
            _drain_commits(run)
            run.durable_wait_s = time.perf_counter() - t0
            _abort_ahead(run)
        if mode in ("txn", "txn_overlap"):
            run.durable = run.errors == 0
        else:
            run.durable, run.committed_offset, run.durable_wait_s = offsets.wait_for(
                run.subscription, TOPIC, run.last_offset + 1, sizes.durable_timeout_s
            )
        run.loop_s = _loop_s(receive_s, run, end)
        run.complete = run.received >= end and len(seen) == end and run.errors == 0
        if mode in ("txn", "txn_overlap"):
            # Not timed: the consumer applies the commit outcomes to its cursor, which is then committed
            # to the group like plain acks. Check that it gets there.
            ok, committed, waited = offsets.wait_for(
                run.subscription, TOPIC, run.last_offset + 1, sizes.durable_timeout_s
            )
            run.committed_offset = committed
            run.extra["cursor_committed_after_txns"] = ok
            run.durable = run.durable and ok  # acks that never reach the cursor do not count
            run.extra["cursor_commit_wait_s"] = waited
        stats = consumer.stats()
        run.extra["consumer_stats"] = stats
    finally:
        consumer.close()
    return run


def _loop_s(receive_s: float, run: AckRun, end: int) -> float:
    """The receive + ack time of the timed batches: their share of the receive phase, their acks and
    the durability wait (what an application that receives and acks would spend on them)."""
    share = run.acked / end if end else 0.0
    return receive_s * share + run.ack_s + run.durable_wait_s


# ---------------------------------------------------------------------------------------------- Kafka
def _kafka(
    bootstrap: str, offsets: GroupOffsets, mode: KafkaMode, label: str, end: int, sizes: Sizes
) -> AckRun:
    run = AckRun(label, _subscription(f"kafka-{mode}"))
    commit_errors: list[str] = []

    def on_commit(err: Any, partitions: list[TopicPartition]) -> None:
        if err is not None:
            commit_errors.append(str(err))

    conf = _kafka_conf(bootstrap, run.subscription)
    if mode == "async1":
        conf["on_commit"] = on_commit  # async commit results arrive here (served by poll/consume)
    consumer = KafkaConsumer(conf)
    seen: set[int] = set()
    try:
        consumer.subscribe([TOPIC])
        batches: list[list[KafkaMessage]] = []
        t0 = time.perf_counter()
        deadline = t0 + sizes.max_variant_s + 30
        while run.received < end and time.perf_counter() < deadline:
            msgs: list[KafkaMessage] = consumer.consume(BATCH, 2.0)
            batch = [m for m in msgs if m.error() is None]
            run.errors += len(msgs) - len(batch)
            for m in batch:
                off = int(m.offset() or 0)
                run.duplicates += off in seen
                seen.add(off)
            run.received += len(batch)
            if batch:
                batches.append(batch)
        receive_s = time.perf_counter() - t0

        def commit(batch: list[KafkaMessage]) -> None:
            if mode == "sync100":
                consumer.commit(message=batch[-1], asynchronous=False)
                run.ack_calls += 1
            else:
                for m in batch:
                    consumer.commit(message=m, asynchronous=True)
                run.ack_calls += len(batch)

        _timed_acks(run, batches, sizes, commit, lambda m: int(m.offset() or 0))
        # Synchronous commits are durable when they return; async ones when the group shows them. Both
        # are checked the same way (for sync100 the wait is one AdminClient round trip).
        t0 = time.perf_counter()
        if mode == "async1":
            consumer.poll(0)  # serve commit callbacks, as an application's poll loop would
        run.durable, run.committed_offset, waited = offsets.wait_for(
            run.subscription, TOPIC, run.last_offset + 1, sizes.durable_timeout_s
        )
        run.durable_wait_s = (time.perf_counter() - t0) if mode == "async1" else 0.0
        run.extra["durable_check_s"] = waited
        run.loop_s = _loop_s(receive_s, run, end)
        consumer.poll(0)
        run.errors += len(commit_errors)
        if commit_errors:
            run.extra["commit_errors"] = commit_errors[:5]
        run.complete = run.received >= end and len(seen) == end and run.errors == 0
    finally:
        consumer.close()
    return run


def _kafka_conf(bootstrap: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": "pulsar-txn-bench",
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "partition.assignment.strategy": "range",
    }


# ---------------------------------------------------------------------------------------------- run
def _prepare(client: Client, n: int) -> dict[str, Any]:
    """``n`` x 1 KB plain sends with our Producer; all acknowledged by Kafka before returning."""
    producer = client.create_producer(TOPIC)
    t0 = time.perf_counter()
    futures: list[Future[MessageId]] = [producer.send_async(PAYLOAD) for _ in range(n)]
    errors = 0
    for fut in futures:
        try:
            fut.result(60)
        except PulsarTxnError:
            errors += 1
    return {"messages": n, "errors": errors, "seconds": time.perf_counter() - t0}


# variant key -> (label, what runs it). Ours and Kafka alternate; plain individual runs first and last.
ORDER = (
    "plain_individual",
    "kafka_sync100",
    "plain_cumulative",
    "txn100",
    "txn100_overlap",
    "kafka_async1",
    "plain_individual_2",
)


def _measure(quick: bool, bootstrap: str, workdir: Path) -> dict[str, Any]:
    sizes = QUICK if quick else DEFAULT
    raw: dict[str, Any] = {"quick": quick, "sizes": sizes.__dict__, "bootstrap": bootstrap, "batch": BATCH}
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
    # The embedded broker's client settings (LocalBroker.kafka_config, as Client.embedded uses): its
    # idle gate stops a caught-up subscription from fetching without pause while the variant acks
    # (this broker answers empty fetches at once; Apache Kafka holds them). Kafka's own consumers
    # below have no such gate.
    kafka = KafkaConfig(
        bootstrap_servers=bootstrap,
        request_timeout_ms=30_000,
        idle_fetch_backoff_ms=LocalBroker.IDLE_FETCH_BACKOFF_MS,
    )
    offsets = GroupOffsets(bootstrap)
    # The transaction-buffer service is off: this suite writes no transactional data, and its scans of
    # the data topic would only compete for the cores. Pending acks do not need it.
    with CoordinatorProcess(bootstrap, workdir, tb_service_enabled=False) as coord:
        raw["coordinator_config"] = coord.coordinator
        assert coord.proc is not None
        probes = Probes(workdir, coord.proc.pid)
        client = Client(coord.url, kafka=kafka, num_tcs=coord.num_tcs)
        try:
            client.create_topic(TOPIC, 1)
            raw["prepare"] = step(
                f"write {sizes.messages:,} x 1 KB messages (our Producer)",
                lambda: _prepare(client, sizes.messages),
            )
            end = end_offsets(kafka, [(TOPIC, 0)])[(TOPIC, 0)]
            raw["end_offset"] = end
            runners: dict[str, tuple[str, Callable[[], AckRun]]] = {
                "plain_individual": (
                    "ours: plain individual acks",
                    lambda: _ours(client, offsets, "individual", "plain individual", end, sizes),
                ),
                "plain_individual_2": (
                    "ours: plain individual acks, again",
                    lambda: _ours(client, offsets, "individual", "plain individual (again)", end, sizes),
                ),
                "plain_cumulative": (
                    f"ours: plain cumulative ack every {BATCH}",
                    lambda: _ours(client, offsets, "cumulative", "plain cumulative", end, sizes),
                ),
                "txn100": (
                    f"ours: {BATCH} acks per transaction, commit",
                    lambda: _ours(client, offsets, "txn", "txn acks", end, sizes),
                ),
                "txn100_overlap": (
                    f"ours: {BATCH} acks per transaction, commits overlapped",
                    lambda: _ours(client, offsets, "txn_overlap", "txn acks, overlapped", end, sizes),
                ),
                "kafka_sync100": (
                    f"Kafka consumer: sync commit every {BATCH}",
                    lambda: _kafka(bootstrap, offsets, "sync100", "Kafka sync commit/100", end, sizes),
                ),
                "kafka_async1": (
                    "Kafka consumer: async commit per message",
                    lambda: _kafka(bootstrap, offsets, "async1", "Kafka async commit/1", end, sizes),
                ),
            }
            variants: dict[str, dict[str, Any]] = {}
            for key in ORDER:
                label, fn = runners[key]
                result, cpu = probes.measure(functools.partial(step, label, fn))
                result.cpu = cpu
                variants[key] = result.summary()
            raw["variants"] = variants

            # The #4 target's two variants back to back, the order alternating: each round gives one
            # ratio (bench._common.paired_ratios), so the machine's drift between variants cancels.
            def paired(i: int, key: str) -> dict[str, Any]:
                label, fn = runners[key]
                title = f"paired round {i + 1}/{sizes.pair_rounds}: {label}"
                return probes.measure(functools.partial(step, title, fn))[0].summary()

            raw["target_rounds"] = run_rounds(PAIRED, sizes.pair_rounds, paired)
            raw["coordinator_stats"] = coord.stats()
        finally:
            client.close()
    raw["machine"]["busy_after_pct"] = wait_until_quiet(BUSY_PCT, 0.0)[0]
    return raw


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def _rate(v: dict[str, Any]) -> str:
    return fmt(v["acks_per_s"], " acks/s", 0)


def _rows(raw: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []
    v = raw["variants"]

    def row(metric: str, measured: str, baseline: str = "", target: str = "", met: str = "") -> None:
        rows.append([metric, measured, baseline, target, met])

    def notes(x: dict[str, Any]) -> str:
        bits = [f"{x['acked']:,} acks in {x['timed_s']:.3f} s"]
        if x["durable_wait_s"] >= 0.0005:
            bits.append(f"incl. {x['durable_wait_s'] * 1000:.0f} ms durability wait")
            bits.append(f"calls alone {fmt(x['acks_per_s_without_durable_wait'], '/s', 0)}")
        if not x["complete"] or not x["durable"]:
            bits.append("INCOMPLETE" if not x["complete"] else "NOT DURABLE")
        return "; ".join(bits)

    i1, i2 = v["plain_individual"], v["plain_individual_2"]
    plain = max(i1["acks_per_s"], i2["acks_per_s"])
    ks, ka = v["kafka_sync100"], v["kafka_async1"]
    kafka_names = f"Kafka sync commit/{BATCH}: {_rate(ks)}; Kafka async commit/msg: {_rate(ka)}"
    row(
        "plain individual acks (best of 2)",
        f"{fmt(plain, ' acks/s', 0)}"
        f" ({fmt(i1['acks_per_s'], '', 0)} first, {fmt(i2['acks_per_s'], '', 0)} last)",
        kafka_names,
    )
    for x in (i1, i2):
        row(f"  {x['label']}", notes(x))
    cu = v["plain_cumulative"]
    row(
        f"plain cumulative ack every {BATCH}",
        f"{_rate(cu)} ({notes(cu)})",
        f"Kafka sync commit/{BATCH}: {_rate(ks)}",
    )

    def target_row(label: str, x: dict[str, Any], detail: str = "") -> None:
        share = x["acks_per_s"] / plain if plain else math.nan
        row(
            label,
            f"{_rate(x)} ({fmt(share * 100, '%', 0)} of plain individual{detail})",
            f"plain individual (ours): {fmt(plain, ' acks/s', 0)}",
            f">= {TARGET_SHARE:.0%} of plain individual",
            _met(share >= TARGET_SHARE and x["complete"] and x["durable"]),
        )

    tx, to = v["txn100"], v["txn100_overlap"]
    target_row(f"txn acks ({BATCH} per txn, commit)", tx)
    target_row(f"txn acks ({BATCH} per txn), commits overlapped", to, f"; {notes(to)}")
    row(
        f"  how: {BEGUN_AHEAD} txns begun ahead (build_async), one acknowledge(list) call, commit_async,"
        f" <= {OVERLAP_WINDOW} commits in flight",
        f"{to['txns']:,} txns timed; p50 {fmt(to['batch_ms']['p50'], ' ms', 2)} per batch",
    )
    row(
        "  per txn: begin + 100 acks + commit",
        f"p50 {fmt(tx['batch_ms']['p50'], ' ms', 2)} / p99 {fmt(tx['batch_ms']['p99'], ' ms', 2)}"
        f" ({tx['txns']:,} txns timed)",
        f"Kafka sync commit/{BATCH}: p50 {fmt(ks['batch_ms']['p50'], ' ms', 2)}"
        f" / p99 {fmt(ks['batch_ms']['p99'], ' ms', 2)}",
    )
    row(
        "  cursor committed after txns (not timed)",
        f"{'yes' if tx['extra'].get('cursor_committed_after_txns') else 'NO'}"
        f" (committed offset {tx['committed_offset']}, end {raw['end_offset']});"
        f" overlapped: {'yes' if to['extra'].get('cursor_committed_after_txns') else 'NO'}",
    )
    rounds = raw["target_rounds"]
    acks = paired_ratios(rounds, PAIRED[1], PAIRED[0], "acks_per_s")
    loops = paired_ratios(rounds, PAIRED[1], PAIRED[0], "receive_and_ack_per_s")
    good = all(r[k]["complete"] and r[k]["durable"] for r in rounds for k in PAIRED)
    row(
        "#4 target, paired rounds: txn acks overlapped vs plain individual, back to back",
        f"median {fmt_ratio(acks)} of plain individual",
        f"acks/s per round: txn {fmt_rounds(rounds, PAIRED[1], 'acks_per_s')};"
        f" plain {fmt_rounds(rounds, PAIRED[0], 'acks_per_s')}",
        f">= {TARGET_SHARE:.0%} of plain individual",
        _met(acks["median"] >= TARGET_SHARE and good),
    )
    row(
        "  same rounds, receive + ack loop (what a consumer sees, as pulsar-perf reports it)",
        f"median {fmt_ratio(loops)} of plain individual",
        f"msg/s per round: txn {fmt_rounds(rounds, PAIRED[1], 'receive_and_ack_per_s')};"
        f" plain {fmt_rounds(rounds, PAIRED[0], 'receive_and_ack_per_s')}",
    )
    for x in (ks, ka):
        row(f"Kafka: {x['label']}", f"{_rate(x)} ({notes(x)})", "(baseline)")
    for key in ORDER:
        x = v[key]
        row(
            f"  receive + ack: {x['label']}",
            f"{fmt(x['receive_and_ack_per_s'], ' msg/s', 0)} (timed part, {x['loop_s']:.2f} s wall)",
        )
    return rows


def _cpu_rows(raw: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key in ORDER:
        cpu = raw["variants"][key]["cpu"]

        def total(prefix: str, cpu: dict[str, float] = cpu) -> str:
            vals = [val for k, val in cpu.items() if k.startswith(prefix)]
            return fmt(sum(vals), "%", 0) if vals else "-"

        rows.append(
            [
                key,
                fmt(cpu.get("machine_pct", math.nan), "%", 0),
                total("broker"),
                total("coordinator"),
                total("bench"),
            ]
        )
    return rows


def run(quick: bool) -> int:
    raw, path = run_suite("acks", quick, _measure, _rows)
    cores = raw["machine"]["cpus"]
    print(f"\nCPU during each variant (machine: % of all {cores} cores; processes: % of one core):")
    print(format_table(["variant", "machine", "broker", "coordinator", "bench process"], _cpu_rows(raw)))
    m = raw["machine"]
    print(
        f"\nmachine busy before: {m['busy_before_pct']:.0f}% (checked for {m['waited_for_quiet_s']:.0f}s),"
        f" after: {m['busy_after_pct']:.0f}%"
        + ("  WARNING: busy machine, numbers are low" if m["busy_before_pct"] > BUSY_PCT else "")
    )
    print(
        f"timed: all messages received first (not timed), then the ack phase of every batch of {BATCH} back"
        " to back (ack/commit calls; for txns also begin and commit) after a warm-up of"
        f" {raw['sizes']['warmup_batches']} batches, plus one wait at the end until the acks are durable"
        " (group committed offset read by an AdminClient; overlapped txns: their last commits);"
        " coordinator with tb_service_enabled=false"
    )
    errors = {k: x["errors"] for k, x in raw["variants"].items() if x.get("errors")}
    if errors:
        print(f"\nerrors during the run: {errors}")
    print(f"\nraw numbers: {path}  (total {raw['total_runtime_s']:.0f}s)")
    return 0
