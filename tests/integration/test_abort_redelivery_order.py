"""An abort redelivers its messages in offset order also when one of them was waiting for
redelivery (nacked, or past its ack timeout) when the transaction acked it (review of session 44:
the waiting one was dropped when due, since pending, and fetched again after the others)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pulsar_txn.errors import Timeout
from tests.conftest import Cluster, fill_topic

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("how", ["ack_timeout", "nack", "nack_cumulative"])
def test_an_abort_redelivers_a_message_waiting_for_redelivery_in_offset_order(
    cluster: Callable[..., Cluster], uid: str, how: str
) -> None:
    c = cluster()
    topic = f"ord{uid}"
    fill_topic(c, topic, 3)
    opts = {"ack_timeout_millis": 1000} if how == "ack_timeout" else {"negative_ack_redelivery_delay_ms": 100}
    consumer = c.client.subscribe(topic, "sub", initial_position="Earliest", **opts)
    m0 = consumer.receive(5000)
    if how == "ack_timeout":
        time.sleep(0.6)
    m1, m2 = consumer.receive(5000), consumer.receive(5000)
    assert [m.message_id.offset for m in (m0, m1, m2)] == [0, 1, 2]
    if how == "ack_timeout":
        time.sleep(0.6)  # m0's ack timeout has passed, m1's and m2's not yet
    else:
        consumer.negative_acknowledge(m0)
        time.sleep(0.3)
    txn = c.client.transaction(60)
    if how == "nack_cumulative":
        consumer.acknowledge_cumulative(m2, txn=txn)
    else:
        consumer.acknowledge([m0, m1, m2], txn=txn)
    with pytest.raises(Timeout):
        consumer.receive(300)  # nothing while the transaction holds them (m0's redelivery is due)
    txn.abort()
    got = []
    for _ in range(3):
        msg = consumer.receive(5000)
        consumer.acknowledge(msg)
        got.append(msg)
    assert [m.message_id.offset for m in got] == [0, 1, 2]
    assert got[0].redelivery_count == 2 and [m.redelivery_count for m in got[1:]] == [1, 1]
    with pytest.raises(Timeout):
        consumer.receive(500)
    consumer.close()
