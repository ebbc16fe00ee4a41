"""Coordinator statistics, shaped like ``pulsar-admin transactions coordinator-stats``."""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LatencyWindow:
    """The last N samples (ms) for percentiles; cheap enough for every log append."""

    size: int = 4096
    samples: deque[float] = field(default_factory=deque)
    count: int = 0
    total_ms: float = 0.0

    def add(self, ms: float) -> None:
        self.count += 1
        self.total_ms += ms
        self.samples.append(ms)
        if len(self.samples) > self.size:
            self.samples.popleft()

    def snapshot(self) -> dict[str, float]:
        ordered = sorted(self.samples)

        def pct(p: float) -> float:
            if not ordered:
                return 0.0
            return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)

        return {
            "count": self.count,
            "sum_ms": round(self.total_ms, 3),
            "avg_ms": round(self.total_ms / self.count, 3) if self.count else 0.0,
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
            "max_ms": round(ordered[-1], 3) if ordered else 0.0,
        }


# Pulsar's buckets for a transaction's execution latency (open -> ended), in ms; one more counts the rest.
EXECUTION_LATENCY_BUCKETS_MS = (
    10, 20, 50, 100, 500, 1000, 5000, 15000, 30000, 60000, 300000, 1500000, 3000000
)  # fmt: skip


@dataclass
class LatencyBuckets:
    """Counts per bucket (not cumulative), as Pulsar's ``StatsBuckets``: bucket i counts latencies
    <= ``bounds[i]`` and above the bound before it; the last counts everything above the largest."""

    bounds: tuple[int, ...] = EXECUTION_LATENCY_BUCKETS_MS
    counts: list[int] = field(default_factory=list)
    total_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def add(self, ms: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, ms)] += 1
        self.total_ms += ms

    def snapshot(self) -> dict[str, int]:
        labels = [str(b) for b in self.bounds] + ["overflow"]
        return dict(zip(labels, self.counts, strict=True))


@dataclass
class TcCounters:
    created: int = 0
    committed: int = 0
    aborted: int = 0
    timed_out: int = 0
    append_log: LatencyWindow = field(default_factory=LatencyWindow)
    end_txn: LatencyWindow = field(default_factory=LatencyWindow)  # END_TXN received -> answered
    end_retries: int = 0
    read_backs: int = 0  # log writes that had to wait for the tail (a foreign record preceded them)
    execution_latency: LatencyBuckets = field(default_factory=LatencyBuckets)  # opened -> ended, ms

    def snapshot(self) -> dict[str, Any]:
        return {
            "created_count": self.created,
            "committed_count": self.committed,
            "aborted_count": self.aborted,
            "timeout_count": self.timed_out,
            "end_retry_count": self.end_retries,
            "read_back_count": self.read_backs,
            "append_log_latency": self.append_log.snapshot(),
            "end_txn_latency": self.end_txn.snapshot(),
            "execution_latency_buckets": self.execution_latency.snapshot(),
            "execution_latency_sum_ms": self.execution_latency.total_ms,
        }
