"""Spark wraps our data source's errors in its own exceptions with the worker's traceback as text
(session 39's review: ``except ConfigError`` around a read caught nothing, and the bundled jobs ended
in a traceback): ``spark.typed_error`` finds the typed error again, and the jobs print one line."""

from __future__ import annotations

import pytest

from pulsar_txn.errors import ConfigError, ConnectError, TopicNotFound
from spark import typed_error
from spark.jobs import exit_code_of

_WRAPPED = (
    "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source reader: Traceback (most "
    'recent call last):\n  File "/x/spark/_plan.py", line 10, in plan\n    raise ...\n'
    "kafka_store.errors.TopicNotFoundError: no topic\n\nThe above exception was the direct cause of "
    "the following exception:\n\nTraceback (most recent call last):\n"
    "pulsar_txn.errors.TopicNotFound: topic orders does not exist\n SQLSTATE: 38000"
)


def test_the_typed_error_a_spark_exception_carries_is_made_again() -> None:
    wrapped = RuntimeError(_WRAPPED)
    typed = typed_error(wrapped)
    assert isinstance(typed, TopicNotFound) and str(typed) == "topic orders does not exist"
    assert typed.__cause__ is wrapped


def test_an_exception_without_one_gives_none_and_a_typed_one_is_itself() -> None:
    assert typed_error(RuntimeError("pulsar_txn.errors.NoSuchThing: x")) is None
    assert typed_error(RuntimeError("java.lang.OutOfMemoryError")) is None
    own = ConnectError("broker down")
    assert typed_error(own) is own


def test_a_job_prints_one_line_for_a_typed_error_and_raises_anything_else(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert exit_code_of(RuntimeError(_WRAPPED), "job") == 2
    err = capsys.readouterr().err
    assert err == "job: error: TopicNotFound: topic orders does not exist\n"
    with pytest.raises(ValueError):
        exit_code_of(ValueError("a bug"), "job")
    assert exit_code_of(ConfigError("option x"), "job") == 2
