"""What a consumer asks the TC's log about, and what it may release (``pulsar_txn.pendingack.stale``)."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_store import KafkaConfig
from pulsar_txn.coordinator.fold import TcLogFold, ended_as
from pulsar_txn.coordinator.records import TxnMeta
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.pendingack.stale import StalePendingCheck
from pulsar_txn.txnid import TxnAction, TxnID


def _fold(next_seq: int, **status: TxnStatus) -> TcLogFold:
    fold = TcLogFold(0, next_seq=next_seq)
    for seq, st in status.items():
        n = int(seq.removeprefix("s"))
        fold.txns[n] = TxnMeta(TxnID(0, n), st, 1000, 0, 1000, 0)
    return fold


def test_only_an_ended_transaction_has_an_outcome_and_a_forgotten_one_counts_as_aborted() -> None:
    fold = _fold(10, s1=TxnStatus.OPEN, s2=TxnStatus.ABORTING, s3=TxnStatus.ABORTED, s4=TxnStatus.COMMITTED)
    assert ended_as(fold, TxnID(0, 1)) is None  # open: maybe another consumer's, which may commit
    assert ended_as(fold, TxnID(0, 2)) is None  # ending: its markers are on their way
    assert ended_as(fold, TxnID(0, 3)) is TxnAction.ABORT
    assert ended_as(fold, TxnID(0, 4)) is TxnAction.COMMIT
    assert ended_as(fold, TxnID(0, 5)) is TxnAction.ABORT  # allocated, ended and forgotten since
    assert ended_as(fold, TxnID(0, 10)) is None  # not allocated yet: nothing may be decided


def test_a_transaction_is_looked_up_once_it_has_stayed_pending_long_enough_and_checks_are_spaced() -> None:
    now = [100.0]
    check = StalePendingCheck(KafkaConfig(bootstrap_servers="127.0.0.1:1"), "log", 10.0, clock=lambda: now[0])
    a, b = TxnID(0, 1), TxnID(1, 1)
    assert check.due({a}) == []  # first seen now
    now[0] = 108.0
    assert check.due({a, b}) == []  # a check runs (the last was at 100), but a is pending 8 s only
    now[0] = 112.5
    assert check.due({a, b}) == []  # pending 12.5 s, but the last check was 4.5 s ago
    now[0] = 113.0
    assert check.due({a, b}) == [a]  # pending 13 s; b only 5 s
    now[0] = 114.0
    assert check.due({a, b}) == []  # checked 1 s ago
    now[0] = 125.0
    assert check.due({b}) == [b]  # a is no longer pending: forgotten
    now[0] = 131.0
    assert check.due({a}) == []  # pending again: its clock starts over


def test_a_tc_whose_log_cannot_be_read_does_not_stop_the_others_lookups(monkeypatch: Any) -> None:
    """One unreadable TC log (a forged record naming a TC that does not exist, a partition offline)
    skipped that TC only: every other TC's aborted transactions are still released."""
    from kafka_store import StoreError
    from pulsar_txn.pendingack import stale

    def read(_kafka: KafkaConfig, _topic: str, tc: int, _secret: bytes | None = None) -> TcLogFold:
        if tc == 999:
            raise StoreError("Unknown partition")
        return _fold(10, s3=TxnStatus.ABORTED)

    monkeypatch.setattr(stale, "read_tc_log", read)
    check = StalePendingCheck(KafkaConfig(bootstrap_servers="127.0.0.1:1"), "log", 10.0)
    assert check.aborted([TxnID(0, 3), TxnID(999, 1)]) == [TxnID(0, 3)]
    with pytest.raises(StoreError):
        check.aborted([TxnID(999, 1)])  # nothing could be read: the caller retries later
