"""Shared benchmark plumbing: embedded broker, coordinator subprocess, percentiles, table printing."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psutil

from kafka_store import KafkaConfig, LocalBroker, TopicAdmin

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"


@contextmanager
def embedded_broker() -> Iterator[tuple[str, Path]]:
    """A fresh LocalBroker in a temp dir: yields (bootstrap servers, work dir); always stopped."""
    workdir = Path(tempfile.mkdtemp(prefix="pulsar-txn-bench-"))
    broker = LocalBroker(workdir / "broker")
    try:
        yield broker.start(), workdir
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _user_topics(admin: TopicAdmin) -> set[str]:
    """The broker's topics apart from internal ones (``__``-prefixed: offsets, coordinator logs, TB
    snapshots)."""
    return {t for t in admin.list_topics() if not t.startswith("__")}


@contextmanager
def scratch_topics(bootstrap: str) -> Iterator[None]:
    """Delete, on the way out, the non-internal topics created inside (a point's data topics and the
    ones derived from them, such as pending-ack topics). The embedded broker keeps its whole store in
    one file that it rewrites after every change, at about half a core once the store holds a few
    hundred MB (docs/broker-quirks.md): data one point leaves behind would tax every point after it,
    so each point starts from the same store."""
    admin = TopicAdmin(KafkaConfig(bootstrap_servers=bootstrap, request_timeout_ms=30_000))
    before = _user_topics(admin)
    try:
        yield
    finally:
        admin.delete_topics(sorted(_user_topics(admin) - before))


def ensure_topic(bootstrap: str, name: str, partitions: int) -> list[str]:
    """Create ``name``; return Pulsar-style partition names (``name-partition-N``)."""
    TopicAdmin(KafkaConfig(bootstrap_servers=bootstrap, request_timeout_ms=15_000)).ensure_topic(
        name, partitions
    )
    return [f"{name}-partition-{i}" for i in range(partitions)]


class CoordinatorProcess:
    """``python -m pulsar_txn.cli coordinator`` as a child process with its own topics and group."""

    def __init__(self, bootstrap: str, workdir: Path, **overrides: Any) -> None:
        uid = uuid.uuid4().hex[:8]
        self.coordinator: dict[str, Any] = {
            "log_topic": f"__bench_log_{uid}",
            "owners_topic": f"__bench_owners_{uid}",
            "coordinator_group": f"bench_{uid}",
            "num_tcs": 4,
            "ownership": "static",
            "static_tc_ids": [0, 1, 2, 3],
            "port": 0,
            "admin_port": 0,
            **overrides,
        }
        self.config_file = workdir / f"coord-{uid}.json"
        self.config_file.write_text(
            json.dumps({"kafka": {"bootstrap_servers": bootstrap}, "coordinator": self.coordinator})
        )
        self.ready_file = self.config_file.with_suffix(".ready")
        self.log_file = self.config_file.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}

    @property
    def num_tcs(self) -> int:
        return int(self.coordinator["num_tcs"])

    @property
    def url(self) -> str:
        return str(self.info["url"])

    def start(self, timeout: float = 60.0) -> CoordinatorProcess:
        cmd = [sys.executable, "-m", "pulsar_txn.cli", "coordinator"]
        cmd += ["--config", str(self.config_file), "--ready-file", str(self.ready_file)]
        with self.log_file.open("ab") as logf:
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_file.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"coordinator did not become ready (rc={self.proc.returncode}): {tail}")
            time.sleep(0.05)
        time.sleep(0.05)  # the ready file is written in one go, but be safe about a partial read
        self.info = json.loads(self.ready_file.read_text())
        return self

    def rss_bytes(self) -> int:
        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def stats(self) -> dict[str, Any]:
        """The coordinator's admin stats (empty dict if unavailable)."""
        admin_url = self.info.get("admin_url")
        if not admin_url:
            return {}
        try:
            with urllib.request.urlopen(
                f"{admin_url}/admin/v2/transactions/coordinatorStats", timeout=5
            ) as r:
                data: dict[str, Any] = json.loads(r.read())
                return data
        except (OSError, ValueError):
            return {}

    def stop(self, timeout: float = 15.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> CoordinatorProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def find_pids(marker: str) -> list[int]:
    """Pids of processes whose command line mentions ``marker`` (e.g. the broker's data dir)."""
    pids = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or ()):
            pids.append(proc.pid)
    return pids


