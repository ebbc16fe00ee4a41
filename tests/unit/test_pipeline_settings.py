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
