"""Executor side of a transactional write: one Spark task produces its partition's rows into the
driver's transaction (resumed by id), and returns only once every message is stored."""

from __future__ import annotations

import atexit
import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from kafka_store import StoreError, TopicAdmin
from pulsar_txn.client import Client
from pulsar_txn.errors import (
    ConfigError,
    MessageTooBig,
    PulsarTxnError,
    Timeout,
    TopicNotFound,
    TransactionHasOperationFailed,
    from_store_error,
)
from pulsar_txn.message import MessageId
from pulsar_txn.naming import TopicName
from pulsar_txn.producer import Producer
from spark._write_schema import OutMessage, RowLayout

_CHECK_EVERY = 10_000  # in-flight sends between checks for an early failure


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the cluster; hashable (one cached Client per process and settings), picklable."""

    service_url: str
    bootstrap_servers: str
    # Secrets (SASL passwords, the token, the marker secret) stay out of the repr.
    kafka: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    authentication: str | None = field(default=None, repr=False)
    num_tcs: int | None = None
    marker_secret: str | None = field(default=None, repr=False)
    operation_timeout_seconds: float = 30.0


class FrozenMap(tuple[tuple[str, Any], ...]):
    """A dict setting (e.g. ``KafkaConfig.extra``) kept hashable inside ``ClientSettings.kafka``."""

    __slots__ = ()


def freeze_kafka(kafka: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """``kafka=`` settings as ``ClientSettings.kafka``: sorted items, dict values frozen too."""
    try:
        return tuple(
            sorted((k, FrozenMap(sorted(v.items())) if isinstance(v, dict) else v) for k, v in kafka.items())
        )
    except TypeError as exc:  # e.g. a key that is not a string, a list value
        raise ConfigError(f"kafka settings must map names to values: {exc}") from None


def _thaw(kafka: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {k: dict(v) if isinstance(v, FrozenMap) else v for k, v in kafka}


_clients: dict[ClientSettings, Client] = {}
_lock = threading.Lock()


def client_for(settings: ClientSettings) -> Client:
    """A Client kept for the life of the process: Spark reuses Python workers, and a new Kafka producer
    costs a producer-id round trip, so tasks share one."""
    with _lock:
        client = _clients.get(settings)
        if client is None:
            client = Client(
                settings.service_url,
                bootstrap_servers=settings.bootstrap_servers,
                kafka=_thaw(settings.kafka),
                authentication=settings.authentication,
                num_tcs=settings.num_tcs,
                marker_secret=settings.marker_secret,
                operation_timeout_seconds=settings.operation_timeout_seconds,
            )
            _clients[settings] = client
        return client


def require_topic(client: Client, topic: str) -> None:
    """TopicNotFound unless ``topic`` exists. Asks for the full topic list: noida-db creates a topic
    that a metadata request names (docs/broker-quirks.md), so naming it would create it."""
    name = TopicName.parse(topic).kafka_topic
    try:
        topics = TopicAdmin(client.kafka).list_topics()
    except StoreError as exc:
        raise from_store_error(exc, f"looking up topic {topic}") from exc
    if name not in topics:
        raise TopicNotFound(f"topic {topic} (Kafka topic {name}) does not exist")


@atexit.register
def close_clients() -> None:
    """Close every cached Client of this process (also run at exit)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def write_partition(
    settings: ClientSettings, layout: RowLayout, txn_id: str, txn_timeout_ms: int, rows: Iterable[Any]
) -> None:
    """Produce ``rows`` into transaction ``txn_id``; raise if any message was not stored."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    client = client_for(settings)
    producers: dict[tuple[str, int | None], Producer[bytes | str]] = {}
    if ctx is not None and ctx.attemptNumber() > 0:
        # An earlier attempt of this task may have produced part of the partition into the same
        # transaction: producing again would duplicate it. Fail, so the driver aborts the whole txn.
        # (A re-run stage starts its tasks at attempt 0 again, and PySpark's TaskContext has no stage
        # attempt number: the driver checks that case, writer._retried_result_stage.) Spark reports
        # only the last attempt's error: a failure the rows themselves cause (a bad row, a missing or
        # compacted topic, a message over the record limit) is found again and raised as it was.
        _fail_as_before(client, layout, rows, producers)
        raise TransactionHasOperationFailed(
            f"task for partition {ctx.partitionId()} is attempt {ctx.attemptNumber()}: an earlier attempt "
            f"may have produced into {txn_id}; the batch must be retried in a new transaction (why the "
            "first attempt failed is in its task's error: the stage's failed tasks in the Spark UI or log)"
        )
    txn = client.resume_transaction(txn_id, txn_timeout_ms)
    inflight: deque[Future[MessageId]] = deque()
    for row in rows:
        msg = layout.message(row)
        producer = _producer_for(client, producers, msg)
        inflight.append(
            producer.send_async(msg.value, txn=txn, partition_key=msg.key, properties=msg.properties or None)
        )
        if len(inflight) >= _CHECK_EVERY:
            while inflight and inflight[0].done():
                _check(inflight.popleft(), 0)
    for producer in producers.values():
        producer.flush()
    for fut in inflight:
        _check(fut, settings.operation_timeout_seconds)


def _producer_for(
    client: Client, producers: dict[tuple[str, int | None], Producer[bytes | str]], msg: OutMessage
) -> Producer[bytes | str]:
    """The producer of ``msg``'s topic (and partition, if the row names one), made once per task."""
    producer = producers.get((msg.topic, msg.partition))
    if producer is None:
        require_topic(client, msg.topic)
        name = TopicName.parse(msg.topic)
        if msg.partition is not None:
            name = name.with_partition(msg.partition)
        producer = producers[(msg.topic, msg.partition)] = client.create_producer(str(name))
    return producer


def _fail_as_before(
    client: Client,
    layout: RowLayout,
    rows: Iterable[Any],
    producers: dict[tuple[str, int | None], Producer[bytes | str]],
) -> None:
    """For a retried task: raise the error the rows make a send fail with, without producing (each
    row checked as a send checks it; a message within a few hundred bytes of the limit, whose
    headers decide, is not caught here)."""
    limit = client._appender().max_record_bytes
    for row in rows:
        msg = layout.message(row)  # a bad row: IncompatibleSchema
        _producer_for(client, producers, msg)._refuse_compacted()  # missing or compacted topic
        size = len(msg.value) + len((msg.key or "").encode())
        size += sum(len(k.encode()) + len(v.encode()) for k, v in msg.properties.items())
        if size > limit:
            raise MessageTooBig(f"a row's message is {size} bytes: over the {limit}-byte record limit")


def _check(fut: Future[MessageId], timeout: float) -> None:
    try:
        fut.result(timeout)
    except FutureTimeout:
        raise Timeout(f"a send did not complete within {timeout}s") from None
    except PulsarTxnError:
        raise
    except Exception as exc:  # anything else a send can fail with: still the send's failure
        raise TransactionHasOperationFailed(f"a send failed: {exc}") from exc