class CpuProbe:
    """CPU use over a window: whole machine (% of all cores) and named processes (% of one core)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._t0 = 0.0
        self._start: dict[str, float] = {}

    @staticmethod
    def _cpu(proc: psutil.Process) -> float:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            return math.nan
        return float(times.user + times.system)

    def add(self, name: str, pid: int) -> None:
        self._procs[name] = psutil.Process(pid)

    def start(self) -> None:
        psutil.cpu_percent(None)
        self._t0 = time.monotonic()
        self._start = {name: self._cpu(p) for name, p in self._procs.items()}

    def stop(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        out = {"machine_pct": float(psutil.cpu_percent(None))}
        for name, proc in self._procs.items():
            out[f"{name}_pct"] = (self._cpu(proc) - self._start[name]) / elapsed * 100
        return out


def machine_busy_pct(seconds: float = 1.0) -> float:
    """How busy the machine is right now (% of all cores), before we add any load."""
    return float(psutil.cpu_percent(seconds))


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of ``samples``; NaN when empty."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def paired_ratios(rounds: Sequence[dict[str, Any]], num: str, den: str, key: str) -> dict[str, float]:
    """``rounds[i][num][key] / rounds[i][den][key]`` for each round (a round measures both side by side,
    back to back) summarised as median, min and max. On this machine the speed drifts by +-30% over
    minutes, and a ratio of two best-of figures taken minutes apart swings with it (session 17: the same
    code gave 70% and 97% for #3's produce target); ratios of adjacent measurements, then their median,
    do not."""
    ratios = [
        r[num][key] / r[den][key] for r in rounds if r.get(num, {}).get(key) and r.get(den, {}).get(key)
    ]
    if not ratios:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}


def run_rounds(
    keys: Sequence[str], count: int, measure: Callable[[int, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``count`` rounds of ``measure(round, key)`` for every key, back to back, the order rotated one
    step each round (so no key always runs first): the rounds ``paired_ratios`` summarises."""
    rounds: list[dict[str, Any]] = []
    for i in range(count):
        shift = i % len(keys)
        order = [*keys[shift:], *keys[:shift]]
        entry: dict[str, Any] = {"order": order}
        for key in order:
            entry[key] = measure(i, key)
        rounds.append(entry)
    return rounds


def fmt_rounds(rounds: Sequence[dict[str, Any]], key: str, what: str) -> str:
    """``key``'s ``what`` in each round, e.g. ``56,236 / 66,153 / 61,635``."""
    return " / ".join(fmt(r[key][what], "", 0) for r in rounds)


def fmt_ratio(summary: dict[str, float]) -> str:
    """``82% (76-91%, 5 rounds)`` for a ``paired_ratios`` summary."""
    if not summary["n"]:
        return "n/a"
    return (
        f"{summary['median'] * 100:.0f}% ({summary['min'] * 100:.0f}-{summary['max'] * 100:.0f}%,"
        f" {summary['n']} rounds)"
    )


def fmt(value: float, unit: str = "", digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table with aligned columns separated by `` | ``."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def _json_safe(value: Any) -> Any:
    """NaN/inf (no samples) become null, so the file is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}-latest.json"
    text = json.dumps(_json_safe(data), indent=2, sort_keys=True, default=str, allow_nan=False)
    path.write_text(text + "\n")
    return path


def wait_until_quiet(
    threshold_pct: float = 20.0, max_wait_s: float = 60.0, sample_s: float = 1.0
) -> tuple[float, float]:
    """Sample machine CPU until it is below ``threshold_pct`` or ``max_wait_s`` has passed.

    Returns (the last sample in % of all cores, seconds waited). The caller warns if still busy.
    """
    started = time.monotonic()
    busy = machine_busy_pct(sample_s)
    while busy > threshold_pct and time.monotonic() - started + sample_s <= max_wait_s:
        busy = machine_busy_pct(sample_s)
    return busy, time.monotonic() - started


T = TypeVar("T")


class Probes:
    """CPU of the machine, the broker, an optional coordinator and this process over one measurement."""

    def __init__(self, workdir: Path, coordinator_pid: int | None = None) -> None:
        self.pids = {f"broker{i}": pid for i, pid in enumerate(find_pids(str(workdir / "broker")))}
        if coordinator_pid is not None:
            self.pids["coordinator"] = coordinator_pid
        self.pids["bench"] = os.getpid()

    def measure(self, fn: Callable[[], T]) -> tuple[T, dict[str, float]]:
        probe = CpuProbe(self.pids)
        probe.start()
        value = fn()
        return value, probe.stop()


def step(label: str, fn: Callable[[], T]) -> T:
    """Run one labelled step, printing how long it took."""
    print(f"  {label} ...", end="", flush=True)
    t0 = time.monotonic()
    value = fn()
    print(f" {time.monotonic() - t0:.1f}s", flush=True)
    return value


def run_suite(
    name: str,
    quick: bool,
    measure: Callable[[bool, str, Path], dict[str, Any]],
    rows: Callable[[dict[str, Any]], list[list[str]]],
) -> tuple[dict[str, Any], Path]:
    """The common frame of a suite: a fresh broker, the measurements, the JSON results and the main
    table. Returns the raw results and where they were written (suites print their extras after)."""
    started = time.monotonic()
    print(f"{name} benchmark ({'quick' if quick else 'default'}):", flush=True)
    with embedded_broker() as (bootstrap, workdir):
        raw = measure(quick, bootstrap, workdir)
    raw["total_runtime_s"] = time.monotonic() - started
    path = write_results(name, raw)
    print()
    print(format_table(["metric", "measured", "baseline (named)", "target", "met?"], rows(raw)))
    if quick:
        print("quick run: too small to judge the targets by; the met? column is indicative only")
    return raw, path
