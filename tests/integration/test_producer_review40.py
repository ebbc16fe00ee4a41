"""Producer and subscription behaviours found diverging from Pulsar's in the session-40 review."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from pulsar_txn.errors import ConfigError, ProducerBusy, SchemaSerializationError
from pulsar_txn.schema import JsonSchema
from tests.conftest import Cluster, receive_all

pytestmark = pytest.mark.integration


def test_a_subscription_on_one_partition_receives_only_that_partition(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """In Pulsar ``t-partition-N`` is a topic of its own; before, the consumer got every partition's
    messages (the group subscribes by topic), so e.g. one pipeline per input partition processed them all."""
    c = cluster()
    topic = f"onepart_{uid}"
    c.client.create_topic(topic, 3)
    producer = c.client.create_producer(topic)
    where = {k: producer.send(k, partition_key=k).partition for k in "abcdefghij"}
    assert len(set(where.values())) > 1
    for partition in range(3):
        consumer = c.client.subscribe(
            f"{topic}-partition-{partition}", f"s{partition}_{uid}", initial_position="Earliest"
        )
        got = receive_all(consumer)
        assert sorted(m.data for m in got) == sorted(k.encode() for k, p in where.items() if p == partition)
        assert {m.message_id.partition for m in got} <= {partition}
        consumer.close()
    # Two named partitions of the topic in one subscription: both, and no other.
    consumer = c.client.subscribe(
        [f"{topic}-partition-0", f"{topic}-partition-2"], f"s02_{uid}", initial_position="Earliest"
    )
    got = receive_all(consumer)
    assert sorted(m.data for m in got) == sorted(k.encode() for k, p in where.items() if p in (0, 2))
    consumer.close()


def test_a_second_producer_of_a_name_on_a_topic_is_producer_busy(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """As Pulsar's broker: (producer name, sequence id) names a message, so the name is taken once
    (checked within a client); free again once the first producer closed."""
    c = cluster()
    topic = f"pbusy_{uid}"
    c.client.create_topic(topic, 1)
    first = c.client.create_producer(topic, producer_name="dup")
    with pytest.raises(ProducerBusy, match="dup"):
        c.client.create_producer(topic, producer_name="dup")
    other_topic = f"pbusy2_{uid}"
    c.client.create_topic(other_topic, 1)
    c.client.create_producer(other_topic, producer_name="dup").close()  # another topic: fine
    first.close()
    c.client.create_producer(topic, producer_name="dup").send(b"x")


@pytest.mark.parametrize("when", [0, -1, -(2**63), 2**63])
def test_an_event_timestamp_must_be_positive_and_fit_in_64_bits(
    cluster: Callable[..., Cluster], uid: str, when: int
) -> None:
    """Pulsar's builder refuses ``timestamp <= 0``; stored, 0 read back as "no event time"."""
    c = cluster()
    topic = f"evt_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with pytest.raises(ConfigError, match="event_timestamp"):
        producer.send(b"x", event_timestamp=when)
    producer.send(b"y", event_timestamp=1)


@dataclass
class _Inner:
    x: int


@dataclass
class _Rec:
    name: str
    n: int
    tags: list[str]
    inner: _Inner
    note: str | None = None


@pytest.mark.parametrize(
    "record",
    [
        _Rec(None, 1, [], _Inner(1)),  # type: ignore[arg-type]
        _Rec("a", None, [], _Inner(1)),  # type: ignore[arg-type]
        _Rec("a", 1, [None], _Inner(1)),  # type: ignore[list-item]
        _Rec("a", 1, [], None),  # type: ignore[arg-type]
        _Rec("a", 1, None, _Inner(1)),  # type: ignore[arg-type]
    ],
    ids=["str", "int", "list-item", "record", "list"],
)
def test_the_json_schema_refuses_none_where_the_type_hint_does_not_allow_it(
    cluster: Callable[..., Cluster], uid: str, record: _Rec
) -> None:
    """As the Avro schema does (and as docs/api.md promises: values are checked against the hints)."""
    c = cluster()
    topic = f"jsonnone_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic, schema=JsonSchema(_Rec))
    with pytest.raises(SchemaSerializationError, match="None"):
        producer.send(record)
    producer.send(_Rec("a", 1, ["t"], _Inner(2)))  # an optional field left None is fine
    consumer = c.client.subscribe(topic, f"s_{uid}", initial_position="Earliest", schema=JsonSchema(_Rec))
    assert [m.value() for m in receive_all(consumer)] == [_Rec("a", 1, ["t"], _Inner(2))]


def test_a_producer_name_open_on_a_topic_is_taken_on_each_of_its_partitions(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """Pulsar's producer on ``t`` is one per partition topic under its name: ``t-partition-0`` with
    that name open on ``t`` is ProducerBusy (it wrote a second message as (name, 0)); another
    partition of ``t`` under one name is fine."""
    c = cluster()
    topic = f"pbusyp_{uid}"
    c.client.create_topic(topic, 2)
    whole = c.client.create_producer(topic, producer_name="n")
    with pytest.raises(ProducerBusy):
        c.client.create_producer(f"{topic}-partition-0", producer_name="n")
    whole.close()
    parts = [c.client.create_producer(f"{topic}-partition-{i}", producer_name="n") for i in range(2)]
    with pytest.raises(ProducerBusy):
        c.client.create_producer(topic, producer_name="n")
    for p in parts:
        p.close()


def test_a_closed_client_makes_no_kafka_client_again_to_refuse_a_call(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """get_last_message_ids looked the topic up (a new admin client: threads, broker connections)
    before refusing with AlreadyClosed."""
    from pulsar_txn.errors import AlreadyClosed

    c = cluster()
    topic = f"closedlook_{uid}"
    c.client.create_topic(topic, 1)
    own = c.other_client()
    own.get_last_message_ids(topic)
    own.close()
    with pytest.raises(AlreadyClosed):
        own.get_last_message_ids(topic)
    assert own._admin._client is None


def test_unsubscribing_one_partition_by_name_keeps_the_other_partitions_cursors(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """The subscription on t-partition-1 shares its group (and pending-ack log) with t-partition-0's
    of the same name: unsubscribe deleted both, and partition 0's acked messages came back. Now it
    is refused with nothing deleted, as for a same-named subscription on another topic."""
    from pulsar_txn.errors import NotAllowedError

    c = cluster()
    topic = f"unsubpart_{uid}"
    c.client.create_topic(topic, 2)
    for p in range(2):
        producer = c.client.create_producer(f"{topic}-partition-{p}")
        for i in range(3):
            producer.send(f"p{p}-{i}")
        producer.close()
    first = c.client.subscribe(f"{topic}-partition-0", f"s_{uid}", initial_position="Earliest")
    for m in receive_all(first):
        first.acknowledge(m)
    first.close()
    second = c.client.subscribe(f"{topic}-partition-1", f"s_{uid}", initial_position="Earliest")
    other = c.client.create_reader(topic)
    stranger = next(m for m in [other.read_next(5000) for _ in range(6)] if m.message_id.partition == 0)
    with pytest.raises(NotAllowedError, match="partition-0 is not subscribed"):
        second.acknowledge(stranger)
    with pytest.raises(NotAllowedError, match="other partitions"):
        second.unsubscribe()
    second.close()
    again = c.client.subscribe(f"{topic}-partition-0", f"s_{uid}", initial_position="Earliest")
    assert receive_all(again, 1500) == []  # partition 0's acks are still there
