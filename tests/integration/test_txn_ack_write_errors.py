"""A transactional ack whose pending-ack write fails says why, as a failed send does: the storage
error translated (a missing topic is ``TopicNotFound``, not retriable; a deadline
reached first, ``ConnectError``) and chained as the cause.
It was a ``PersistenceError`` that always said retriable, inviting a retry inside a doomed txn."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kafka_store import TopicAdmin
from kafka_store.errors import StoreError
from pulsar_txn.errors import (
    ConnectError,
    PulsarTxnError,
    TopicNotFound,
    TransactionHasOperationFailed,
    from_store_error,
)
from tests.conftest import Cluster, fill_topic

pytestmark = pytest.mark.integration


def test_a_failed_pending_ack_write_is_translated_and_chained(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    topic = f"pa_err_{uid}"
    fill_topic(c, topic, 2)
    client = c.other_client(operation_timeout_seconds=3)
    try:
        consumer = client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
        first, second = consumer.receive(10_000), consumer.receive(10_000)
        with client.transaction(60) as txn:
            consumer.acknowledge(first, txn=txn)  # creates the pending-ack topic
        admin = TopicAdmin(c.kafka)
        try:
            admin.delete_topics(
                [n for n in admin.list_topics() if n.startswith(topic) and "pending_ack" in n]
            )
        finally:
            admin.close()
        time.sleep(0.5)
        txn = client.transaction(60)
        with pytest.raises(PulsarTxnError) as failed:
            consumer.acknowledge_async(second, txn=txn).result(30)  # failed after the 3 s deadline
        # librdkafka says "unknown topic" or, its deadline reached first, "message timed out".
        cause = failed.value.__cause__
        assert isinstance(cause, StoreError)
        assert type(failed.value) is type(from_store_error(cause))
        assert type(failed.value) in (TopicNotFound, ConnectError)
        assert failed.value.retriable == cause.retriable
        with pytest.raises(TransactionHasOperationFailed):
            txn.commit()
    finally:
        client.close()
