"""The consumer's in-memory bookkeeping after a transaction's outcome (pending-ack review, session 40)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import Cluster, fill_topic, receive_all

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("how", ["txn", "plain"])
def test_an_ack_drops_the_redelivery_count_of_a_nacked_message(
    cluster: Callable[..., Cluster], uid: str, how: str
) -> None:
    """A message nacked and then acked (plainly, or in a transaction that commits) starts from 0 when a
    seek back delivers it again: a stale count would send it to the DLQ one nack early."""
    c = cluster()
    topic = f"nackack_{uid}"
    fill_topic(c, topic, 1)
    cons = c.client.subscribe(
        topic, f"s_{uid}", initial_position="Earliest", negative_ack_redelivery_delay_ms=1000
    )
    m = cons.receive(5000)
    cons.negative_acknowledge(m)
    if how == "txn":
        with c.client.transaction(60) as txn:
            cons.acknowledge(m, txn=txn)
    else:
        cons.acknowledge(m)
    assert receive_all(cons, 1500) == []
    assert not cons._redelivery_counts
    cons.seek(m.message_id)
    again = cons.receive(5000)
    assert again.data == m.data
    assert again.redelivery_count == 0


@pytest.mark.parametrize("plain", ["individual", "cumulative"])
def test_an_aborted_txn_leaves_nothing_of_a_message_acked_plainly_meanwhile(
    cluster: Callable[..., Cluster], uid: str, plain: str
) -> None:
    """Acked in a transaction, then plainly, then the transaction aborts: the message stays acked (as
    Pulsar's plain ack clears the pending position) and the consumer holds nothing of it."""
    c = cluster()
    topic = f"ackabort_{uid}"
    fill_topic(c, topic, 3)
    cons = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    ms = [cons.receive(5000) for _ in range(3)]
    txn = c.client.transaction(60)
    cons.acknowledge(ms[1], txn=txn)
    if plain == "individual":
        cons.acknowledge(ms[1])
    else:
        cons.acknowledge_cumulative(ms[1])
    txn.abort()
    for m in (ms[0], ms[2]):
        cons.acknowledge(m)
    assert receive_all(cons, 1500) == []
    assert not cons._in_txn
    assert not cons._txn_offsets
