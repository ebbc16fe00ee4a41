"""Transactional Spark writes without a cluster: options are checked and typed, an unreachable broker
is a typed error, and the driver's re-run check fails safe when Spark's status store says nothing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pulsar_txn.errors import ConfigError, PulsarTxnError
from spark._write_task import client_for, close_clients
from spark.writer import TransactionalWriter, _retried_result_stage

DEAD = {"service_url": "pulsar://127.0.0.1:1", "bootstrap_servers": "127.0.0.1:1"}


def _df(*columns: str) -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    # write() looks only at .schema before its first network call
    return SimpleNamespace(schema=StructType([StructField(c, StringType()) for c in columns]))


def test_kafka_extra_librdkafka_properties_can_be_passed() -> None:
    # KafkaConfig.extra is a dict: the cached client's key must still be hashable.
    writer = TransactionalWriter(**DEAD, kafka={"extra": {"socket.keepalive.enable": "true"}})
    try:
        assert client_for(writer.settings).kafka.extra == {"socket.keepalive.enable": "true"}
    finally:
        close_clients()


def test_a_broker_that_cannot_be_reached_is_a_typed_error() -> None:
    quick = {"kafka": {"request_timeout_ms": 1500}}
    try:
        with pytest.raises(PulsarTxnError):  # the topic check
            TransactionalWriter(**DEAD, topic="t", **quick).write(_df("value"))
        with pytest.raises(PulsarTxnError):  # the progress topic
            TransactionalWriter(**DEAD, **quick).write(_df("value", "topic"), query_id="q", batch_id=0)
    finally:
        close_clients()


@pytest.mark.parametrize(
    "bad",
    [
        {"txn_timeout_seconds": "60"},
        {"operation_timeout_seconds": "30"},
        {"progress_partitions": "2"},
        {"progress_partitions": 1.5},
        {"txn_timeout_seconds": float("nan")},
        {"sink_id": 7},
    ],
)
def test_bad_option_types_are_config_errors(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        TransactionalWriter(**DEAD, **bad)


@pytest.mark.parametrize("query_id, batch_id", [("q", "1"), (7, 1), ("", 1), ("q", -1)])
def test_bad_query_and_batch_ids_are_config_errors(query_id: Any, batch_id: Any) -> None:
    try:
        with pytest.raises(ConfigError):
            TransactionalWriter(**DEAD).write(_df("value", "topic"), query_id=query_id, batch_id=batch_id)
    finally:
        close_clients()


class _Tracker:
    def __init__(self, jobs: dict[int, Any], stage: Any) -> None:
        self.jobs, self.stage = jobs, stage

    def getJobInfo(self, job: int) -> Any:
        return self.jobs.get(job)

    def getStageInfo(self, _stage: int) -> Any:
        return self.stage


def _session(job_ids: list[int], tracker: _Tracker) -> Any:
    java_tracker = SimpleNamespace(getJobIdsForTag=lambda _tag: job_ids)
    jsc = SimpleNamespace(sc=lambda: SimpleNamespace(statusTracker=lambda: java_tracker))
    return SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker, _jsc=jsc))


def test_the_re_run_check_aborts_when_the_status_store_never_shows_the_write() -> None:
    # Spark's status store is filled asynchronously and may drop events: no news is not good news.
    reason = _retried_result_stage(_session([], _Tracker({}, None)), "tag", wait_s=0.2)
    assert reason is not None and "did not show" in reason
    running = {1: SimpleNamespace(status="RUNNING", stageIds=[4])}
    assert _retried_result_stage(_session([1], _Tracker(running, None)), "tag", wait_s=0.2) is not None


def test_the_re_run_check_passes_a_job_without_stages() -> None:
    empty = {1: SimpleNamespace(status="SUCCEEDED", stageIds=[])}  # a job over no partitions
    assert _retried_result_stage(_session([1], _Tracker(empty, None)), "tag", wait_s=0.2) is None


def test_the_re_run_check_passes_a_clean_stage_and_catches_a_re_run_one() -> None:
    done = {1: SimpleNamespace(status="SUCCEEDED", stageIds=[3, 4])}
    clean = SimpleNamespace(stageId=4, currentAttemptId=0, numFailedTasks=0)
    assert _retried_result_stage(_session([1], _Tracker(done, clean)), "tag", wait_s=0.2) is None
    rerun = SimpleNamespace(stageId=4, currentAttemptId=1, numFailedTasks=0)
    assert "attempt 1" in (
        _retried_result_stage(_session([1], _Tracker(done, rerun)), "tag", wait_s=0.2) or ""
    )
