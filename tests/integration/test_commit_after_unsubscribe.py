"""Ending a transaction whose acks were on a subscription that has been unsubscribed since (its
pending-ack log deleted) is quick, as Pulsar answers END_TXN_ON_SUBSCRIPTION for a subscription that
is gone: the coordinator's cached partition count of the log is checked again when the marker
write hangs. Before, the write was retried for about a minute and the client's commit timed out,
leaving the transaction COMMITTING."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pulsar_txn import TransactionState
from tests.conftest import Cluster, fill_topic, receive_all

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_transaction_ends_at_once_after_its_subscription_was_unsubscribed(
    cluster: Callable[..., Cluster], uid: str, end: str
) -> None:
    c = cluster()
    topic = f"unsub_end_{uid}"
    fill_topic(c, topic, 2)
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    first, second = receive_all(consumer)
    with c.client.transaction(60) as earlier:  # the coordinator now knows the log's partitions
        consumer.acknowledge(first, txn=earlier)
    txn = c.client.transaction(120)
    consumer.acknowledge(second, txn=txn)
    consumer.unsubscribe()
    started = time.monotonic()
    getattr(txn, end)()
    assert time.monotonic() - started < 10
    assert txn.state is (TransactionState.COMMITTED if end == "commit" else TransactionState.ABORTED)
