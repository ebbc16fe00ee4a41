"""The coordinator command's bad arguments end in one line and exit status 2, never a traceback."""

from __future__ import annotations

import pytest

from pulsar_txn.cli import main


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["coordinator", "--tc-ids", "a,b", "--bootstrap-servers", "127.0.0.1:1"], "--tc-ids"),
        (["coordinator", "--port", "99999", "--bootstrap-servers", "127.0.0.1:1"], "port"),
    ],
)
def test_bad_coordinator_arguments_are_one_line_errors(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pulsar-txn: error:") and says in err and "\n" not in err


def test_a_compat_producer_is_not_connected_once_closed() -> None:
    from pulsar_txn.compat._api import Producer as CompatProducer

    class Native:
        closed = False
        producer_name = "p"

        def close(self) -> None:
            self.closed = True

    producer = CompatProducer.__new__(CompatProducer)
    producer.native = Native()  # type: ignore[assignment]
    assert producer.is_connected()
    producer.close()
    assert not producer.is_connected()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["demo", "--messages", "-5"], "--messages: must be at least 1, got -5"),
        (["demo", "--messages", "many"], "--messages: not an integer"),
        (["demo", "--kills", "-1"], "--kills: must be at least 0"),
        (["tc-demo", "--transactions", "0"], "--transactions: must be at least 1"),
    ],
)
def test_demo_counts_out_of_range_are_refused_before_anything_starts(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
