"""Transaction ends against a fake coordinator (found in review, session 35; each test failed before
its fix): a failed prepare that only saw operations still running does not abort a commit whose
operations all succeeded; a commit's bound covers all three of its steps; a handle learns of an end
made through another handle of its client."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from pulsar_txn.client import Client
from pulsar_txn.errors import Timeout
from pulsar_txn.transaction import Transaction, TransactionState
from pulsar_txn.txnid import TxnAction, TxnID


class _FakeTc:
    def __init__(self, end_delay: float = 0.0) -> None:
        self.ends: list[TxnAction] = []
        self._end_delay = end_delay

    def add_partitions_async(self, _txn_id: TxnID, _parts: Any) -> Future[None]:
        done: Future[None] = Future()
        done.set_result(None)
        return done

    add_subscriptions_async = add_partitions_async

    def end_txn_async(self, _txn_id: TxnID, action: TxnAction, _token: bytes | None) -> Future[None]:
        self.ends.append(action)
        done: Future[None] = Future()
        threading.Timer(self._end_delay, done.set_result, (None,)).start()
        return done

    def close(self) -> None:
        pass


def _txn(op_timeout: float, seq: int, **fake: Any) -> tuple[Client, Transaction]:
    client = Client(
        "pulsar://127.0.0.1:1", bootstrap_servers="127.0.0.1:1", operation_timeout_seconds=op_timeout
    )
    client._tc_client = _FakeTc(**fake)  # type: ignore[assignment]
    return client, Transaction(client, TxnID(0, seq), 60_000)


def test_a_prepare_that_timed_out_on_running_sends_does_not_abort_the_commit() -> None:
    client, txn = _txn(1.0, 1)
    txn.begin_send("p0")  # in flight past the prepare's wait (its delivery runs on its own clock)
    prepared = txn.prepare_async()
    with pytest.raises(Timeout):
        prepared.result(5)
    txn.op_finished(None)  # it succeeds after all
    txn.commit()
    assert txn.state is TransactionState.COMMITTED
    assert client._tc_client.ends == [TxnAction.COMMIT]  # type: ignore[union-attr]


def test_a_commits_bound_covers_its_three_steps_each_within_the_operation_timeout() -> None:
    """Operations, commit checks and END_TXN each have the operation timeout: a commit waited at
    most two timeouts plus 5 s, so with a 10 s timeout and steps of 9 s it raised Timeout and the
    transaction then committed (abort refused meanwhile: still COMMITTING)."""
    _client, txn = _txn(10.0, 2)
    assert txn._end_limit() >= 3 * 10.0


def test_a_commit_waits_for_slow_operations_checks_and_end() -> None:
    _client, txn = _txn(1.0, 4, end_delay=0.6)

    def slow_check(_txn_id: TxnID) -> Future[None]:
        done: Future[None] = Future()
        threading.Timer(0.6, done.set_result, (None,)).start()
        return done

    txn.add_commit_check(slow_check)
    txn.begin_send("p0")
    threading.Timer(0.6, txn.op_finished, (None,)).start()
    txn.commit()
    assert txn.state is TransactionState.COMMITTED


def test_an_end_through_one_handle_reaches_the_other_handles_listeners() -> None:
    client, first = _txn(2.0, 3)
    second = client.resume_transaction(first.txn_id)
    heard: list[tuple[str, TxnAction]] = []
    first.add_end_listener(lambda _t, action: heard.append(("first", action)))
    second.add_end_listener(lambda _t, action: heard.append(("second", action)))
    first.commit()
    assert second.state is TransactionState.COMMITTED
    assert sorted(heard) == [("first", TxnAction.COMMIT), ("second", TxnAction.COMMIT)]
