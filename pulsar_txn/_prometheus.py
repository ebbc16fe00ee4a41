"""Coordinator and transaction-buffer stats in Prometheus' text format (``GET /metrics``).

Pulsar's transaction metrics keep their names (``pulsar_txn_active_count``, ``pulsar_txn_*_total``,
``pulsar_txn_execution_latency_le_*`` per coordinator; ``pulsar_txn_tb_*`` per topic partition), so a
dashboard built for a Pulsar broker's transaction metrics reads ours. The rest are this project's own
(a ``pulsar_txn_`` prefix too). Rendered from the same stats dicts the JSON admin routes answer with,
so both always agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_Labels = tuple[tuple[str, str], ...]


@dataclass
class _Family:
    name: str
    kind: str  # counter, gauge, summary
    help: str
    samples: list[tuple[str, _Labels, float]] = field(default_factory=list)  # (suffix, labels, value)


class _Exposition:
    """Families in the order first named; each family's HELP/TYPE once, then its samples."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}

    def add(
        self, name: str, kind: str, help_text: str, value: Any, labels: _Labels = (), suffix: str = ""
    ) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return  # a stat missing or not a number (e.g. None before the first snapshot): no sample
        family = self._families.setdefault(name, _Family(name, kind, help_text))
        family.samples.append((suffix, labels, float(value)))

    def render(self) -> str:
        lines: list[str] = []
        for f in self._families.values():
            lines.append(f"# HELP {f.name} {f.help}")
            lines.append(f"# TYPE {f.name} {f.kind}")
            for suffix, labels, value in f.samples:
                lines.append(f"{f.name}{suffix}{_labels(labels)} {_number(value)}")
        return "\n".join(lines) + "\n"


