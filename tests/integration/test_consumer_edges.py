"""Consumer calls at their edges: receive(0) in a polling loop, seeks that are negative, past the end
or after a commit made elsewhere, a failed dead-letter send inside batch_receive, and arguments of
the wrong type, each checked against what Pulsar does."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pulsar_txn import ConfigError, DeadLetterPolicy, Message, MessageId, NotAllowedError, Timeout
from tests.conftest import Cluster, receive_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _topic_with(c: Cluster, topic: str, n: int) -> None:
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(n):
        producer.send_async(f"m{i}")
    producer.flush()


def test_a_receive_zero_polling_loop_gets_the_messages(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"recv0_{uid}"
    _topic_with(c, topic, 3)
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(got) < 3:
        try:
            got.append(consumer.receive(0).data)
        except Timeout:
            time.sleep(0.05)
    consumer.close()
    assert got == [b"m0", b"m1", b"m2"]


def test_seeks_to_a_negative_offset_or_past_the_end_are_refused_and_lose_nothing(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"seekbad_{uid}"
    _topic_with(c, topic, 3)
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    got = receive_all(consumer)
    consumer.acknowledge(got)
    kafka_topic = got[0].message_id.topic
    with pytest.raises(ConfigError, match="names no message"):
        consumer.seek(MessageId(kafka_topic, 0, -5))
    with pytest.raises(NotAllowedError, match="ends at offset 3"):
        consumer.seek(MessageId(kafka_topic, 0, 100))  # Pulsar refuses a position past the end
    consumer.seek(MessageId(kafka_topic, 0, 3))  # the end itself is fine
    producer = c.client.create_producer(topic)
    for i in range(3):
        producer.send(f"b{i}")
    assert sorted(m.data.decode() for m in receive_all(consumer, 2000)) == ["b0", "b1", "b2"]
    consumer.close()


def test_a_commit_made_elsewhere_before_a_seek_is_not_applied_after_it(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"seekcommit_{uid}"
    _topic_with(c, topic, 10)
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    msgs = sorted(receive_all(consumer), key=lambda m: m.message_id.offset)
    txn = c.client.transaction(60)
    consumer.acknowledge(msgs[:5], txn=txn)
    assert txn._wait_ops() is None  # the ack record is stored
    c.client.resume_transaction(txn.txn_id).commit()  # by id: this consumer learns of it from its log
    consumer.seek(msgs[0].message_id)
    again = sorted(m.message_id.offset for m in receive_all(consumer, 2000))
    consumer.close()
    assert again == list(range(10))  # the seek forgets acks past the position, committed ones too


def test_a_failed_dead_letter_send_in_batch_receive_keeps_the_messages_it_took(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"bdlf_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send("A")
    consumer = c.client.subscribe(
        topic,
        f"s_{uid}",
        initial_position="Earliest",
        negative_ack_redelivery_delay_ms=200,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    a = consumer.receive(5000)
    consumer.negative_acknowledge(a)
    a = consumer.receive(5000)  # redelivered once
    assert a.redelivery_count == 1
    producer.send("B")
    wait_until(lambda: (consumer._fill(0.05), len(consumer._incoming) > 0)[1], 10, what="B fetched")
    real, calls = consumer._dead_letter, []

    def failing(msg: Message[bytes], part: object) -> None:
        calls.append(msg.message_id)
        if len(calls) == 1:
            raise Timeout("dead-letter send failed (injected)")
        real(msg, part)  # type: ignore[arg-type]

    consumer._dead_letter = failing  # type: ignore[assignment]
    consumer.negative_acknowledge(a)  # due again in 0.2 s: then A goes to the DLQ
    # B is taken, then A's dead-letter send fails: B is returned, not lost with the error.
    batch = consumer.batch_receive(10, 1000)
    assert [m.data for m in batch] == [b"B"]
    consumer.acknowledge(batch)
    assert receive_all(consumer, 2500) == []  # A went to the DLQ on the retry, not to us
    assert len(calls) == 2
    consumer.close()


def test_arguments_of_the_wrong_type_are_config_errors(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"badargs_{uid}"
    _topic_with(c, topic, 1)
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = c.client.transaction(60)
    with pytest.raises(ConfigError, match="txn"):
        consumer.acknowledge(msg, txn=txn.txn_id)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="txn"):
        consumer.acknowledge_cumulative(msg, txn=str(txn.txn_id))  # type: ignore[arg-type]
    txn.abort()
    consumer.close()
    for bad in (0, -1, "3", 1.5):
        with pytest.raises(ConfigError, match="max_redeliver_count"):
            DeadLetterPolicy(max_redeliver_count=bad)  # type: ignore[arg-type]


def test_an_abort_releasing_a_read_ahead_message_delivers_it_once(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"dupabort_{uid}"
    _topic_with(c, topic, 10)
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest")
    first = consumer.receive(5000)
    # everything else is read ahead into the consumer's queue
    wait_until(lambda: (consumer._fill(0.05), len(consumer._incoming) >= 9)[1], 10, what="read ahead")
    txn = c.client.transaction(60)
    consumer.acknowledge(MessageId(first.message_id.topic, 0, 5), txn=txn)  # by id, not received yet
    txn.abort()
    got = receive_all(consumer, 1500)
    consumer.close()
    offsets = sorted(m.message_id.offset for m in got)
    assert offsets == list(range(1, 10))  # 5 once: from the queue, not refetched as well


def test_the_ack_timeout_spares_messages_under_a_pending_cumulative_ack(
    cluster: ClusterFactory, uid: str
) -> None:
    """A transaction's cumulative ack makes every message up to it pending: the ack timeout does not
    redeliver them meanwhile, and the abort brings each back once, counted once (none dead-lettered)."""
    c = cluster()
    topic = f"atcum_{uid}"
    _topic_with(c, topic, 3)
    consumer = c.client.subscribe(
        topic,
        f"s_{uid}",
        initial_position="Earliest",
        ack_timeout_millis=1000,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    msgs = sorted((consumer.receive(5000) for _ in range(3)), key=lambda m: m.message_id.offset)
    txn = c.client.transaction(60)
    consumer.acknowledge_cumulative(msgs[2], txn=txn)
    time.sleep(1.5)  # past the ack timeout of all three
    with pytest.raises(Timeout):
        consumer.receive(500)  # nothing to deliver while the transaction holds them
    txn.abort()
    got = []
    for _ in range(3):
        m = consumer.receive(5000)
        consumer.acknowledge(m)
        got.append((m.message_id.offset, m.redelivery_count))
    consumer.close()
    assert sorted(got) == [(0, 1), (1, 1), (2, 1)]


def test_unsubscribe_is_refused_while_other_consumers_are_connected(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"unsub_{uid}"
    _topic_with(c, topic, 3)
    first = c.client.subscribe(topic, f"fo_{uid}", consumer_type="Failover", initial_position="Earliest")
    second = c.client.subscribe(topic, f"fo_{uid}", consumer_type="Failover", initial_position="Earliest")
    with pytest.raises(NotAllowedError, match="other consumers"):
        first.unsubscribe()  # Pulsar refuses too; the consumer stays open
    try:
        first.receive(0)  # not NotAllowedError("consumer is closed")
    except Timeout:
        pass  # the other consumer holds the partition
    second.close()
    first.unsubscribe()
    with pytest.raises(NotAllowedError):
        first.receive(0)  # closed now
