"""Acks of messages this consumer has not read up to yet (received before a restart, or their ids
kept elsewhere): Pulsar's broker takes an ack of any valid position. They were refused with
NotAllowedError ("no readable message there") until the consumer's first receive scanned the
partition, and a transactional one then aborted its transaction (found by a review of session 33;
the test failed before the fix)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_txn import MessageId, NotAllowedError
from tests.conftest import Cluster, receive_all
from tests.integration.test_subscriptions import _setup

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def test_a_restarted_consumer_acks_ids_received_before_the_restart_without_receiving_first(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic, sub = f"ack_early_{uid}", f"sub_{uid}"
    _setup(c, topic, 5)
    first = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = [first.receive(5000) for _ in range(5)]
    first.close()
    second = c.client.subscribe(topic, sub, initial_position="Earliest")
    second.acknowledge(msgs[0].message_id)
    second.acknowledge_cumulative(msgs[1].message_id)
    txn = c.client.transaction(60)
    second.acknowledge(msgs[3].message_id, txn=txn)
    txn.commit()
    with pytest.raises(NotAllowedError, match="no readable message"):
        second.acknowledge(MessageId(msgs[4].message_id.topic, 0, 99))  # nothing written there
    assert [m.message_id for m in receive_all(second, 3000)] == [msgs[2].message_id, msgs[4].message_id]
    second.close()
