"""Publishing scenarios P1-P8 (SCENARIOS.md), on the public API only."""

from __future__ import annotations

import pytest

import pulsar_txn
from compat_tests._helpers import drain, read_all, values

pytestmark = pytest.mark.integration


def _partition(topic: str, p: int = 0) -> str:
    return f"persistent://public/default/{topic}-partition-{p}"


def test_P1_interleaved_transactions_invisible_until_commit(client: pulsar_txn.Client, uid: str) -> None:
    topic = f"p1_{uid}"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "p1", initial_position="Earliest")
    t1, t2 = client.transaction(120), client.transaction(120)
    sent = []
    for i in range(1000):
        producer.send_async(f"m{i}", txn=t1 if i % 2 == 0 else t2)
        sent.append(f"m{i}")
    producer.flush()
    with pytest.raises(pulsar_txn.Timeout):
        consumer.receive(1000)
    t1.commit()
    # t2's first message (offset 1) pins the partition: only m0 is below it.
    assert values(drain(consumer, 500, expect=1)) == ["m0"]
    t2.commit()
    got = ["m0", *values(drain(consumer, 500, expect=999))]
    assert got == sent


def test_P2_aborted_messages_never_delivered_and_subscription_moves_past_them(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"p2_{uid}"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "p2", initial_position="Earliest")
    txn = client.transaction(60)
    for i in range(10):
        producer.send(f"aborted-{i}", txn=txn)
    txn.abort()
    producer.send("after")
    msg = consumer.receive(5000)
    assert msg.data == b"after" and msg.message_id.offset == 11  # past 10 messages and the marker
    consumer.acknowledge(msg)
    assert drain(consumer, 500) == []


def test_P3_open_transaction_holds_back_later_plain_messages_until_commit(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"p3_{uid}"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "p3", initial_position="Earliest")
    for i in range(10):
        producer.send(f"a{i}")
    txn = client.transaction(60)
    for i in range(10):
        producer.send(f"t{i}", txn=txn)
    for i in range(10):
        producer.send(f"b{i}")
    assert values(drain(consumer, 800, expect=10)) == [f"a{i}" for i in range(10)]
    txn.commit()
    rest = [f"t{i}" for i in range(10)] + [f"b{i}" for i in range(10)]
    assert values(drain(consumer, 500, expect=20)) == rest


def test_P4_max_read_position_follows_plain_publishes_pinned_by_open_txn_moves_past_marker(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin, uid: str
) -> None:
    topic = f"p4_{uid}"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)

    def max_read_position() -> int:
        return int(admin.transaction_buffer_stats(topic)[_partition(topic)]["max_read_position"])

    ids = [producer.send(f"plain{i}") for i in range(3)]
    assert max_read_position() == 3
    assert client.get_last_message_ids(topic) == {0: ids[-1]}
    txn = client.transaction(60)
    first = producer.send("txn", txn=txn)
    after = producer.send("plain-after")
    assert max_read_position() == first.offset == 3  # pinned, even after a later plain message
    assert client.get_last_message_ids(topic) == {0: ids[-1]}
    txn.commit()
    assert max_read_position() == 6  # past the commit marker at offset 5
    assert client.get_last_message_ids(topic) == {0: after}


def test_P5_one_marker_of_the_outcome_per_partition_and_markers_never_delivered(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin, uid: str
) -> None:
    topic = f"p5_{uid}"
    client.create_topic(topic, 3)
    producer = client.create_producer(topic)
    with client.transaction(60) as committed:
        for i in range(9):
            producer.send(f"c{i}", txn=committed, partition_key=f"k{i}")
    aborted = client.transaction(60)
    for i in range(9):
        producer.send(f"a{i}", txn=aborted, partition_key=f"k{i}")
    aborted.abort()
    stats = admin.transaction_buffer_stats(topic)
    for p in range(3):
        s = stats[_partition(topic, p)]
        assert (s["markers"], s["committed_txns"], s["aborted_txns"], s["duplicate_markers"]) == (2, 1, 1, 0)
    got = read_all(client.create_reader(topic), 500, expect=9)
    assert sorted(values(got)) == sorted(f"c{i}" for i in range(9))  # no marker, no aborted message


def test_P6_ten_transactions_of_1000_messages_keep_publish_order_per_partition(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"p6_{uid}"
    client.create_topic(topic, 2)
    producer = client.create_producer(topic)
    txns = [client.transaction(180) for _ in range(10)]
    sent: list[str] = []
    for i in range(1000):
        for t, txn in enumerate(txns):
            producer.send_async(f"{t}-{i}", txn=txn, partition_key=f"key-{(i + t) % 5}")
            sent.append(f"{t}-{i}")
    for txn in txns:
        txn.commit()
    got = read_all(client.create_reader(topic), 500, expect=10_000)
    assert sorted(values(got)) == sorted(sent)
    position = {v: n for n, v in enumerate(sent)}
    per_partition: dict[int, list[int]] = {}
    for m in got:
        per_partition.setdefault(m.message_id.partition, []).append(position[m.data.decode()])
    assert len(per_partition) == 2
    for order in per_partition.values():
        assert order == sorted(order)  # each partition delivers in publish order


def test_P7_transaction_over_three_topics_visible_together_after_commit_none_after_abort(
    client: pulsar_txn.Client, uid: str
) -> None:
    topics = [f"p7_{uid}_{n}" for n in range(3)]
    for t in topics:
        client.create_topic(t, 1)
    producers = [client.create_producer(t) for t in topics]
    readers = [client.create_reader(t) for t in topics]
    aborted, committed = client.transaction(60), client.transaction(60)
    for p in producers:
        p.send("no", txn=aborted)
        p.send("yes", txn=committed)
    assert all(read_all(r, 300) == [] for r in readers)
    aborted.abort()
    assert all(read_all(r, 300) == [] for r in readers)  # the committed txn is still open
    committed.commit()
    assert [values(read_all(r, 300, expect=1)) for r in readers] == [["yes"], ["yes"], ["yes"]]


def test_P8_transactional_messages_carry_their_txn_id(client: pulsar_txn.Client, uid: str) -> None:
    topic = f"p8_{uid}"
    client.create_topic(topic, 1)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "p8", initial_position="Earliest")
    with client.transaction(60) as txn:
        producer.send("in-txn", txn=txn)
    producer.send("plain")
    first, second = consumer.receive(5000), consumer.receive(5000)
    assert isinstance(first.txn_id, pulsar_txn.TxnID)
    assert first.txn_id == txn.txn_id and second.txn_id is None
    assert str(first.txn_id) == f"({txn.txn_id.most_bits},{txn.txn_id.least_bits})"
