"""Acknowledging scenarios A1-A8 (SCENARIOS.md), on the public API only."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import pulsar_txn
from compat_tests._helpers import drain, pending_acks, publish, read_all, receive_n, values, wait_until

pytestmark = pytest.mark.integration

Clients = Callable[..., pulsar_txn.Client]


def test_A1_acks_in_aborted_txn_redelivered_then_committed_acks_never_redelivered_even_after_restart(
    client: pulsar_txn.Client, clients: Clients, uid: str
) -> None:
    topic, sub = f"a1_{uid}", "a1"
    publish(client, topic, 1000)
    consumer = client.subscribe(topic, sub, initial_position="Earliest")
    msgs = receive_n(consumer, 1000)
    txn = client.transaction(120)
    for m in msgs:
        consumer.acknowledge(m, txn=txn)
    consumer.redeliver_unacknowledged_messages()  # pending in the txn: nothing to redeliver
    assert drain(consumer, 800) == []
    txn.abort()
    again = drain(consumer, 500, expect=1000)
    assert sorted(values(again)) == sorted(values(msgs))
    assert {m.redelivery_count for m in again} == {1}
    with client.transaction(120) as txn2:
        for m in again:
            consumer.acknowledge(m, txn=txn2)
    assert pending_acks(consumer) == 0
    consumer.redeliver_unacknowledged_messages()
    assert drain(consumer, 800) == []
    consumer.close()
    restarted = clients().subscribe(topic, sub)  # a new process on the same subscription
    assert drain(restarted, 1500) == []


def test_A2_pending_ack_count_10_then_0_on_commit_without_redelivery_and_on_abort_with_it(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin, uid: str
) -> None:
    topic = f"a2_{uid}"
    publish(client, topic, 20)
    consumer = client.subscribe(topic, "a2", initial_position="Earliest")
    msgs = receive_n(consumer, 20)
    committed, aborted = client.transaction(60), client.transaction(60)
    for m in msgs[:10]:
        consumer.acknowledge(m, txn=committed)
    assert pending_acks(consumer) == 10
    committed.commit()
    assert pending_acks(consumer) == 0
    assert drain(consumer, 500) == []
    for m in msgs[10:]:
        consumer.acknowledge(m, txn=aborted)
    assert pending_acks(consumer) == 10
    aborted.abort()
    assert pending_acks(consumer) == 0
    assert sorted(values(drain(consumer, 500, expect=10))) == sorted(values(msgs[10:]))
    durable = admin.pending_ack_stats(topic, "a2")[f"persistent://public/default/{topic}-partition-0"]
    assert durable["pending_ack_count"] == 0


def test_A3_second_txn_acking_same_message_conflicts_until_first_aborts(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"a3_{uid}"
    publish(client, topic, 1)
    consumer = client.subscribe(topic, "a3", initial_position="Earliest")
    m = consumer.receive(5000)
    a, b = client.transaction(60), client.transaction(60)
    consumer.acknowledge(m, txn=a)
    with pytest.raises(pulsar_txn.TransactionConflict):
        consumer.acknowledge(m, txn=b)
    a.abort()
    again = consumer.receive(5000)
    assert again.message_id == m.message_id
    c = client.transaction(60)
    consumer.acknowledge(again, txn=c)
    c.commit()
    assert drain(consumer, 500) == []


def test_A4_repeated_cumulative_ack_in_one_txn_conflicts_and_several_ids_not_allowed(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"a4_{uid}"
    publish(client, topic, 5)
    consumer = client.subscribe(topic, "a4", initial_position="Earliest")
    msgs = receive_n(consumer, 5)
    txn = client.transaction(60)
    consumer.acknowledge_cumulative(msgs[3], txn=txn)
    with pytest.raises(pulsar_txn.TransactionConflict):
        consumer.acknowledge_cumulative(msgs[3], txn=txn)  # same position
    with pytest.raises(pulsar_txn.TransactionConflict):
        consumer.acknowledge_cumulative(msgs[1], txn=txn)  # lower position
    other = client.transaction(60)
    with pytest.raises(pulsar_txn.NotAllowedError):
        consumer.acknowledge_cumulative([msgs[0].message_id, msgs[1].message_id], txn=other)


def test_A5_cumulative_ack_conflicts_with_other_txn_and_abort_redelivers_all_five(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"a5_{uid}"
    publish(client, topic, 5)
    consumer = client.subscribe(topic, "a5", initial_position="Earliest")
    msgs = receive_n(consumer, 5)
    a, b = client.transaction(60), client.transaction(60)
    consumer.acknowledge_cumulative(msgs[3], txn=a)
    with pytest.raises(pulsar_txn.TransactionConflict):
        consumer.acknowledge_cumulative(msgs[3], txn=b)
    with pytest.raises(pulsar_txn.TransactionConflict):
        consumer.acknowledge(msgs[2], txn=b)
    a.abort()
    consumer.redeliver_unacknowledged_messages()
    assert sorted(values(drain(consumer, 500, expect=5))) == sorted(values(msgs))


def test_A6_acking_committed_positions_conflicts_aborted_positions_ackable_again(
    client: pulsar_txn.Client, uid: str
) -> None:
    topic = f"a6_{uid}"
    publish(client, topic, 2)
    consumer = client.subscribe(topic, "a6", initial_position="Earliest")
    msgs = receive_n(consumer, 2)
    with client.transaction(60) as t1:
        consumer.acknowledge(msgs[0], txn=t1)
    with pytest.raises(pulsar_txn.TransactionConflict):
        consumer.acknowledge(msgs[0], txn=client.transaction(60))
    t3 = client.transaction(60)
    consumer.acknowledge(msgs[1], txn=t3)
    t3.abort()
    t4 = client.transaction(60)
    consumer.acknowledge(msgs[1], txn=t4)  # allowed again after the abort
    t4.commit()
    consumer.redeliver_unacknowledged_messages()
    assert drain(consumer, 800) == []


def test_A7_one_txn_acks_on_two_subscriptions_recorded_and_committed_together(
    client: pulsar_txn.Client, admin: pulsar_txn.TransactionsAdmin, uid: str
) -> None:
    topic = f"a7_{uid}"
    publish(client, topic, 1)
    s1 = client.subscribe(topic, "a7-one", initial_position="Earliest")
    s2 = client.subscribe(topic, "a7-two", initial_position="Earliest")
    m1, m2 = s1.receive(5000), s2.receive(5000)
    txn = client.transaction(60)
    s1.acknowledge(m1, txn=txn)
    s2.acknowledge(m2, txn=txn)
    full = f"persistent://public/default/{topic}"
    expected = [{"topic": full, "subscription": "a7-one"}, {"topic": full, "subscription": "a7-two"}]
    wait_until(
        lambda: sorted(admin.transaction_metadata(txn.txn_id)["subscriptions"], key=str) == expected,
        10,
        "the TC to record both subscriptions",
    )
    txn.commit()
    assert admin.transaction_status(txn.txn_id) == "COMMITTED"
    assert pending_acks(s1) == 0 and pending_acks(s2) == 0
    s1.redeliver_unacknowledged_messages()
    s2.redeliver_unacknowledged_messages()
    assert drain(s1, 500) == [] and drain(s2, 500) == []


def test_A8_consume_process_produce_crash_before_commit_then_exactly_once(
    client: pulsar_txn.Client, clients: Clients, admin: pulsar_txn.TransactionsAdmin, uid: str
) -> None:
    src, dst = f"a8in_{uid}", f"a8out_{uid}"
    publish(client, src, 20)
    client.create_topic(dst, 1)
    attempts = worked = crashes = 0
    committed_out: list[str] = []
    history: list[tuple[int, str]] = []
    while len(committed_out) < 20 and attempts < 12:  # bounded; every other working attempt crashes
        attempts += 1
        process = clients()  # each attempt is a fresh process
        consumer = process.subscribe(src, "pipeline", initial_position="Earliest", subscribe_timeout=30)
        batch = consumer.batch_receive(10, 5000)
        if not batch:
            history.append((0, "empty"))
            process.close()
            continue
        producer = process.create_producer(dst)
        worked += 1
        crash = worked % 2 == 1
        history.append((len(batch), "crash" if crash else "commit"))
        txn = process.transaction(3 if crash else 60)  # 3 s: the sends must fit in, even under load
        try:
            for m in batch:
                producer.send(m.data.decode().upper(), txn=txn)
                consumer.acknowledge(m, txn=txn)
        except pulsar_txn.InvalidTxnStatusError:
            assert crash  # a slow machine: the crashing attempt's txn timed out even before the crash
        if crash:
            crashes += 1
            process.close()  # the "crash": the process ends without ending its transaction
            wait_until(
                lambda t=txn: admin.transaction_status(t.txn_id) == "ABORTED", 30, "the TC timeout abort"
            )
            assert sorted(values(read_all(client.create_reader(dst), 500))) == committed_out
        else:
            txn.commit()
            committed_out = sorted(committed_out + [m.data.decode().upper() for m in batch])
            process.close()
    assert crashes >= 2 and len(committed_out) == 20, history
    leftover = clients().subscribe(src, "pipeline")
    assert drain(leftover, 1000) == []  # every input was acked, in committed transactions
    out = sorted(values(read_all(client.create_reader(dst), 500, expect=20)))
    assert out == sorted(f"M{i:04d}" for i in range(20))
