"""The ``/metrics`` exposition: Pulsar's transaction metric names, well-formed Prometheus text, and
Pulsar's execution-latency buckets."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from typing import Any

import pytest

from pulsar_txn import _prometheus
from pulsar_txn._admin_cli import parse_duration_ms
from pulsar_txn.admin_http import AdminHttpServer, AdminHttpThread, TextBody
from pulsar_txn.coordinator.stats import LatencyBuckets, TcCounters
from pulsar_txn.errors import ConfigError

_SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (-?[0-9.e+]+)$'
)


def _tc(**extra: Any) -> dict[str, Any]:
    counters = TcCounters(created=5, committed=3, aborted=1, timed_out=1)
    counters.append_log.add(2.0)
    counters.append_log.add(4.0)
    counters.execution_latency.add(7)
    counters.execution_latency.add(15)
    return {"state": "Ready", "ongoing_txn_size": 1, "low_water_mark": 3, **counters.snapshot(), **extra}


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$", line), line
            continue
        match = _SAMPLE.match(line)
        assert match is not None, f"not a Prometheus sample line: {line!r}"
        name_and_labels, value = line.rsplit(" ", 1)
        assert name_and_labels not in out, f"duplicate sample {name_and_labels}"
        out[name_and_labels] = float(value)
    return out


def test_coordinator_metrics_keep_pulsars_names_per_coordinator_id() -> None:
    text = _prometheus.render(
        {"owned_tcs": [0, 1], "coordinators": {"1": _tc(), "0": _tc(state="Recovering")}}
    )
    samples = _samples(text)
    assert samples['pulsar_txn_committed_total{coordinator_id="1"}'] == 3
    assert samples['pulsar_txn_aborted_total{coordinator_id="0"}'] == 1
    assert samples['pulsar_txn_created_total{coordinator_id="1"}'] == 5
    assert samples['pulsar_txn_timeout_total{coordinator_id="1"}'] == 1
    assert samples['pulsar_txn_active_count{coordinator_id="1"}'] == 1
    assert samples['pulsar_txn_append_log_total{coordinator_id="1"}'] == 2
    assert samples['pulsar_txn_append_log_latency_ms_sum{coordinator_id="1"}'] == 6.0
    assert samples['pulsar_txn_append_log_latency_ms{coordinator_id="1",quantile="0.99"}'] == 4.0
    assert samples['pulsar_txn_execution_latency_le_10{coordinator_id="1"}'] == 1
    assert samples['pulsar_txn_execution_latency_le_20{coordinator_id="1"}'] == 1
    assert samples['pulsar_txn_execution_latency_le_overflow{coordinator_id="1"}'] == 0
    assert samples['pulsar_txn_tc_ready{coordinator_id="0"}'] == 0
    # The same buckets as a Prometheus histogram: cumulative, +Inf, _sum and _count.
    assert samples['pulsar_txn_execution_latency_ms_bucket{coordinator_id="1",le="10"}'] == 1
    assert samples['pulsar_txn_execution_latency_ms_bucket{coordinator_id="1",le="20"}'] == 2
    assert samples['pulsar_txn_execution_latency_ms_bucket{coordinator_id="1",le="+Inf"}'] == 2
    assert samples['pulsar_txn_execution_latency_ms_count{coordinator_id="1"}'] == 2
    assert samples['pulsar_txn_execution_latency_ms_sum{coordinator_id="1"}'] == 22
    assert "# TYPE pulsar_txn_execution_latency_ms histogram" in text
    # Nothing made up: no END_TXN yet means no quantiles (count 0 only); a recovering TC has no
    # low watermark.
    assert not any(k.startswith("pulsar_txn_end_txn_latency_ms{") for k in samples)
    assert samples['pulsar_txn_end_txn_latency_ms_count{coordinator_id="1"}'] == 0
    assert 'pulsar_txn_low_watermark{coordinator_id="0"}' not in samples
    assert samples['pulsar_txn_low_watermark{coordinator_id="1"}'] == 3
    assert samples["pulsar_txn_coordinator_owned_tcs"] == 2
    # One HELP/TYPE per family, coordinators in id order.
    names = list(_prometheus.families(text))
    assert len(names) == len(set(names))
    assert text.index('coordinator_id="0"') < text.index('coordinator_id="1"')
    assert "# TYPE pulsar_txn_committed_total counter" in text
    assert "# TYPE pulsar_txn_active_count gauge" in text


def test_buffer_metrics_label_topic_and_partition_and_skip_missing_values() -> None:
    part = {
        "topic": 'odd"topic\\x',
        "partition": 2,
        "recovery_state": "Ready",
        "ongoing_txn_size": 2,
        "aborted_txn_size": 1,
        "max_read_position": 40,
        "last_snapshot_offset": None,  # no snapshot yet: no sample, not a made-up value
        "committed_txns": 9,
        "aborted_txns": 1,
        "forged_markers": 3,
    }
    buffer = {"snapshots_written": 4, "hanging_resolved": 0, "partitions": {"x-partition-2": part}}
    samples = _samples(_prometheus.render({"owned_tcs": [], "coordinators": {}}, buffer))
    labels = '{topic="odd\\"topic\\\\x",partition="2"}'
    assert samples[f"pulsar_txn_tb_active_total{labels}"] == 2
    assert samples[f"pulsar_txn_tb_committed_total{labels}"] == 9
    assert samples[f"pulsar_txn_tb_forged_markers_total{labels}"] == 3
    assert samples[f"pulsar_txn_tb_max_read_position{labels}"] == 40
    assert samples[f"pulsar_txn_tb_ready{labels}"] == 1
    assert samples["pulsar_txn_tb_snapshots_written_total"] == 4
    assert not any(k.startswith("pulsar_txn_tb_last_snapshot_offset") for k in samples)


@pytest.mark.parametrize(
    ("ms", "bucket"), [(0, "10"), (10, "10"), (10.5, "20"), (3_000_000, "3000000"), (3_000_001, "overflow")]
)
def test_execution_latency_falls_in_pulsars_bucket(ms: float, bucket: str) -> None:
    buckets = LatencyBuckets()
    buckets.add(ms)
    assert {k: v for k, v in buckets.snapshot().items() if v} == {bucket: 1}


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("1s", 1000), ("2", 2000), ("1.5m", 90_000), ("1h", 3_600_000)]
)
def test_durations_read_like_pulsar_admins(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


def test_a_bad_duration_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration_ms("soon")


def test_pipeline_metrics_served_from_a_thread_need_the_token() -> None:
    progress = {"processed": 300, "transactions": 3, "failed_batches": 1, "sessions": 2, "fenced": 0}
    labels = {"instance_id": "p-0", "input": "in", "output": "out"}
    server = AdminHttpServer(
        {
            "/metrics": lambda: TextBody(
                _prometheus.render_pipeline(progress, labels), _prometheus.CONTENT_TYPE
            )
        },
        auth_token="tok",
    )
    thread = AdminHttpThread(server)
    url = thread.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/metrics", timeout=5)
        assert refused.value.code == 401
        refused.value.close()
        request = urllib.request.Request(url + "/metrics", headers={"Authorization": "Bearer tok"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.headers["Content-Type"] == _prometheus.CONTENT_TYPE
            samples = _samples(response.read().decode())
    finally:
        thread.stop()
    lbl = '{instance_id="p-0",input="in",output="out"}'
    assert samples[f"pulsar_txn_pipeline_processed_total{lbl}"] == 300
    assert samples[f"pulsar_txn_pipeline_failed_batches_total{lbl}"] == 1
    # No commit yet: no timestamp sample rather than a made-up one.
    assert not any(k.startswith("pulsar_txn_pipeline_last_commit") for k in samples)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/metrics", timeout=2)  # stopped: nothing listens any more


def test_a_partition_without_a_snapshot_has_no_snapshot_samples() -> None:
    """docs/operations.md: the last-snapshot gauges have no sample before the first snapshot (before:
    -1 and 0, which read as a snapshot at offset -1 taken in 1970)."""
    from kafka_store import KafkaConfig
    from pulsar_txn.buffer.service import TransactionBufferService, _Owned
    from pulsar_txn.buffer.state import TxnBufferState
    from pulsar_txn.config import CoordinatorConfig

    service = TransactionBufferService(KafkaConfig(bootstrap_servers="127.0.0.1:9"), CoordinatorConfig())
    service._owned[("orders", 0)] = _Owned(TxnBufferState("orders", 0))  # as a partition taken without one
    service._refresh_stats()
    text = _prometheus.render({"coordinators": {}}, service.stats())
    assert "pulsar_txn_tb_max_read_position" in text
    assert not [line for line in text.splitlines() if "last_snapshot" in line and not line.startswith("#")]
