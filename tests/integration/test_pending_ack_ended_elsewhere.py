"""Acks in a transaction that another client (or a timeout) has already ended: they belong to no
outcome, so they must neither be accepted nor hold their messages pending for good (found by a
review of session 33; both tests failed before the fix)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pulsar_txn import Consumer, InvalidTxnStatusError, Message, Transaction, TransactionState
from pulsar_txn.errors import PulsarTxnError
from tests.conftest import Cluster, receive_all
from tests.integration.test_subscriptions import _pending_total, _setup

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _acked_then_aborted_elsewhere(
    c: Cluster, topic: str, n: int, **options: Any
) -> tuple[Consumer[bytes], list[Message[bytes]], Transaction]:
    """``n`` messages received; the first acked in a transaction that another client then aborts,
    and its redelivery received (so the abort has reached this consumer)."""
    _setup(c, topic, n)
    consumer = c.client.subscribe(topic, f"sub_{topic}", initial_position="Earliest", **options)
    msgs = [consumer.receive(5000) for _ in range(n)]
    txn = c.client.transaction(60)
    consumer.acknowledge(msgs[0], txn=txn)
    other = c.other_client()
    try:
        other.resume_transaction(txn.txn_id).abort()
    finally:
        other.close()
    assert consumer.receive(15_000).message_id == msgs[0].message_id
    return consumer, msgs, txn


def test_an_ack_in_a_transaction_whose_abort_reached_the_subscription_is_refused(
    cluster: ClusterFactory, uid: str
) -> None:
    consumer, msgs, txn = _acked_then_aborted_elsewhere(cluster(), f"ended_ack_{uid}", 3)
    with pytest.raises(InvalidTxnStatusError, match="has ended"):
        consumer.acknowledge(msgs[1], txn=txn)
    assert _pending_total(consumer) == 0
    with pytest.raises(PulsarTxnError):
        txn.commit()
    consumer.redeliver_unacknowledged_messages()
    assert sorted(m.message_id.offset for m in receive_all(consumer, 3000)) == [0, 1, 2]  # none pending
    consumer.close()


def test_acks_of_a_transaction_whose_end_failed_for_good_are_released_by_the_stale_check(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the refusal cannot close: the ack is made before this consumer's tail has read the
    abort written elsewhere (simulated: the fold is told it has not seen it). The commit then fails
    for good (ERROR), no end listener runs, and the stale-pending check, which skipped the
    consumer's own transactions, left the message pending until a restart."""
    consumer, msgs, txn = _acked_then_aborted_elsewhere(
        cluster(), f"ended_err_{uid}", 2, pending_ack_check_after_ms=500
    )
    part = next(iter(consumer._parts.values()))
    monkeypatch.setattr(part.fold, "has_ended", lambda _txn: False)
    consumer.acknowledge(msgs[1], txn=txn)  # written after the abort marker
    assert _pending_total(consumer) == 1
    with pytest.raises(PulsarTxnError):
        txn.commit()
    assert txn.state is TransactionState.ERROR
    consumer.redeliver_unacknowledged_messages()
    again = receive_all(consumer, 6000)
    assert [m.message_id for m in again if m.message_id == msgs[1].message_id] == [msgs[1].message_id]
    assert _pending_total(consumer) == 0
    consumer.close()
