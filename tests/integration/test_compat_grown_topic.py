"""Readers follow a topic that grows (review of session 44): the compat ``get_topic_partitions`` asks
every time, as pulsar-client does; a message of an added partition of a topic that had one is named
with ``-partition-N``; a ``read_next`` that waits finds partitions added meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

import pulsar_txn.compat as pulsar
import pulsar_txn.reader as reader_module
from pulsar_txn import EARLIEST
from tests.conftest import Cluster, compat_options

pytestmark = pytest.mark.integration


@contextmanager
def _compat_client(c: Cluster) -> Iterator[pulsar.Client]:
    client = pulsar.Client(c.coordinator.url or "", **compat_options(c))
    try:
        yield client
    finally:
        client.close()


def test_get_topic_partitions_sees_partitions_added_by_another_process(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"cg{uid}"
    with _compat_client(c) as client:
        c.client.create_topic(topic, 2)
        assert len(client.get_topic_partitions(topic)) == 2
        c.client._admin.add_partitions(topic, 4)
        assert client.get_topic_partitions(topic) == [
            f"persistent://public/default/{topic}-partition-{i}" for i in range(4)
        ]


def test_a_message_of_a_partition_added_to_a_one_partition_topic_names_its_partition(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "PARTITIONS_REFRESH_S", 0.2)
    c = cluster(tb_service_enabled=False)
    topic = f"cn{uid}"
    c.client.create_topic(topic, 1)
    with _compat_client(c) as client:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        c.client.create_producer(topic).send(b"p0")
        assert reader.read_next(10_000).topic_name() == f"persistent://public/default/{topic}"
        _grow_and_send_to_partition_2(c, topic)
        msg = reader.read_next(10_000)
        assert msg.data() == b"p2"
        assert msg.topic_name() == f"persistent://public/default/{topic}-partition-2"


def test_a_waiting_read_next_finds_a_partition_added_meanwhile(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It looked for added partitions only when called: a read_next waiting 30 s found none."""
    monkeypatch.setattr(reader_module, "PARTITIONS_REFRESH_S", 0.2)
    c = cluster(tb_service_enabled=False)
    topic = f"cw{uid}"
    c.client.create_topic(topic, 1)
    reader = c.client.create_reader(topic, EARLIEST)
    got: list[bytes] = []
    waiting = threading.Thread(target=lambda: got.append(reader.read_next(20_000).data()))
    waiting.start()
    time.sleep(0.5)  # read_next is waiting
    c.client._admin.add_partitions(topic, 2)
    c.client.create_producer(f"{topic}-partition-1").send(b"p1")
    started = time.monotonic()
    waiting.join(30)
    assert got == [b"p1"] and time.monotonic() - started < 10
    reader.close()


def test_the_first_message_a_consumer_gets_from_an_added_partition_names_its_partition(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing read from partition 0 first: the first message took the count the client had cached
    (1), and was named without '-partition-N' (diff review of session 44)."""
    import pulsar_txn.consumer as consumer_module

    monkeypatch.setattr(consumer_module, "PARTITIONS_REFRESH_MS", 1000)
    c = cluster(tb_service_enabled=False)
    topic = f"cf{uid}"
    c.client.create_topic(topic, 1)
    with _compat_client(c) as client:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        _grow_and_send_to_partition_2(c, topic)
        msg = consumer.receive(20_000)
        assert msg.data() == b"p2"
        assert msg.topic_name() == f"persistent://public/default/{topic}-partition-2"


def _grow_and_send_to_partition_2(c: Cluster, topic: str) -> None:
    c.client._admin.add_partitions(topic, 3)
    c.client.create_producer(f"{topic}-partition-2").send(b"p2")
