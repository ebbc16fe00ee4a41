"""Redelivery bookkeeping across acks, aborts and seeks: counts of acked messages are forgotten,
and a message released by an abort is never delivered twice when a seek races its re-read."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import pulsar_txn.subscription._outcomes as outcomes_module
from pulsar_txn import EARLIEST, DeadLetterPolicy, Timeout
from tests.conftest import fill_topic, receive_all

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("how", ["individual", "cumulative"])
def test_an_acked_message_comes_back_after_a_seek_with_its_redelivery_count_reset(
    cluster: Any, uid: str, how: str
) -> None:
    """A message redelivered once and then acked (individually or cumulatively) is delivered after a
    seek back with redelivery_count 0, and one nack then redelivers it: its old count would send it
    to the dead-letter topic (max 1) without the application seeing it again."""
    c = cluster()
    topic, sub = f"rc_{how[:3]}_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 1)
    consumer = c.client.subscribe(
        topic,
        sub,
        initial_position="Earliest",
        negative_ack_redelivery_delay_ms=50,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    msg = consumer.receive(5000)
    consumer.negative_acknowledge(msg)
    msg = consumer.receive(5000)
    assert msg.redelivery_count == 1
    if how == "individual":
        consumer.acknowledge(msg)
    else:
        consumer.acknowledge_cumulative(msg)
    consumer.seek(EARLIEST)
    again = consumer.receive(5000)
    assert again.data == b"m0000"
    assert again.redelivery_count == 0
    consumer.negative_acknowledge(again)
    try:
        third = consumer.receive(5000)
    except Timeout:
        pytest.fail("one nack after the seek sent the message to the dead-letter topic")
    assert (third.data, third.redelivery_count) == (b"m0000", 1)
    consumer.close()


def test_a_seek_during_the_reread_of_an_aborted_ack_delivers_the_message_once(
    cluster: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B read past m0000 while another consumer's transaction held its ack; the abort makes B read
    m0000 again (it never delivered it). A seek back while that read is in flight has the reader
    deliver m0000 too: it must come once, not twice."""
    c = cluster()
    topic, sub = f"rs_{uid}", f"sub_{uid}"
    fill_topic(c, topic, 5)
    a = c.client.subscribe(topic, sub, initial_position="Earliest")
    first = [a.receive(5000) for _ in range(5)]
    txn = c.client.transaction(120)
    a.acknowledge(first[0], txn=txn)
    a.close()
    b = c.client.subscribe(topic, sub, initial_position="Earliest")
    assert [m.data for m in receive_all(b, 1000)] == [b"m0001", b"m0002", b"m0003", b"m0004"]
    entered = threading.Event()
    real = outcomes_module.read_range

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        time.sleep(2.0)  # widens the window a real read has
        return real(*args, **kwargs)

    monkeypatch.setattr(outcomes_module, "read_range", slow_read)
    txn.abort()
    assert entered.wait(20), "the released message was never read again"
    b.seek(EARLIEST)
    time.sleep(3.0)  # the re-read ends before the application receives again
    got = [m.data for m in receive_all(b, 3000)]
    assert sorted(got) == [b"m0000", b"m0001", b"m0002", b"m0003", b"m0004"], got
    b.close()
