"""A subscription's mark-delete passes the records it never delivers (commit/abort markers, messages
of aborted transactions), as Pulsar's dispatcher acks them: once every delivered message of a topic
that transactions write to is acked, the committed cursor is at the partition's end with no acked
ranges left. Before, it stopped at the first marker, and the acked ranges behind it (persisted in the
group's metadata, re-encoded every cursor commit) grew by one per transaction until they no longer
fitted, when plain acks could be redelivered after a restart."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafka_store import PartitionReader, group_offsets
from tests.conftest import Cluster, receive_all, wait_until

pytestmark = pytest.mark.integration


def test_the_mark_delete_passes_markers_and_aborted_messages(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    topic, sub = f"marks_{uid}", f"s_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(30):
        txn = c.client.transaction(60)
        producer.send(f"m{i}".encode(), txn=txn)
        if i % 3 == 2:
            txn.abort()
        else:
            txn.commit()
        if i % 5 == 0:
            producer.send(f"plain{i}".encode())
    reader = PartitionReader(c.client.kafka)
    try:
        end = reader.watermarks(topic, 0)[1]
    finally:
        reader.close()

    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    got = receive_all(consumer)
    assert len(got) == 20 + 6  # the committed and the plain ones
    for m in got:
        consumer.acknowledge(m)
    kafka_topic = got[0].message_id.topic
    part = consumer._parts[(kafka_topic, 0)]
    wait_until(lambda: part.cursor.mark_delete == end, 10, what="the mark-delete at the partition's end")
    assert len(part.cursor.acked) == 0
    tp = (kafka_topic, 0)
    wait_until(
        lambda: group_offsets(c.client.kafka, sub, [tp])[tp][0] == end, 10, what="the cursor committed"
    )
    consumer.close()

    again = c.client.subscribe(topic, sub)
    assert receive_all(again) == []
    again.close()


def test_skipped_records_of_one_partition_are_not_acked_in_another(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    topic, sub = f"marks2_{uid}", f"s_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(f"{topic}-partition-0")
    plain = c.client.create_producer(f"{topic}-partition-1")
    for i in range(5):
        with c.client.transaction(60) as txn:
            producer.send(f"t{i}".encode(), txn=txn)
        plain.send(f"p{i}".encode())
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    got = receive_all(consumer)
    assert len(got) == 10
    by_partition = {p: [m for m in got if m.message_id.partition == p] for p in (0, 1)}
    for m in by_partition[0]:
        consumer.acknowledge(m)
    kafka_topic = got[0].message_id.topic
    # Partition 0: messages at even offsets, markers at odd ones: all acked now. Partition 1: nothing
    # was skipped, and nothing of it acked.
    assert consumer._parts[(kafka_topic, 0)].cursor.mark_delete == 10
    one = consumer._parts[(kafka_topic, 1)].cursor
    assert (one.mark_delete, len(one.acked)) == (0, 0)
    consumer.close()
