"""Making librdkafka clients. A setting the client refuses when it is made (an unknown or ill-typed
property, typically from ``KafkaConfig.extra``) becomes ``ClientConfigError`` wherever a client is
made, instead of a raw ``KafkaException`` from the first call that happened to make one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from kafka_store.errors import ClientConfigError

C = TypeVar("C")


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a confluent-kafka exception carries, if any."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def make_client(factory: Callable[[dict[str, Any]], C], conf: dict[str, Any], what: str) -> C:
    """``factory(conf)``; ``ClientConfigError`` if the client refuses a setting."""
    try:
        return factory(conf)
    except KafkaException as exc:
        err = kafka_error_of(exc)
        if err is not None and err.code() == KafkaError._INVALID_ARG:
            raise ClientConfigError(f"{what}: invalid Kafka client setting: {err.str()}") from None
        raise
    except (TypeError, ValueError) as exc:  # confluent-kafka's own checks of its Python-level settings
        raise ClientConfigError(f"{what}: invalid Kafka client setting: {exc}") from None


def wait_future(future: Any, timeout: float) -> Any:
    """``future.result(timeout)`` of an admin call, leaving no reference cycle. A failed future keeps
    its exception, and the exception its traceback: the frames it was raised through and, through
    theirs, their callers'. A caller holding the future made a cycle that kept the admin client (its
    broker connections and librdkafka's threads) alive until the garbage collector ran. So the
    future's exception loses its traceback, and the caller gets a new one."""
    try:
        return future.result(timeout)
    except KafkaException as exc:
        exc.__traceback__ = None
        raise KafkaException(*exc.args) from None


def poll_ready(consumer: Any, max_records: int, timeout: float) -> list[Any]:
    """Up to ``max_records`` messages of a confluent Consumer, returning as soon as one has arrived,
    plus what else is fetched already: ``consume(n, t)`` waits until it has all n or ``t`` passed."""
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(max_records - 1, 0)] if max_records > 1 else [first]
