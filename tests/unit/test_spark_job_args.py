"""The example Spark jobs refuse counts of 0 or less on their command lines: a 0 used to be taken
as "not given" (no rate limit, any TC) or passed on to fail at the first micro-batch."""

from __future__ import annotations

import pytest

from spark.jobs import batch_report, stream_aggregate

_STREAM = "--service-url pulsar://h:6650 --bootstrap-servers h:9092 --input in --output out --checkpoint c"


@pytest.mark.parametrize("flag", ["--num-tcs", "--max-offsets-per-trigger"])
@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_the_stream_job_refuses_a_count_that_is_not_positive(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        stream_aggregate.parse_args([*_STREAM.split(), flag, value])
    assert exited.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_the_stream_job_passes_given_counts_on() -> None:
    args = stream_aggregate.parse_args([*_STREAM.split(), "--num-tcs", "4", "--max-offsets-per-trigger", "7"])
    assert (args.num_tcs, args.max_offsets_per_trigger) == (4, 7)


def test_the_batch_job_refuses_zero_tcs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        batch_report.main(["--bootstrap-servers", "h:9092", "--topic", "t", "--num-tcs", "0"])
    assert exited.value.code == 2
    assert "argument --num-tcs" in capsys.readouterr().err


def test_the_batch_job_takes_the_marker_secret_from_the_environment_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--marker-secret`` put the secret in the process list for the whole job (session 39's security
    review): it is refused, naming the variable, and the value is not echoed."""
    with pytest.raises(SystemExit) as exited:
        batch_report.main(["--bootstrap-servers", "h:9092", "--topic", "t", "--marker-secret", "s3cret-x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "PULSAR_TXN_MARKER_SECRET" in err and "s3cret-x" not in err
    assert "--marker-secret" not in batch_report_help(capsys)


def batch_report_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        batch_report.main(["--help"])
    return capsys.readouterr().out
