"""A process killed inside ``unsubscribe()`` between its two deletions (the subscription's
pending-ack logs and its group) must leave the subscription whole or gone, never half: session 39's
crash review killed it after the group was deleted, and a subscription made again under the name took
the old one's committed transactional acks from the leftover log without its plain acks (messages
nobody acked there were never delivered, acked ones came back)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pulsar_txn.consumer import Consumer
from tests.conftest import Cluster, receive_all


class _Killed(BaseException):
    """The process dying at this point: nothing after it runs."""


def test_a_crash_between_the_deletions_of_unsubscribe_leaves_the_subscription_whole(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = cluster()
    topic, sub = f"unsubkill_{uid}", f"s_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(12):
        producer.send(f"m{i:02d}".encode())
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = sorted((consumer.receive(10_000) for _ in range(12)), key=lambda m: m.message_id.offset)
    with c.client.transaction(60) as txn:
        for m in msgs[0::2]:
            consumer.acknowledge(m, txn=txn)
    for m in msgs[1::4]:
        consumer.acknowledge(m)
    time.sleep(0.5)  # past the cursor's commit interval

    def killed(_self: Consumer) -> None:
        raise _Killed  # whatever unsubscribe deletes second is not deleted

    monkeypatch.setattr(Consumer, "_delete_group", killed)
    with pytest.raises(_Killed):
        consumer.unsubscribe()
    monkeypatch.undo()
    other = c.other_client()
    try:
        again = other.subscribe(topic, sub, initial_position="Earliest")
        got = sorted(m.data for m in receive_all(again))
        assert got == [b"m03", b"m07", b"m11"]  # the subscription as it was: nothing lost, nothing back
        again.unsubscribe()  # completes it
        fresh = other.subscribe(topic, sub, initial_position="Earliest")
        assert len(receive_all(fresh)) == 12
        fresh.close()
    finally:
        other.close()
