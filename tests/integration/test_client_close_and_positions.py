"""Closing the client closes its producers and readers; positions and publish times a reader or
consumer cannot seek to are refused with ConfigError; a record schema refuses None (review,
session 26)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from pulsar_txn import EARLIEST, MessageId
from pulsar_txn.errors import AlreadyClosed, ConfigError, NotAllowedError, SchemaSerializationError
from pulsar_txn.schema import JsonSchema
from tests.conftest import Cluster, read_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _topic_of_three(c: Cluster, topic: str) -> str:
    """A one-partition topic holding m0, m1, m2 at offsets 0, 1, 2."""
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}")
    return topic


def test_closing_the_client_closes_its_readers_and_producers(cluster: ClusterFactory, uid: str) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"close_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send(b"a")
    reader = c.client.create_reader(topic, EARLIEST)
    assert reader.read_next(5000).data == b"a"
    c.client.close()
    # The reader kept reading (a message sent by another client arrived) and held its Kafka
    # connections; the producer said it was open.
    assert producer.closed
    with pytest.raises(NotAllowedError):
        reader.read_next(500)
    with pytest.raises(NotAllowedError):
        producer.send(b"b")
    producer.close()  # closing again after the client: no error (it raised "client is closed")
    reader.close()


def test_a_producer_closed_after_its_client_closes_quietly(cluster: ClusterFactory, uid: str) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"pclose_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send(b"a")
    getattr(c.client, "_open_handles", set()).discard(producer)  # as if made as close() ran
    c.client.close()
    producer.close()
    assert producer.closed


@pytest.mark.parametrize("which", ["partition", "topic"])
def test_a_reader_started_at_an_id_of_another_partition_or_topic_is_refused(
    cluster: ClusterFactory, uid: str, which: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = _topic_of_three(c, f"foreign_{uid}")
    # It read from offset 0 (another partition) or from offset 3 of this topic (another topic's id).
    foreign = MessageId(topic, 7, 1) if which == "partition" else MessageId(f"other_{uid}", 0, 1)
    with pytest.raises(ConfigError):
        c.client.create_reader(topic, foreign)
    # The same id of this topic's partition still works.
    ok = c.client.create_reader(topic, MessageId(topic, 0, 0))
    assert [m.data for m in read_all(ok)] == [b"m1", b"m2"]
    ok.close()


@pytest.mark.parametrize("position", [(0, -5), (-3, 0), (0, 1 << 63)])
def test_a_reader_refuses_message_ids_that_name_no_message(
    cluster: ClusterFactory, uid: str, position: tuple[int, int]
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"badid_{uid}"
    c.client.create_topic(topic, 1)
    reader = c.client.create_reader(topic, EARLIEST)
    try:
        # A negative offset was taken as one of Kafka's special positions, or failed in librdkafka
        # at the next read_next with an untyped KafkaException.
        with pytest.raises(ConfigError):
            reader.seek(MessageId(topic, *position))  # negative ones: refused when built
        with pytest.raises(ConfigError):
            c.client.create_reader(topic, MessageId(topic, *position))
    finally:
        reader.close()


@pytest.mark.parametrize("at", [-1, -2, 1 << 63])
def test_seeking_to_a_publish_time_outside_int64_or_before_the_epoch_is_refused(
    cluster: ClusterFactory, uid: str, at: int
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"badtime_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send(b"a")
    reader = c.client.create_reader(topic, EARLIEST)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    try:
        # -1 went to Kafka as "latest" (the reader then skipped everything), 2**63 raised an
        # OverflowError from the Kafka client.
        with pytest.raises(ConfigError):
            reader.seek(at)
        with pytest.raises(ConfigError):
            consumer.seek(at)
        assert reader.read_next(5000).data == b"a"  # nothing moved
    finally:
        reader.close()
        consumer.close()


@dataclass
class Rec:
    name: str


def test_a_record_schema_refuses_none_as_the_value(cluster: ClusterFactory, uid: str) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"none_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic, schema=JsonSchema(Rec))
    with pytest.raises(SchemaSerializationError):
        producer.send(None)  # type: ignore[arg-type]  # it was sent as b"null"; readers got None
    producer.send(Rec("ok"))
    reader = c.client.create_reader(topic, EARLIEST, schema=JsonSchema(Rec))
    assert [m.value() for m in read_all(reader)] == [Rec("ok")]
    reader.close()


def test_a_reader_or_producer_made_while_the_client_closes_is_refused(
    cluster: ClusterFactory, uid: str
) -> None:
    """One made by another thread while close() waited for transaction ends was registered in a set
    nobody swept again: it stayed open and kept reading after the client closed (review, session 26)."""
    c = cluster(tb_service_enabled=False)
    topic = f"closerace_{uid}"
    c.client.create_topic(topic, 1)
    outcomes: list[str] = []
    real_wait = c.client._ends.wait_idle

    def wait_idle(timeout: float) -> bool:
        for make in (
            lambda: c.client.create_reader(topic, EARLIEST),
            lambda: c.client.create_producer(topic),
        ):
            try:
                make()
                outcomes.append("made")
            except AlreadyClosed:
                outcomes.append("refused")
        return real_wait(timeout)

    c.client._ends.wait_idle = wait_idle  # type: ignore[method-assign]
    c.client.close()
    assert outcomes == ["refused", "refused"]


def test_producers_and_readers_dropped_unclosed_are_not_kept_by_the_client(
    cluster: ClusterFactory, uid: str
) -> None:
    """A Spark writer made a producer per batch on a client cached for the process: a strong set of
    open handles grew for good."""
    import gc

    c = cluster(tb_service_enabled=False)
    topic = f"dropped_{uid}"
    c.client.create_topic(topic, 1)
    for _ in range(5):
        c.client.create_producer(topic).send(b"m")
    gc.collect()
    assert len(c.client._open_handles) == 0


def test_a_reader_takes_a_message_id_with_the_pulsar_name_of_its_topic(
    cluster: ClusterFactory, uid: str
) -> None:
    """A compat id (MessageId.deserialize(..., topic="persistent://...")) carries the Pulsar name."""
    c = cluster(tb_service_enabled=False)
    topic = _topic_of_three(c, f"pname_{uid}")
    reader = c.client.create_reader(topic, MessageId(f"persistent://public/default/{topic}", 0, 0))
    assert [m.data for m in read_all(reader)] == [b"m1", b"m2"]
    reader.seek(MessageId(f"persistent://public/default/{topic}", 0, 1))
    assert [m.data for m in read_all(reader)] == [b"m2"]
    reader.close()


def test_two_concurrent_closes_close_the_coordinator_client_once(cluster: ClusterFactory, uid: str) -> None:
    """close() checked each connection, then closed it: two close() calls at once could both close
    it, or find it gone between the check and the call."""
    import threading
    import time as _time

    c = cluster(tb_service_enabled=False)
    c.client.transaction(60).abort()  # the coordinator client exists
    tc = c.client._tc_client
    assert tc is not None
    calls: list[int] = []
    real_close = tc.close

    def slow_close() -> None:
        calls.append(1)
        _time.sleep(0.3)
        real_close()

    tc.close = slow_close  # type: ignore[method-assign]
    failures: list[BaseException] = []

    def close() -> None:
        try:
            c.client.close()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=close) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert failures == []
    assert calls == [1]
