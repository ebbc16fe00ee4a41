"""The pipeline's per-partition commit chain: a batch's commit is issued only after the previous
batch of its partition committed, and a failure there aborts it instead (pure logic, fake txns)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

import pytest

from pulsar_txn.errors import TransactionHasOperationFailed
from pulsar_txn.pipeline.app import _commit_after
from pulsar_txn.transaction import Transaction


class FakeTxn:
    """Records which end was asked for; the test completes the returned future."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.ending: Future[None] = Future()

    def commit_async(self) -> Future[None]:
        self.asked.append("commit")
        return self.ending

    def abort_async(self) -> Future[None]:
        self.asked.append("abort")
        return self.ending


def _chain(fake: FakeTxn, before: Future[None] | None) -> Future[None]:
    return _commit_after(cast(Transaction, cast(Any, fake)), before)


def test_a_batch_commits_only_after_the_previous_batch_of_its_partition_committed() -> None:
    first, second = FakeTxn(), FakeTxn()
    done_first = _chain(first, None)
    done_second = _chain(second, done_first)
    assert first.asked == ["commit"] and second.asked == []  # the second waits
    first.ending.set_result(None)
    assert done_first.result(1) is None
    assert second.asked == ["commit"]
    second.ending.set_result(None)
    assert done_second.result(1) is None


def test_a_failed_commit_aborts_every_later_batch_of_the_partition_with_the_same_error() -> None:
    first, second, third = FakeTxn(), FakeTxn(), FakeTxn()
    done_first = _chain(first, None)
    done_second = _chain(second, done_first)
    done_third = _chain(third, done_second)
    failure = TransactionHasOperationFailed("a send failed")
    first.ending.set_exception(failure)
    assert second.asked == ["abort"] and third.asked == []
    second.ending.set_result(None)  # aborted
    assert third.asked == ["abort"]
    third.ending.set_result(None)
    for done in (done_first, done_second, done_third):
        with pytest.raises(TransactionHasOperationFailed):
            done.result(1)


def test_an_end_that_cannot_start_fails_the_chain() -> None:
    class Expired(FakeTxn):
        def commit_async(self) -> Future[None]:
            raise TransactionHasOperationFailed("timed out before its turn")

    first, late = FakeTxn(), Expired()
    done_first = _chain(first, None)
    done_late = _chain(late, done_first)
    first.ending.set_result(None)
    with pytest.raises(TransactionHasOperationFailed):
        done_late.result(1)
