"""Bad arguments on calls that reach the broker or coordinator: a typed error at once, naming the
argument, never a crash from inside librdkafka, a consumer that silently never delivers, or a wait
beyond the operation timeout (session 29's bad-input review)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pulsar_txn import (
    EARLIEST,
    AlreadyClosed,
    Client,
    ConfigError,
    InvalidTopicName,
    MessageId,
    PulsarTxnError,
)
from pulsar_txn.asyncio import AsyncClient
from tests.conftest import Cluster

NAMES: dict[str, tuple[Callable[[Client, str], Any], type[Exception]]] = {
    # A lone surrogate reached confluent-kafka's describe_consumer_groups, which crashed the whole
    # process (SIGSEGV).
    "subscription name with a lone surrogate": (lambda c, t: c.subscribe(t, "s\ud800"), ConfigError),
    "subscription name 5": (lambda c, t: c.subscribe(t, 5), ConfigError),
    # Its pending-ack log '<topic>-<sub>__transaction_pending_ack' is over Kafka's 249 characters:
    # subscribe took ~15 s, then gave a consumer that never opened a partition (receive timed out).
    "subscription name of 300 characters": (lambda c, t: c.subscribe(t, "t" * 300), InvalidTopicName),
    "subscription name with a colon": (lambda c, t: c.subscribe(t, "a:b"), InvalidTopicName),
    "producer_name 5": (lambda c, t: c.create_producer(t, producer_name=5), ConfigError),
    # Pulsar's builder refuses an ack timeout under 1 s (MIN_ACK_TIMEOUT_MILLIS): session 39's review.
    "ack_timeout_millis 500": (lambda c, t: c.subscribe(t, "s", ack_timeout_millis=500), ConfigError),
    "producer_name with a lone surrogate": (
        lambda c, t: c.create_producer(t, producer_name="\ud800"),
        ConfigError,
    ),
}


@pytest.mark.parametrize("case", list(NAMES))
def test_a_bad_name_is_refused_at_once_with_a_typed_error(
    cluster: Callable[..., Cluster], uid: str, case: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"badname_{uid}"
    c.client.create_topic(topic, 1)
    call, error = NAMES[case]
    started = time.monotonic()
    with pytest.raises(error):
        call(c.client, topic)
    assert time.monotonic() - started < 5


def test_a_closed_consumer_refuses_seek_nack_and_redeliver(cluster: Callable[..., Cluster], uid: str) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"closedcons_{uid}"
    c.client.create_topic(topic, 1)
    consumer = c.client.subscribe(topic, f"s{uid}")
    consumer.close()
    calls: dict[str, Callable[[], object]] = {
        "seek(EARLIEST)": lambda: consumer.seek(EARLIEST),
        "seek(publish time)": lambda: consumer.seek(0),
        "negative_acknowledge": lambda: consumer.negative_acknowledge(MessageId(topic, 0, 0)),
        "redeliver_unacknowledged_messages": consumer.redeliver_unacknowledged_messages,
    }
    for name, call in calls.items():
        with pytest.raises(AlreadyClosed):
            call()
            pytest.fail(f"{name} after close returned")


def test_an_async_send_with_a_txn_that_is_no_transaction_is_a_config_error(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"asyncbadtxn_{uid}"
    c.client.create_topic(topic, 1)

    async def main() -> None:
        aio = AsyncClient(c.client)
        producer = await aio.create_producer(topic)
        with pytest.raises(ConfigError):
            await producer.send(b"x", txn="(0,1)")  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            await aio.subscribe(topic, 5)  # type: ignore[arg-type]

    asyncio.run(main())


def test_calls_against_a_dead_broker_end_within_the_operation_timeout() -> None:
    # Kafka's request timeout (10 s by default) bounded them instead of operation_timeout_seconds.
    client = Client("pulsar://127.0.0.1:1", bootstrap_servers="127.0.0.1:1", operation_timeout_seconds=3)
    calls: dict[str, Callable[[], object]] = {
        "create_topic": lambda: client.create_topic("dead_t", 1),
        "create_producer": lambda: client.create_producer("dead_t"),
        "subscribe": lambda: client.subscribe("dead_t", "s", subscribe_timeout=3),
        "create_reader": lambda: client.create_reader("dead_t", EARLIEST),
    }
    try:
        for name, call in calls.items():
            started = time.monotonic()
            with pytest.raises(PulsarTxnError):
                call()
            took = time.monotonic() - started
            assert took < 3 + 1.5, f"{name} took {took:.1f} s"
    finally:
        client.close()


def test_a_pattern_subscription_leaves_out_only_the_topics_whose_pending_ack_log_name_is_invalid(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    # Checking every matched topic at subscribe refused the whole pattern subscription for one long
    # topic name; topics discovered later were not checked at all (they never delivered).
    c = cluster(tb_service_enabled=False)
    short, long_ = f"pq{uid}a", f"pq{uid}" + "x" * 215
    for name in (short, long_):
        c.client.create_topic(name, 1)
    c.client.create_producer(short).send(b"short")
    consumer = c.client.subscribe(
        None, "sub1", pattern=f"pq{uid}.*", initial_position="Earliest", pattern_auto_discovery_period=0.5
    )
    try:
        first = consumer.receive(10_000)
        assert first.data() == b"short"
        consumer.acknowledge(first)  # else the discovery's rebalance redelivers it (eager group)
        assert [t.kafka_topic for t in consumer.topics] == [short]
        later_short, later_long = f"pq{uid}b", f"pq{uid}y" + "x" * 215
        for name in (later_long, later_short):
            c.client.create_topic(name, 1)
        c.client.create_producer(later_short).send(b"later")
        assert consumer.receive(15_000).data() == b"later"
        assert sorted(t.kafka_topic for t in consumer.topics) == [short, later_short]
    finally:
        consumer.close()
    with pytest.raises(InvalidTopicName):  # nothing left to subscribe to
        c.client.subscribe(None, "sub2", pattern=f"pq{uid}x+")


def test_a_consumer_made_while_the_client_closes_is_closed_too(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"closerace_{uid}"
    c.client.create_topic(topic, 1)
    first = c.client.subscribe(topic, f"a{uid}")
    made, closing = threading.Event(), threading.Event()
    real_close = first.close

    def slow_close() -> None:
        closing.set()
        made.wait(30)  # another thread subscribes while the client closes this one
        real_close()

    first.close = slow_close  # type: ignore[method-assign]
    closer = threading.Thread(target=c.client.close)
    closer.start()
    assert closing.wait(30)
    late: list[Any] = []
    try:
        late.append(c.client.subscribe(topic, f"b{uid}"))
    except AlreadyClosed:
        pass  # refused: as good as closed
    finally:
        made.set()
        closer.join(60)
    assert all(consumer._closed for consumer in late)


def test_the_operation_timeout_also_bounds_kafka_requests_of_a_given_kafka_config() -> None:
    from kafka_store import KafkaConfig

    client = Client(
        "pulsar://127.0.0.1:1",
        kafka=KafkaConfig(bootstrap_servers="127.0.0.1:1"),
        operation_timeout_seconds=3,
    )
    try:
        assert client.kafka.request_timeout_ms == 3000
        started = time.monotonic()
        with pytest.raises(PulsarTxnError):
            client.create_topic("dead_t", 1)
        assert time.monotonic() - started < 4.5
    finally:
        client.close()
    explicit = Client(
        "pulsar://127.0.0.1:1",
        kafka=KafkaConfig(bootstrap_servers="127.0.0.1:1", request_timeout_ms=20_000),
        operation_timeout_seconds=3,
    )
    assert explicit.kafka.request_timeout_ms == 20_000  # set on purpose: kept
    explicit.close()
