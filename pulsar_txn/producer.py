"""Producer: plain and transactional sends to a Pulsar topic stored as a Kafka topic."""

from __future__ import annotations

import itertools
import threading
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING

from kafka_store import StoreError
from pulsar_txn.buffer.marker import TXN_HEADER
from pulsar_txn.errors import PersistenceError, PulsarTxnError
from pulsar_txn.message import EVENT_TIME_HEADER, PRODUCER_HEADER, PROPERTY_PREFIX, SEQUENCE_HEADER, MessageId
from pulsar_txn.naming import TopicName

if TYPE_CHECKING:
    from pulsar_txn.client import Client
    from pulsar_txn.transaction import Transaction

SendCallback = Callable[[MessageId | None, PulsarTxnError | None], None]


class Producer:
    def __init__(self, client: Client, topic: str, *, producer_name: str | None = None) -> None:
        self._client = client
        self.topic = TopicName.parse(topic)
        self.producer_name = producer_name or f"producer-{uuid.uuid4().hex[:8]}"
        self._partitions = client._partition_count(self.topic)
        self._sequence = itertools.count()
        self._round_robin = itertools.count()
        # Sends start in call order even when a transactional one waits for ADD_PARTITION_TO_TXN.
        self._order_lock = threading.Lock()
        self._pending: deque[
            tuple[Future[None] | None, Callable[[], None], Future[MessageId], SendCallback | None]
        ] = deque()

    def _choose_partition(self, partition_key: str | None) -> int:
        if self.topic.partition is not None:
            return self.topic.partition
        if partition_key is not None:
            return zlib.crc32(partition_key.encode()) % self._partitions
        return next(self._round_robin) % self._partitions

    def send_async(
        self,
        content: bytes | str,
        callback: SendCallback | None = None,
        *,
        txn: Transaction | None = None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
    ) -> Future[MessageId]:
        """Send without waiting; the future (and ``callback``) give the MessageId once stored."""
        payload = content.encode() if isinstance(content, str) else bytes(content)
        partition = self._choose_partition(partition_key)
        seq = next(self._sequence)
        headers: list[tuple[str, bytes]] = [
            (PRODUCER_HEADER, self.producer_name.encode()),
            (SEQUENCE_HEADER, str(seq).encode()),
        ]
        if event_timestamp is not None:
            headers.append((EVENT_TIME_HEADER, str(int(event_timestamp)).encode()))
        for name, value in (properties or {}).items():
            headers.append((PROPERTY_PREFIX + name, value.encode()))
        key = partition_key.encode() if partition_key is not None else None
        topic = self.topic.kafka_topic
        result: Future[MessageId] = Future()

        def done(offset: int | None, error: StoreError | None) -> None:
            if error is not None or offset is None:
                err = PersistenceError(
                    f"send to {topic}[{partition}] failed: {error}", retriable=bool(error and error.retriable)
                )
                result.set_exception(err)
                if callback is not None:
                    callback(None, err)
                return
            mid = MessageId(topic, partition, offset)
            result.set_result(mid)
            if callback is not None:
                callback(mid, None)

        def append() -> None:
            self._client._appender().append_cb(
                topic, partition, payload, key=key, headers=headers, callback=done
            )

        registered: Future[None] | None = None
        if txn is not None:
            headers.append((TXN_HEADER, txn.txn_id.to_bytes()))
            registered = txn.register_partition(str(self.topic.with_partition(partition)))
            txn.track(result)
        with self._order_lock:
            if not self._pending and (registered is None or registered.done()):
                self._start(registered, append, result, callback)  # the common case: nothing queued
                return result
            self._pending.append((registered, append, result, callback))
        if registered is not None:
            registered.add_done_callback(lambda _f: self._pump())
        self._pump()
        return result

    def _pump(self) -> None:
        """Start queued sends in call order: a send waits for every earlier one to have started."""
        with self._order_lock:
            while self._pending:
                registered, append, result, callback = self._pending[0]
                if registered is not None and not registered.done():
                    return
                self._pending.popleft()
                self._start(registered, append, result, callback)

    @staticmethod
    def _start(
        registered: Future[None] | None,
        append: Callable[[], None],
        result: Future[MessageId],
        callback: SendCallback | None,
    ) -> None:
        exc = registered.exception() if registered is not None else None
        if exc is None:
            append()
            return
        err = exc if isinstance(exc, PulsarTxnError) else PulsarTxnError(str(exc))
        result.set_exception(err)
        if callback is not None:
            callback(None, err)

    def send(
        self,
        content: bytes | str,
        *,
        txn: Transaction | None = None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
    ) -> MessageId:
        future = self.send_async(
            content,
            txn=txn,
            properties=properties,
            partition_key=partition_key,
            event_timestamp=event_timestamp,
        )
        return future.result(self._client.operation_timeout_seconds)

    def flush(self) -> None:
        self._client._appender().flush(self._client.operation_timeout_seconds)

    def close(self) -> None:
        self.flush()
