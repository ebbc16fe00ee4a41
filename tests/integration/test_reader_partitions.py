"""A Reader of a partitioned topic: a seek on one partition keeps what the others delivered, and
partitions added to the topic are read (found in review, session 35; each failed before its fix)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import pulsar_txn.reader as reader_module
from kafka_store import KafkaConfig, TopicAdmin
from pulsar_txn import EARLIEST
from tests.conftest import Cluster, read_all

pytestmark = pytest.mark.integration


@pytest.fixture
def c(cluster: Callable[..., Cluster]) -> Cluster:
    return cluster(tb_service_enabled=False)


def test_a_seek_on_one_partition_keeps_the_others_messages(c: Cluster, uid: str) -> None:
    """The reader had fetched messages of both partitions; a seek on partition 0 dropped partition
    1's fetched messages too, though only partition 0 was read again: they were never delivered."""
    topic = f"seekp_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    ids = [producer.send(b"m%d" % i) for i in range(20)]
    first_of_0 = min((m for m in ids if m.partition == 0), key=lambda m: m.offset)
    reader = c.client.create_reader(topic, EARLIEST, start_message_id_inclusive=True)
    got = []
    while len({m.message_id.partition for m in got}) < 2:
        got.append(reader.read_next(5000))
    reader.seek(first_of_0)
    got += read_all(reader, 2000)
    reader.close()
    of_1 = sorted(m.message_id.offset for m in got if m.message_id.partition == 1)
    assert of_1 == sorted(m.offset for m in ids if m.partition == 1)


def test_readers_and_last_message_ids_see_partitions_added_to_the_topic(
    c: Cluster, uid: str, kafka: KafkaConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"grow_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(4):
        producer.send(b"m%d" % i)
    monkeypatch.setattr(reader_module, "PARTITIONS_REFRESH_S", 0.5)
    before = c.client.create_reader(topic, EARLIEST)
    TopicAdmin(kafka).add_partitions(topic, 3)
    with c.other_client() as other:
        new = other.create_producer(f"{topic}-partition-2").send(b"in new partition")
    assert c.client.get_last_message_ids(topic)[2] == new

    def read(reader: Any) -> list[tuple[int, bytes]]:
        out = sorted((m.message_id.partition, m.data) for m in read_all(reader, 1500))
        reader.close()
        return out

    expected = [*[(p, d) for p, d in read(c.client.create_reader(f"{topic}-partition-0", EARLIEST))]]
    expected += read(c.client.create_reader(f"{topic}-partition-1", EARLIEST))
    expected = sorted([*expected, (2, b"in new partition")])
    assert read(c.client.create_reader(topic, EARLIEST)) == expected  # made after the growth
    assert read(before) == expected  # made before it: finds the new partition
