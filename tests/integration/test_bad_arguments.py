"""Wrong argument types and values at the public API are a ``ConfigError`` (or ``InvalidTopicName``)
that names the argument, never a TypeError, ValueError, AttributeError or re.error from inside, and a
NaN or infinite timeout never turns a bounded wait into an endless one. (Found by a review in session
23: each case here raised a raw Python or confluent-kafka error, and ``receive(nan)`` hung.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pulsar_txn import Client, ConfigError, InvalidTopicName, Timeout
from pulsar_txn.client import Client as ClientType
from tests.conftest import Cluster

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]
NAN, INF = float("nan"), float("inf")


@pytest.fixture
def env(cluster: ClusterFactory, uid: str) -> tuple[ClientType, str]:
    c = cluster()
    topic = f"badarg_{uid}"
    c.client.create_topic(topic, 1)
    return c.client, topic


@pytest.mark.parametrize(
    "kwargs",
    [
        {"properties": [("a", "b")]},
        {"event_timestamp": NAN},
        {"event_timestamp": INF},
        {"event_timestamp": 0.5},
        {"partition_key": "\ud800"},
        {"properties": {"k": "\ud800"}},
        {"txn": "(0,1)"},
    ],
    ids=[
        "properties-list",
        "time-nan",
        "time-inf",
        "time-under-1ms",
        "key-surrogate",
        "property-surrogate",
        "txn-str",
    ],
)
def test_a_send_with_a_bad_argument_is_refused_as_config_error(
    env: tuple[ClientType, str], kwargs: dict[str, Any]
) -> None:
    client, topic = env
    producer = client.create_producer(topic)
    with pytest.raises(ConfigError):
        producer.send(b"x", **kwargs)
    assert producer.send(b"ok").offset >= 0  # nothing half-done: the producer goes on


def test_factories_refuse_bad_topics_schemas_and_start_ids(env: tuple[ClientType, str]) -> None:
    client, topic = env
    with pytest.raises(InvalidTopicName):
        client.create_producer(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidTopicName):
        client.subscribe([topic, 5], "s")  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="schema"):
        client.create_producer(topic, schema=5)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="schema"):
        client.subscribe(topic, "s", schema="x")  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="start_message_id"):
        client.create_reader(topic, object())  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="partitions"):
        client.create_topic(topic + "_huge", 10**9)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"consumer_type": "Bogus"},
        {"initial_position": "Middle"},
        {"pattern": "("},
        {"bogus": 1},
        {"subscribe_timeout": "10"},
        {"subscribe_timeout": NAN},
        {"ack_timeout_millis": -1},
        {"negative_ack_redelivery_delay_ms": INF},
        {"dead_letter_policy": 5},
        {"consumer_name": 5},
    ],
)
def test_subscribe_refuses_bad_options_as_config_error(
    env: tuple[ClientType, str], kwargs: dict[str, Any]
) -> None:
    client, topic = env
    with pytest.raises(ConfigError):
        client.subscribe(None if "pattern" in kwargs else topic, "s", **kwargs)


def test_a_huge_subscribe_timeout_is_a_long_wait_not_an_overflow(env: tuple[ClientType, str]) -> None:
    client, topic = env
    client.subscribe(topic, "s_huge", subscribe_timeout=1e300).close()


def test_a_client_with_the_longest_operation_timeout_still_writes(cluster: ClusterFactory, uid: str) -> None:
    """Found by review (session 42): past ~24.8 days, the operation timeout wrapped into librdkafka's
    32-bit message.timeout.ms (-1294967296 for 35 days) and every send failed with a ConfigError."""
    c = cluster()
    topic = f"longest_{uid}"
    c.client.create_topic(topic, 1)
    client = c.other_client(operation_timeout_seconds=1e9)  # the documented cap
    try:
        producer = client.create_producer(topic)
        assert producer.send(b"plain").offset >= 0
        with client.transaction() as txn:
            producer.send(b"in a txn", txn=txn)
    finally:
        client.close()


def test_receive_timeouts_that_are_no_number_or_not_finite_are_refused_at_once(
    env: tuple[ClientType, str],
) -> None:
    """receive(nan) used to wait for ever on an empty subscription."""
    client, topic = env
    consumer = client.subscribe(topic, "s_recv", initial_position="Earliest")
    outcome: list[BaseException] = []

    def receive_nan() -> None:
        try:
            consumer.receive(NAN)  # type: ignore[arg-type]
        except BaseException as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=receive_nan, daemon=True)
    waiting.start()
    waiting.join(10)
    assert not waiting.is_alive(), "receive(nan) still waits after 10 s"
    assert isinstance(outcome[0], ConfigError)
    for bad in ("100", INF, -1):
        with pytest.raises(ConfigError):
            consumer.receive(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        consumer.batch_receive(0, 10)
    with pytest.raises(Timeout):
        consumer.receive(0)  # still the way to ask for a message that is ready now
    consumer.close()
    with pytest.raises(ConfigError):
        client.create_reader(topic).read_next(NAN)  # type: ignore[arg-type]


def test_acks_of_objects_that_are_no_message_are_refused(env: tuple[ClientType, str]) -> None:
    client, topic = env
    consumer = client.subscribe(topic, "s_ack", initial_position="Earliest")
    for bad in (object(), None, "x", [object()]):
        with pytest.raises(ConfigError):
            consumer.acknowledge(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        consumer.acknowledge_cumulative(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        consumer.negative_acknowledge(object())  # type: ignore[arg-type]
    consumer.close()


@pytest.mark.parametrize("timeout", [NAN, INF, "5", None, 0, -1])
def test_a_transaction_timeout_must_be_a_finite_positive_number(
    env: tuple[ClientType, str], timeout: Any
) -> None:
    client, _topic = env
    with pytest.raises(ConfigError):
        client.new_transaction().with_transaction_timeout(timeout)
    with pytest.raises(ConfigError):
        client.transaction(timeout)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"operation_timeout_seconds": "5"},
        {"operation_timeout_seconds": NAN},
        {"num_tcs": "four"},
        {"num_tcs": 0},
        {"kafka": 5},
    ],
)
def test_client_settings_of_the_wrong_type_are_refused(kwargs: dict[str, Any]) -> None:
    extra: dict[str, Any] = {} if "kafka" in kwargs else {"bootstrap_servers": "127.0.0.1:9"}
    started = time.monotonic()
    with pytest.raises(ConfigError):
        Client("pulsar://127.0.0.1:6650", **extra, **kwargs)
    assert time.monotonic() - started < 5  # refused before any I/O
