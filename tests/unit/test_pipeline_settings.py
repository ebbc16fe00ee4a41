"""PipelineSettings refuses what would make the pipeline misbehave quietly: a NaN compares false
everywhere, so an ``idle_exit_s`` of NaN never exited and a NaN transaction timeout went to the
coordinator (review, session 26)."""

from __future__ import annotations

import math

import pytest

from pulsar_txn.errors import ConfigError
from pulsar_txn.pipeline.app import PipelineSettings


@pytest.mark.parametrize(
    "bad",
    [
        {"idle_exit_s": math.nan},
        {"idle_exit_s": -1.0},
        {"transaction_timeout_s": math.nan},
        {"transaction_timeout_s": math.inf},
        {"retry_backoff_s": -0.5},
        {"retry_backoff_s": math.nan},
        {"fence_check_interval_s": math.nan},
        {"batch_size": 0},
        {"batch_size": True},
        {"batch_timeout_ms": 2.5},
        # Always static membership: "" silently turned it off (a restart found ConsumerBusy).
        {"instance_id": ""},
        {"instance_id": None},
        {"instance_id": 7},
        {"instance_id": "a b"},
        {"instance_id": "x" * 250},
    ],
)
def test_settings_that_cannot_work_are_a_config_error(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        PipelineSettings("in", "out", **bad)  # type: ignore[arg-type]


def test_the_defaults_none_for_the_optional_waits_and_zero_where_it_means_at_once_are_accepted() -> None:
    settings = PipelineSettings("in", "out", idle_exit_s=None, fence_check_interval_s=None)
    assert settings.batch_size == 100
    # 0: exit as soon as the input is idle / retry at once (accepted before the checks came in).
    PipelineSettings("in", "out", idle_exit_s=0, retry_backoff_s=0.0)


@pytest.mark.parametrize("subscription", ["", "a b", "a/b", "s" * 260])
def test_a_subscription_subscribe_would_refuse_is_a_config_error_not_a_restart_loop(
    subscription: str,
) -> None:
    """Refused by subscribe in every session, the pipeline used to restart for ever (review,
    session 34: 75 sessions in 40 s)."""
    with pytest.raises(ConfigError):
        PipelineSettings("in", "out", subscription=subscription)


@pytest.mark.parametrize("port", ["99999", "-3", "x"])
def test_an_out_of_range_metrics_port_is_a_usage_error_not_a_bind_traceback(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to reach bind(): OverflowError, a traceback, exit 1 (review, session 34)."""
    import argparse

    from pulsar_txn.pipeline.cli import add_arguments

    parser = argparse.ArgumentParser(prog="pulsar-txn pipeline")
    add_arguments(parser)
    args = ["--service-url", "pulsar://127.0.0.1:1", "--bootstrap-servers", "127.0.0.1:1"]
    with pytest.raises(SystemExit) as info:
        parser.parse_args([*args, "--input", "in", "--output", "out", "--metrics-port", port])
    assert info.value.code == 2
    assert "--metrics-port" in capsys.readouterr().err


def test_an_admin_http_server_refuses_an_out_of_range_port() -> None:
    from pulsar_txn.admin_http import AdminHttpServer

    for port in (65536, -1, True):
        with pytest.raises(ConfigError):
            AdminHttpServer({}, port=port)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "1e9", "soon"])
def test_the_cli_refuses_a_work_time_it_cannot_apply(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``inf`` crashed the transform with a traceback; ``nan`` and negatives were taken as 0."""
    from pulsar_txn.pipeline.cli import _work_ms

    if value == "0":
        assert _work_ms(value) == 0.0
        return
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        _work_ms(value)


def test_a_batch_whose_transaction_cannot_begin_counts_as_failed() -> None:
    """NEW_TXN failing (e.g. the coordinator is gone) fails the batch like any other failure: the
    progress counts it, and the session restarts."""
    from typing import Any, cast

    from pulsar_txn.errors import Timeout
    from pulsar_txn.pipeline.app import ExactlyOncePipeline

    class NoCoordinator:
        def transaction(self, _timeout: float) -> None:
            raise Timeout("no coordinator answered")

    pipeline = ExactlyOncePipeline(cast(Any, NoCoordinator()), PipelineSettings("in", "out"))
    with pytest.raises(Timeout):
        pipeline._process(cast(Any, None), 0, [], {})
    assert pipeline.progress.failed_batches == 1