def _labels(labels: _Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


# name, Pulsar's stat key, help: per coordinator (TC)
_TC_COUNTERS = (
    ("pulsar_txn_created_total", "created_count", "Transactions created."),
    ("pulsar_txn_committed_total", "committed_count", "Transactions committed."),
    ("pulsar_txn_aborted_total", "aborted_count", "Transactions aborted (timed out ones included)."),
    ("pulsar_txn_timeout_total", "timeout_count", "Transactions aborted because they timed out."),
    ("pulsar_txn_end_retry_total", "end_retry_count", "Retries of a marker or pending-ack outcome write."),
    ("pulsar_txn_read_back_total", "read_back_count", "Log writes confirmed by reading the log back."),
)
_TC_LATENCIES = (
    ("pulsar_txn_append_log_latency_ms", "append_log_latency", "Transaction log writes, ms (last 4096)."),
    ("pulsar_txn_end_txn_latency_ms", "end_txn_latency", "END_TXN requests, received to answered, ms."),
)
# per transaction-buffer partition
_TB_GAUGES = (
    ("pulsar_txn_tb_active_total", "ongoing_txn_size", "Ongoing transactions in the partition."),
    ("pulsar_txn_tb_aborted_txn_size", "aborted_txn_size", "Aborted transactions the filter keeps."),
    ("pulsar_txn_tb_max_read_position", "max_read_position", "Readers deliver nothing at or after it."),
    ("pulsar_txn_tb_last_snapshot_offset", "last_snapshot_offset", "Offset the last snapshot covers."),
    ("pulsar_txn_tb_last_snapshot_timestamp_ms", "last_snapshot_time", "When the last snapshot was written."),
)
_TB_COUNTERS = (
    ("pulsar_txn_tb_committed_total", "committed_txns", "Commit markers folded in."),
    ("pulsar_txn_tb_aborted_total", "aborted_txns", "Abort markers folded in."),
    ("pulsar_txn_tb_forged_markers_total", "forged_markers", "Markers ignored: authentication failed."),
    (
        "pulsar_txn_tb_forged_txn_messages_total",
        "forged_txn_messages",
        "Transaction messages skipped: authentication failed.",
    ),
    ("pulsar_txn_tb_corrupt_markers_total", "corrupt_markers", "Markers ignored: malformed."),
    ("pulsar_txn_tb_corrupt_txn_headers_total", "corrupt_txn_headers", "Records with a malformed TxnID."),
    (
        "pulsar_txn_tb_unknown_tc_records_total",
        "unknown_tc_records",
        "Records naming a TC that does not exist.",
    ),
    ("pulsar_txn_tb_late_messages_total", "late_messages", "Messages of ended transactions, discarded."),
    ("pulsar_txn_tb_recovery_failures_total", "recovery_failures", "Failed recoveries of the partition."),
)
_QUANTILES = (("0.5", "p50_ms"), ("0.99", "p99_ms"))


def render(coordinator: Mapping[str, Any], buffer: Mapping[str, Any] | None = None) -> str:
    """``coordinator``: ``CoordinatorService.stats()``; ``buffer``: ``TransactionBufferService.stats()``
    (None when the node runs no TB service)."""
    out = _Exposition()
    owned = coordinator.get("owned_tcs") or []
    out.add("pulsar_txn_coordinator_owned_tcs", "gauge", "TCs this coordinator instance serves.", len(owned))
    for tc_id, tc in sorted(coordinator.get("coordinators", {}).items(), key=lambda kv: int(kv[0])):
        _tc(out, (("coordinator_id", str(tc_id)),), tc)
    if buffer is not None:
        _buffer(out, buffer)
    return out.render()


def _tc(out: _Exposition, labels: _Labels, tc: Mapping[str, Any]) -> None:
    out.add(
        "pulsar_txn_tc_ready",
        "gauge",
        "1 while the TC serves requests.",
        int(tc.get("state") == "Ready"),
        labels,
    )
    out.add(
        "pulsar_txn_active_count", "gauge", "Transactions not yet ended.", tc.get("ongoing_txn_size"), labels
    )
    if tc.get("state") == "Ready":  # not known while recovering
        out.add(
            "pulsar_txn_low_watermark",
            "gauge",
            "Every transaction at or below it has ended.",
            tc.get("low_water_mark"),
            labels,
        )
    for name, key, help_text in _TC_COUNTERS:
        out.add(name, "counter", help_text, tc.get(key), labels)
    append = tc.get("append_log_latency") or {}
    out.add("pulsar_txn_append_log_total", "counter", "Transaction log writes.", append.get("count"), labels)
    for name, key, help_text in _TC_LATENCIES:
        _summary(out, name, help_text, tc.get(key) or {}, labels)
    buckets: Mapping[str, int] = tc.get("execution_latency_buckets") or {}
    for bound, count in buckets.items():
        # Pulsar's names: a count per bucket since start (not cumulative across buckets).
        out.add(
            f"pulsar_txn_execution_latency_le_{bound}",
            "gauge",
            f"Transactions that ended within {bound} ms of opening (above the bucket before)."
            if bound != "overflow"
            else "Transactions that ended more than the largest bucket after opening.",
            count,
            labels,
        )
    _histogram(
        out,
        "pulsar_txn_execution_latency_ms",
        "Transactions, from open to ended (markers written), in ms.",
        buckets,
        tc.get("execution_latency_sum_ms"),
        labels,
    )


def _histogram(
    out: _Exposition,
    name: str,
    help_text: str,
    buckets: Mapping[str, int],
    total: Any,
    labels: _Labels,
) -> None:
    """A Prometheus histogram (cumulative ``le`` buckets, ``+Inf``, ``_sum``, ``_count``) from
    per-bucket counts keyed by upper bound (``overflow``: the rest)."""
    if not buckets:
        return
    running = 0
    for bound, count in buckets.items():
        running += count
        le = "+Inf" if bound == "overflow" else bound
        out.add(name, "histogram", help_text, running, (*labels, ("le", le)), "_bucket")
    out.add(name, "histogram", help_text, total, labels, "_sum")
    out.add(name, "histogram", help_text, running, labels, "_count")


def _summary(out: _Exposition, name: str, help_text: str, window: Mapping[str, Any], labels: _Labels) -> None:
    if window.get("count"):  # no quantile samples before the first observation (not a made-up 0)
        for quantile, key in _QUANTILES:
            out.add(name, "summary", help_text, window.get(key), (*labels, ("quantile", quantile)))
    out.add(name, "summary", help_text, window.get("sum_ms"), labels, "_sum")
    out.add(name, "summary", help_text, window.get("count"), labels, "_count")


def _buffer(out: _Exposition, buffer: Mapping[str, Any]) -> None:
    out.add(
        "pulsar_txn_tb_snapshots_written_total",
        "counter",
        "TB snapshots written.",
        buffer.get("snapshots_written"),
    )
    out.add(
        "pulsar_txn_tb_hanging_resolved_total",
        "counter",
        "Hanging transactions resolved.",
        buffer.get("hanging_resolved"),
    )
    partitions: Mapping[str, Mapping[str, Any]] = buffer.get("partitions") or {}
    out.add("pulsar_txn_tb_owned_partitions", "gauge", "Partitions this TB service keeps.", len(partitions))
    for name, part in sorted(partitions.items()):
        labels = _partition_labels(name, part)
        ready = part.get("recovery_state") == "Ready"
        out.add(
            "pulsar_txn_tb_ready", "gauge", "1 once the partition's state is recovered.", int(ready), labels
        )
        for metric, key, help_text in _TB_GAUGES:
            out.add(metric, "gauge", help_text, part.get(key), labels)
        for metric, key, help_text in _TB_COUNTERS:
            out.add(metric, "counter", help_text, part.get(key), labels)


def _partition_labels(name: str, part: Mapping[str, Any]) -> _Labels:
    topic = part.get("topic")
    partition = part.get("partition")
    if isinstance(topic, str) and isinstance(partition, int):
        return (("topic", topic), ("partition", str(partition)))
    return (("topic", name),)


_PIPELINE_COUNTERS = (
    ("pulsar_txn_pipeline_processed_total", "processed", "Input messages whose transaction committed."),
    ("pulsar_txn_pipeline_transactions_total", "transactions", "Batches committed."),
    (
        "pulsar_txn_pipeline_failed_batches_total",
        "failed_batches",
        "Batches whose transaction did not commit.",
    ),
    (
        "pulsar_txn_pipeline_sessions_total",
        "sessions",
        "Sessions (subscribe + fence): 1 + restarts after failures.",
    ),
    ("pulsar_txn_pipeline_fenced_total", "fenced", "Transactions of a previous run aborted at start-up."),
    (
        "pulsar_txn_pipeline_foreign_restarts_total",
        "foreign_restarts",
        "Sessions restarted: input held by a transaction they did not begin.",
    ),
)


def render_pipeline(progress: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """An exactly-once pipeline's progress (``PipelineProgress`` as a dict)."""
    out = _Exposition()
    lbl = tuple(labels.items())
    for name, key, help_text in _PIPELINE_COUNTERS:
        out.add(name, "counter", help_text, progress.get(key), lbl)
    out.add(
        "pulsar_txn_pipeline_last_commit_timestamp_seconds",
        "gauge",
        "When the last batch committed (Unix time); alert when it stops moving while input waits.",
        progress.get("last_commit_at"),
        lbl,
    )
    return out.render()


def families(text: str) -> Iterable[str]:
    """The metric family names in a rendered exposition (for tests and tooling)."""
    return (line.split()[2] for line in text.splitlines() if line.startswith("# TYPE "))
