"""A program written for the Pulsar Python client, run through ``pulsar_txn.compat`` against the real
broker: pulsar-client's signatures and accessors, its enums and schema records (from the installed
pulsar-client itself), Pulsar's exclusive reader start, and transactions on top."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pulsar as real_pulsar
import pytest
from pulsar.schema import Integer, Record, String

import pulsar_txn.compat as pulsar
from tests.conftest import Cluster, compat_options, wait_until

pytestmark = pytest.mark.integration
ClusterFactory = Callable[..., Cluster]


def _client(c: Cluster) -> pulsar.Client:
    """``pulsar.Client(service_url, ...)`` as pulsar-client takes it, plus ``_where_kafka_is``."""
    return pulsar.Client(
        c.coordinator.url,
        None,  # authentication, positionally as pulsar-client allows
        30,  # operation_timeout_seconds
        io_threads=4,  # ignored here
        **compat_options(c),
    )


def _with_topics(c: Cluster, partitions: dict[str, int]) -> pulsar.Client:
    """The topics created (name -> partition count), then a compat client of ``c``."""
    for topic, count in partitions.items():
        c.client.create_topic(topic, count)
    return _client(c)


class Order(Record):  # a pulsar-client schema record, unchanged
    sku = String()
    qty = Integer()


def test_a_pulsar_client_program_runs_unchanged_on_the_compat_module(
    cluster: ClusterFactory, uid: str
) -> None:
    topic = f"compat_{uid}"
    client = _with_topics(cluster(), {topic: 2})
    producer = client.create_producer(
        topic,
        producer_name=f"p-{uid}",
        batching_enabled=True,
        send_timeout_millis=5000,
        compression_type=real_pulsar.CompressionType.LZ4,  # the real client's enum: accepted, ignored
    )
    assert producer.topic().endswith(topic) and producer.producer_name() == f"p-{uid}"
    sent = [
        producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key="k", event_timestamp=1000 + i)
        for i in range(3)
    ]
    results: list[Any] = []
    producer.send_async(
        b"m3", lambda res, mid: results.append((res, mid)), properties={"i": "3"}, partition_key="k"
    )
    producer.flush()
    assert [r for r, _ in results] == [pulsar.Result.Ok]
    assert len({m.partition() for m in sent}) == 1  # one key, one partition
    assert [m.entry_id() for m in sent] == sorted(m.entry_id() for m in sent)

    consumer = client.subscribe(
        topic,
        f"sub-{uid}",
        consumer_type=real_pulsar.ConsumerType.Failover,  # the real client's enum
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=10,  # ignored
        unacked_messages_timeout_ms=None,
    )
    got = [consumer.receive(timeout_millis=10_000) for _ in range(4)]
    assert [m.data() for m in got] == [b"m0", b"m1", b"m2", b"m3"]
    assert [m.properties()["i"] for m in got] == ["0", "1", "2", "3"]
    assert got[0].partition_key() == "k" and got[0].event_timestamp() == 1000
    assert got[0].message_id() == sent[0] and got[0].redelivery_count() == 0
    assert got[0].publish_timestamp() > 0 and got[0].producer_name() == f"p-{uid}"
    assert consumer.subscription_name() == f"sub-{uid}"
    for m in got:
        consumer.acknowledge(m)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=300)
    consumer.close()
    assert not consumer.is_connected()

    # Pulsar's reader starts after the given message unless start_message_id_inclusive=True.
    after = client.create_reader(topic, sent[0])
    assert after.read_next(10_000).data() == b"m1"
    inclusive = client.create_reader(topic, sent[0], start_message_id_inclusive=True)
    assert inclusive.read_next(10_000).data() == b"m0"
    restored = pulsar.MessageId.deserialize(sent[1].serialize())
    assert restored == sent[1]
    assert client.create_reader(topic, restored).read_next(10_000).data() == b"m2"
    assert client.get_topic_partitions(topic) == [
        f"persistent://public/default/{topic}-partition-{i}" for i in range(2)
    ]
    client.close()


def test_options_the_compat_module_cannot_honour_fail_at_once_with_operation_not_supported(
    cluster: ClusterFactory, uid: str
) -> None:
    topic = f"compat_no_{uid}"
    client = _with_topics(cluster(), {topic: 1})
    with pytest.raises(pulsar.OperationNotSupported, match="chunking_enabled"):
        client.create_producer(topic, chunking_enabled=True)
    with pytest.raises(pulsar.OperationNotSupported, match="is_read_compacted"):
        client.subscribe(topic, f"s-{uid}", is_read_compacted=True)
    with pytest.raises(pulsar.NotAllowedError, match="not supported"):
        client.subscribe(topic, f"s-{uid}", consumer_type=real_pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    with pytest.raises(pulsar.OperationNotSupported, match="deliver_after"):
        producer.send(b"x", deliver_after=5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        producer.send(b"x", no_such_option=1)
    # Nothing was written by the refused calls.
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    client.close()


def test_pulsar_client_records_and_transactions_through_the_compat_module(
    cluster: ClusterFactory, uid: str
) -> None:
    src, dst = f"compat_src_{uid}", f"compat_dst_{uid}"
    client = _with_topics(cluster(), {src: 1, dst: 1})
    client.create_producer(src, schema=real_pulsar.schema.AvroSchema(Order)).send(Order(sku="a", qty=2))
    consumer = client.subscribe(
        src,
        f"s-{uid}",
        initial_position=pulsar.InitialPosition.Earliest,
        schema=pulsar.schema.AvroSchema(Order),
    )
    msg = consumer.receive(10_000)
    order = msg.value()
    assert isinstance(order, Order) and (order.sku, order.qty) == ("a", 2)

    out = client.create_producer(dst, schema=pulsar.schema.JsonSchema(Order))
    txn = client.new_transaction().with_transaction_timeout(60).build()
    out.send(Order(sku=order.sku, qty=order.qty * 10), txn=txn)
    consumer.acknowledge(msg, txn)
    reader = client.create_reader(dst, pulsar.MessageId.earliest, schema=pulsar.schema.JsonSchema(Order))
    assert not reader.has_message_available()  # the open transaction holds it back
    txn.commit()
    done = reader.read_next(10_000)
    assert (done.value().sku, done.value().qty) == ("a", 20)
    assert done.txn_id() == txn.txn_id
    consumer.close()
    again = client.subscribe(src, f"s-{uid}", initial_position=pulsar.InitialPosition.Earliest)
    with pytest.raises(pulsar.Timeout):
        again.receive(500)  # acknowledged by the committed transaction
    client.close()


def test_a_pulsar_asyncio_program_runs_on_the_compat_asyncio_module(
    cluster: ClusterFactory, uid: str
) -> None:
    import pulsar_txn.compat.asyncio as pulsar_asyncio

    c = cluster()
    topic = f"compat_async_{uid}"
    c.client.create_topic(topic, 1)

    async def main() -> None:
        client = pulsar_asyncio.Client(c.coordinator.url, **compat_options(c))
        producer = await client.create_producer(topic, batching_enabled=True)
        first = await producer.send(b"a", {"n": "1"})  # properties by position, as pulsar-client
        consumer = await client.subscribe(
            topic, f"s-{uid}", initial_position=pulsar_asyncio.InitialPosition.Earliest
        )
        msg = await consumer.receive()
        assert (msg.data(), msg.properties(), msg.message_id()) == (b"a", {"n": "1"}, first)
        await consumer.acknowledge(msg)
        waiting = asyncio.ensure_future(consumer.receive())
        await asyncio.sleep(0.5)
        assert not waiting.done()
        waiting.cancel()  # a receive with nothing to deliver is cancellable
        with pytest.raises(asyncio.CancelledError):
            await waiting
        txn = await client.transaction(60)
        await producer.send(b"b", txn=txn)
        reader = await client.create_reader(topic, first)
        assert not await reader.has_message_available()
        await asyncio.to_thread(txn.commit)
        assert (await asyncio.wait_for(reader.read_next(), 10)).data() == b"b"
        await consumer.close()
        await client.close()

    asyncio.run(main())


def test_seeks_patterns_and_topic_names_behave_as_in_pulsar_client(cluster: ClusterFactory, uid: str) -> None:
    import re

    plain, parted = f"compat_seek_{uid}", f"compat_parted_{uid}"
    client = _with_topics(cluster(), {plain: 1, parted: 2})
    producer = client.create_producer(plain)
    ids = [producer.send(f"m{i}".encode(), {"i": str(i)}) for i in range(3)]  # properties by position
    with pytest.raises(pulsar.InvalidConfiguration):
        producer.send(b"x", properties={"n": 1})  # not str -> str: a typed error, nothing sent
    reader = client.create_reader(plain, pulsar.MessageId.earliest)
    assert [reader.read_next(10_000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    reader.seek(pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"m0"
    # Made without a topic: this reader's. Not inclusive: it resumes after the id, as in Pulsar
    # (startMessageIdInclusive "also applies for any cursor reset operation like seek").
    reader.seek(pulsar.MessageId(0, 0, ids[1].entry_id()))
    assert reader.read_next(10_000).data() == b"m2"
    reader.seek(pulsar.MessageId.latest)
    assert not reader.has_message_available()
    reader.close()
    assert not reader.is_connected()

    consumer = client.subscribe(plain, f"s-{uid}", initial_position=pulsar.InitialPosition.Earliest)
    first = [consumer.receive(10_000) for _ in range(3)]
    for m in first:
        consumer.acknowledge(m)
    assert first[0].topic_name() == f"persistent://public/default/{plain}"  # no -partition-0
    consumer.seek(pulsar.MessageId.earliest)
    assert consumer.receive(10_000).data() == b"m0"  # acks beyond the new position are forgotten
    since = first[2].publish_timestamp()
    consumer.seek(since)  # pulsar-client's seek(<publish time in ms>)
    expected = next(m for m in first if m.publish_timestamp() >= since)  # m2, or an earlier one in that ms
    assert consumer.receive(10_000).data() == expected.data()
    consumer.close()

    client.create_producer(parted).send(b"p", partition_key="k")
    by_pattern = client.subscribe(
        re.compile(f"persistent://public/default/compat_parted_{uid}"),
        f"pat-{uid}",
        initial_position=pulsar.InitialPosition.Earliest,
        pattern_auto_discovery_period=30,
    )
    assert by_pattern.native._discovery_period == 30  # pulsar-client's option reaches the consumer
    got = by_pattern.receive(10_000)
    assert got.data() == b"p"
    assert re.fullmatch(rf"persistent://public/default/{parted}-partition-[01]", got.topic_name())
    by_pattern.close()
    client.close()


def test_a_table_view_holds_each_keys_latest_committed_value_and_follows_updates(
    cluster: ClusterFactory, uid: str
) -> None:
    topic = f"compat_table_{uid}"
    client = _with_topics(cluster(), {topic: 2})
    producer = client.create_producer(topic, schema=pulsar.schema.StringSchema())
    producer.send("a1", partition_key="a")
    producer.send("b1", partition_key="b")
    producer.send("no key")  # skipped: a table view needs keys
    with client.transaction() as txn:
        producer.send("a2", partition_key="a", txn=txn)
    aborted = client.new_transaction().build()
    producer.send("b-aborted", partition_key="b", txn=aborted)
    aborted.abort()
    view = client.create_table_view(topic, schema=pulsar.schema.StringSchema())
    assert len(view) == 2 and (view.get("a"), view.get("b"), view.get("zz")) == ("a2", "b1", None)
    seen: list[tuple[str, str]] = []
    view.for_each_and_listen(lambda k, v: seen.append((k, v)))
    assert sorted(seen) == [("a", "a2"), ("b", "b1")]
    producer.send("c1", partition_key="c")
    wait_until(lambda: view.get("c") == "c1", 10, what="the table view to follow the topic")
    assert ("c", "c1") in seen
    client.create_producer(topic).send(b"", partition_key="a")  # an empty payload removes the key
    wait_until(lambda: view.get("a") is None, 10, what="the tombstone")
    entries: dict[str, str] = {}
    view.for_each(entries.__setitem__)
    assert entries == {"b": "b1", "c": "c1"}
    view.close()
    client.close()


def test_missing_topics_are_created_as_a_pulsar_broker_does_unless_turned_off(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    client = _client(c)
    client.create_producer(f"auto_{uid}").send(b"x")  # one partition, as Pulsar's default
    consumer = client.subscribe(f"auto_sub_{uid}", "s", initial_position=pulsar.InitialPosition.Earliest)
    assert client.get_topic_partitions(f"auto_{uid}") == [f"persistent://public/default/auto_{uid}"]
    assert client.create_reader(f"auto_{uid}", pulsar.MessageId.earliest).read_next(10_000).data() == b"x"
    consumer.close()
    strict = pulsar.Client(c.coordinator.url, auto_create_topics=False, **compat_options(c))
    with pytest.raises(pulsar.TopicNotFound):
        strict.create_producer(f"absent_{uid}")
    strict.close()
    client.close()


def test_message_and_reader_listeners_are_called_on_a_thread_of_their_own(
    cluster: ClusterFactory, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"compat_listen_{uid}"
    client = _with_topics(cluster(), {topic: 1})
    producer = client.create_producer(topic)
    got: list[bytes] = []

    def on_message(consumer: Any, msg: Any) -> None:  # pulsar-client's listener signature
        if msg.data() == b"boom":
            raise RuntimeError("the application's listener failed")
        got.append(msg.data())
        consumer.acknowledge(msg)

    consumer = client.subscribe(
        topic, f"s-{uid}", initial_position=pulsar.InitialPosition.Earliest, message_listener=on_message
    )
    for payload in (b"m0", b"boom", b"m1"):
        producer.send(payload)
    wait_until(lambda: got == [b"m0", b"m1"], 20, what="the listener's calls")
    assert "the application's listener failed" in caplog.text  # logged; the next message followed
    with pytest.raises(pulsar.InvalidConfiguration, match="message_listener"):
        consumer.receive(100)
    consumer.pause_message_listener()
    time.sleep(0.5)  # a receive under way when paused may still hand over one message
    paused_at = len(got)
    producer.send(b"m2")
    time.sleep(1.0)
    assert len(got) == paused_at  # nothing while paused
    consumer.resume_message_listener()
    wait_until(lambda: got[-1:] == [b"m2"], 20, what="delivery after resume")
    consumer.close()
    assert not any(
        t.name.startswith("pulsar-listener-") and t.is_alive()
        for t in threading.enumerate()
        if "s-" + uid in t.name
    )

    read: list[bytes] = []
    reader = client.create_reader(
        topic, pulsar.MessageId.earliest, reader_listener=lambda r, msg: read.append(msg.data())
    )
    wait_until(lambda: read == [b"m0", b"boom", b"m1", b"m2"], 20, what="the reader listener's calls")
    with pytest.raises(pulsar.InvalidConfiguration, match="reader_listener"):
        reader.read_next(100)
    reader.close()
    with pytest.raises(pulsar.InvalidConfiguration, match="callable"):
        client.subscribe(topic, f"t-{uid}", message_listener="not a function")
    client.close()


def test_acks_and_nacks_of_a_message_id_made_with_the_constructor_mean_the_consumers_topic(
    cluster: ClusterFactory, uid: str
) -> None:
    """pulsar-client accepts any MessageId; one built from numbers has no topic here, and means the
    consumer's (as seek does). Before, the ack raised "no longer assigned" and the nack did nothing:
    the message was never redelivered."""
    c = cluster()
    topic = f"compat_ctor_{uid}"
    client = _with_topics(c, {topic: 1})
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe(
        topic,
        f"sub_{uid}",
        initial_position=pulsar.InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=200,
    )
    got = [consumer.receive(5000) for _ in range(3)]
    ids = [pulsar.MessageId(m.message_id().partition(), 0, m.message_id().entry_id()) for m in got]
    consumer.acknowledge(ids[0])
    consumer.negative_acknowledge(ids[1])
    consumer.acknowledge(got[2])
    assert consumer.receive(5000).data() == b"m1"  # redelivered after the nack
    consumer.close()
    client.close()


def test_a_subscribe_refused_for_an_option_leaves_no_consumer_behind(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"compat_refused_{uid}"
    client = _with_topics(c, {topic: 1})
    with pytest.raises(pulsar.PulsarException):
        client.subscribe(topic, f"sub_{uid}", message_listener="not callable")
    client.subscribe(topic, f"sub_{uid}").close()  # the subscription is free: no ConsumerBusy
    client.close()


def test_send_async_callback_gets_the_result_code_of_a_failure(cluster: ClusterFactory, uid: str) -> None:
    topic = f"compat_big_{uid}"
    client = _with_topics(cluster(), {topic: 1})
    producer = client.create_producer(topic)
    results: list[Any] = []
    producer.send_async(b"x" * 3_000_000, lambda res, mid: results.append((res, mid)))  # over Kafka's limit
    producer.send_async(b"fine", lambda res, mid: results.append((res, mid)))
    producer.flush()
    assert [r for r, _ in results] == [pulsar.Result.MessageTooBig, pulsar.Result.Ok]
    assert results[0][1] is None and results[1][1] is not None
    assert producer.is_connected() and not producer.native.closed
    producer.close()
    assert not producer.is_connected() and producer.native.closed
    client.close()


@pytest.mark.parametrize("timeout_ms", [-1, 0])
def test_a_batch_receive_policy_without_a_timeout_waits_for_a_full_batch(
    cluster: ClusterFactory, uid: str, timeout_ms: int
) -> None:
    """pulsar-client: a timeout of 0 or below means no limit. Before, every batch_receive raised
    ConfigError (below 0), or returned at once with what had arrived (0)."""
    topic = f"compat_batch_{uid}"
    client = _with_topics(cluster(), {topic: 1})
    consumer = client.subscribe(
        topic,
        f"sub_{uid}",
        initial_position=pulsar.InitialPosition.Earliest,
        batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(3, 10 * 1024 * 1024, timeout_ms),
    )
    producer = client.create_producer(topic)
    producer.send(b"m0")

    def send_the_rest() -> None:
        time.sleep(0.5)  # batch_receive is waiting by then: it must go on waiting for a full batch
        for i in (1, 2):
            producer.send(f"m{i}".encode())

    sender = threading.Thread(target=send_the_rest)
    sender.start()
    assert [m.data() for m in consumer.batch_receive()] == [b"m0", b"m1", b"m2"]
    sender.join()
    client.close()


def test_a_batch_receive_policy_with_no_limit_at_all_is_refused_as_pulsar_client_does() -> None:
    with pytest.raises(ValueError, match="At least one of"):
        pulsar.ConsumerBatchReceivePolicy(-1, 0, 0)


def test_a_null_value_is_refused_as_not_supported(cluster: ClusterFactory, uid: str) -> None:
    topic = f"compat_null_{uid}"
    client = _with_topics(cluster(), {topic: 1})
    producer = client.create_producer(topic)
    with pytest.raises(pulsar.OperationNotSupported, match="null value"):
        producer.send(None)
    with pytest.raises(pulsar.OperationNotSupported, match="null value"):
        producer.send_async(None, None)
    client.close()
