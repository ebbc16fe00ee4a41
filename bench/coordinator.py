"""``python -m bench coordinator``: TC throughput and latency against Kafka baselines, one broker.

Phases (all on one fresh embedded broker, every process stopped at the end):
  1. coordinator (4 TCs, static ownership, log batching on): closed-loop begin -> add 1 partition ->
     commit with 1, 8 and 64 clients, then open-loop 200 txn/s;
  2. the same coordinator config with ``log_batch_enabled: false``: 64 clients again;
  3. Kafka baselines: produce round trip (acks=all) and the transactional producer;
  4. a fresh coordinator: open 100,000 transactions, never end them, RSS before/after.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import (
    CoordinatorProcess,
    CpuProbe,
    ensure_topic,
    find_pids,
    fmt,
    format_table,
    machine_busy_pct,
    percentile,
    run_suite,
)
from bench._kafka import SeqResult, produce_rtt, transactional_producer
from bench._load import LoadResult, LoadSpec, run_load, split

CLIENTS = (1, 8, 64)
PACED_RATE = 200.0
PACED_TASKS = 8
OPEN_TXNS = 100_000
OPEN_INFLIGHT = 500
OPEN_TTL_MS = 600_000
DATA_PARTITIONS = 8
MB = 1024 * 1024


def _summary(r: LoadResult) -> dict[str, Any]:
    return {
        "txn_per_s": r.completed / r.window_s if r.window_s else 0.0,
        "completed": r.completed,
        "window_s": r.window_s,
        "samples": len(r.end_ms),
        "commit_ms": {p: percentile(r.end_ms, q) for p, q in (("p50", 50), ("p99", 99), ("max", 100))},
        "txn_ms": {p: percentile(r.txn_ms, q) for p, q in (("p50", 50), ("p99", 99), ("max", 100))},
        "late_ms": {p: percentile(r.late_ms, q) for p, q in (("p50", 50), ("p99", 99))} if r.late_ms else {},
        "errors": r.errors,
        "cpu": r.cpu,
    }


def _seq_summary(r: SeqResult) -> dict[str, Any]:
    return {
        "per_s": r.per_s,
        "ops": r.ops,
        "window_s": r.window_s,
        "p50_ms": percentile(r.latency_ms, 50),
        "p99_ms": percentile(r.latency_ms, 99),
        "errors": r.errors,
    }


def _probe(coord: CoordinatorProcess) -> CpuProbe:
    assert coord.proc is not None
    pids = {"coordinator": coord.proc.pid}
    pids.update(
        {f"broker{i}": pid for i, pid in enumerate(find_pids(str(coord.config_file.parent / "broker")))}
    )
    return CpuProbe(pids)


def _closed(coord: CoordinatorProcess, parts: list[str], clients: int, warm: float, dur: float) -> LoadResult:
    specs = [
        LoadSpec(coord.url, coord.num_tcs, "closed", n, tuple(parts), warm, dur, max_txns=int(dur * 20_000))
        for n in split(clients)
    ]
    return run_load(specs, timeout=warm + dur + 30, probe=_probe(coord))


def _paced(coord: CoordinatorProcess, parts: list[str], warm: float, dur: float) -> LoadResult:
    per_proc = PACED_RATE / 2
    specs = [
        LoadSpec(
            coord.url,
            coord.num_tcs,
            "paced",
            n,
            tuple(parts),
            warm,
            dur,
            max_txns=int((warm + dur) * per_proc) + 1,
            rate=per_proc,
            phase_s=i / PACED_RATE,
        )
        for i, n in enumerate(split(PACED_TASKS))
    ]
    return run_load(specs, timeout=warm + dur + 30, probe=_probe(coord))


def _memory(coord: CoordinatorProcess, total: int) -> dict[str, Any]:
    before = coord.rss_bytes()
    specs = [
        LoadSpec(
            coord.url, coord.num_tcs, "open", n, max_txns=total // 2, ttl_ms=OPEN_TTL_MS, time_limit_s=100
        )
        for n in split(OPEN_INFLIGHT)
    ]
    r = run_load(specs, timeout=130)
    time.sleep(1.0)
    after = coord.rss_bytes()
    return {
        "opened": r.opened,
        "requested": total,
        "open_seconds": r.elapsed_s,
        "open_per_s": r.opened / r.elapsed_s if r.elapsed_s else 0.0,
        "rss_before_mb": before / MB,
        "rss_after_mb": after / MB,
        "bytes_per_txn": (after - before) / r.opened if r.opened else 0.0,
        "errors": r.errors,
    }


def _step(label: str, fn: Callable[[], Any]) -> Any:
    print(f"  {label} ...", end="", flush=True)
    t0 = time.monotonic()
    value = fn()
    print(f" {time.monotonic() - t0:.1f}s", flush=True)
    return value


def _measure(quick: bool, bootstrap: str, workdir: Path) -> dict[str, Any]:
    warm, dur = 1.0, (2.0 if quick else 5.0)
    parts = ensure_topic(bootstrap, "benchdata", DATA_PARTITIONS)
    ensure_topic(bootstrap, "benchbaseline", 1)
    raw: dict[str, Any] = {"quick": quick, "warmup_s": warm, "duration_s": dur, "bootstrap": bootstrap}
    raw["machine"] = {"cpus": os.cpu_count(), "busy_before_pct": machine_busy_pct()}
    if raw["machine"]["busy_before_pct"] > 20:
        print(
            f"  WARNING: the machine is already {raw['machine']['busy_before_pct']:.0f}% busy; "
            "numbers will be low",
            flush=True,
        )
    with CoordinatorProcess(bootstrap, workdir) as coord:
        raw["coordinator_config"] = coord.coordinator
        for n in CLIENTS:
            load = functools.partial(_closed, coord, parts, n, warm, dur)
            raw[f"closed_{n}"] = _summary(_step(f"{n} client(s), batched", load))
        raw["paced_200"] = _summary(_step("200 txn/s open loop", lambda: _paced(coord, parts, warm, dur)))
        raw["stats_batched"] = coord.stats()
    with CoordinatorProcess(bootstrap, workdir, log_batch_enabled=False) as coord:
        raw["closed_64_unbatched"] = _summary(
            _step("64 clients, unbatched", lambda: _closed(coord, parts, 64, warm, dur))
        )
        raw["stats_unbatched"] = coord.stats()
    raw["kafka_produce"] = _seq_summary(
        _step("Kafka produce RTT", lambda: produce_rtt(bootstrap, "benchbaseline", warm, dur))
    )
    raw["kafka_txn_producer"] = _seq_summary(
        _step(
            "Kafka transactional producer",
            lambda: transactional_producer(bootstrap, "benchbaseline", warm, dur),
        )
    )
    with CoordinatorProcess(bootstrap, workdir) as coord:
        raw["memory"] = _step(f"{OPEN_TXNS:,} open transactions", lambda: _memory(coord, OPEN_TXNS))
    return raw


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def _ms(pair: dict[str, float]) -> str:
    return f"{fmt(pair['p50'])} / {fmt(pair['p99'])} ms"


def _rows(raw: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []

    def row(metric: str, measured: str, baseline: str = "", target: str = "", met: str = "") -> None:
        rows.append([metric, measured, baseline, target, met])

    for n in CLIENTS:
        s = raw[f"closed_{n}"]
        row(f"txn/s @{n} client{'s' if n > 1 else ''}", fmt(s["txn_per_s"], "/s"))
        row(f"  commit p50/p99 @{n}", _ms(s["commit_ms"]))
        row(f"  whole txn p50/p99 @{n}", _ms(s["txn_ms"]))
    b64, u64 = raw["closed_64"], raw["closed_64_unbatched"]
    row("txn/s @64 unbatched", fmt(u64["txn_per_s"], "/s"), f"batched @64: {fmt(b64['txn_per_s'], '/s')}")
    row("  commit p50/p99 @64 unbatched", _ms(u64["commit_ms"]), f"batched @64: {_ms(b64['commit_ms'])}")
    paced = raw["paced_200"]
    p99 = paced["commit_ms"]["p99"]
    row(
        f"commit p99 @{PACED_RATE:.0f} txn/s offered",
        f"{fmt(p99)} ms (achieved {fmt(paced['txn_per_s'], '/s')})",
        "",
        "<= 20 ms",
        _met(p99 <= 20.0),
    )
    single, ktx = raw["closed_1"]["txn_per_s"], raw["kafka_txn_producer"]["per_s"]
    ratio = single / ktx if ktx else math.nan
    row(
        "single sequential client txn/s",
        f"{fmt(single, '/s')} ({fmt(ratio * 100, '%', 0)} of baseline)",
        f"Kafka txn producer: {fmt(ktx, '/s')}",
        ">= 50% of baseline",
        _met(ratio >= 0.5 if ktx else None),
    )
    best = max(raw[k]["txn_per_s"] for k in ("closed_1", "closed_8", "closed_64", "closed_64_unbatched"))
    row("best txn/s", fmt(best, "/s"), "", ">= 2,000/s", _met(best >= 2000))
    mem = raw["memory"]
    row(
        f"RSS with {mem['opened']:,} open txns",
        f"{fmt(mem['rss_after_mb'], ' MB')} (before {fmt(mem['rss_before_mb'], ' MB')})",
        "",
        "< 300 MB",
        _met(mem["rss_after_mb"] < 300 if mem["opened"] >= mem["requested"] else None),
    )
    kp = raw["kafka_produce"]
    rtt = f"{fmt(kp['p50_ms'], digits=2)} / {fmt(kp['p99_ms'], digits=2)} ms"
    row("Kafka produce RTT p50/p99", "", f"produce acks=all: {rtt} ({fmt(kp['per_s'], '/s')} sequential)")
    return rows


def _cpu_rows(raw: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key in ("closed_1", "closed_8", "closed_64", "closed_64_unbatched", "paced_200"):
        cpu = raw[key]["cpu"]

        def total(prefix: str, cpu: dict[str, float] = cpu) -> str:
            return fmt(sum(v for k, v in cpu.items() if k.startswith(prefix)), "%", 0)

        rows.append(
            [
                key,
                fmt(cpu.get("machine_pct", math.nan), "%", 0),
                total("coordinator"),
                total("broker"),
                total("client"),
            ]
        )
    return rows


def run(quick: bool) -> int:
    raw, path = run_suite("coordinator", quick, _measure, _rows)
    cores = raw["machine"]["cpus"]
    print(f"\nCPU during each point (machine: % of all {cores} cores; processes: % of one core):")
    print(format_table(["point", "machine", "coordinator", "broker", "clients"], _cpu_rows(raw)))
    errors = {k: v["errors"] for k, v in raw.items() if isinstance(v, dict) and v.get("errors")}
    if errors:
        print(f"\nerrors during the run: {errors}")
    print(f"\nraw numbers: {path}  (total {raw['total_runtime_s']:.0f}s)")
    return 0
