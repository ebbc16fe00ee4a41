"""Producer: plain and transactional sends to a Pulsar topic stored as a Kafka topic."""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from kafka_store import Delivery, StoreError
from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn._future import StartedFuture
from pulsar_txn._meta_header import META_HEADER, check_event_time, encode_meta
from pulsar_txn.buffer.marker import TXN_HEADER, TXN_MAC_HEADER
from pulsar_txn.errors import (
    AlreadyClosed,
    ConfigError,
    NotAllowedError,
    PulsarTxnError,
    Result,
    Timeout,
    store_failure,
)
from pulsar_txn.message import PROPERTY_PREFIX, MessageId, new_message_id
from pulsar_txn.naming import TopicName
from pulsar_txn.schema import SCHEMA_HEADER, BytesSchema, Schema
from pulsar_txn.transaction import Transaction, joining_failed

if TYPE_CHECKING:
    from kafka_store import Appender
    from pulsar_txn.client import Client

PARTITIONS_REFRESH_S = 60.0  # how often a producer looks for partitions added to its topic
log = logging.getLogger(__name__)
_MAX_EVENT_TIME = 2**63 - 1  # the metadata header's int64

SendCallback = Callable[[Result | PulsarTxnError, MessageId | None], None]
"""``callback(result, msg_id)`` as in Pulsar's Python client: ``(Result.Ok, MessageId)`` once
stored, ``(error, None)`` on failure, where ``error`` is the typed ``PulsarTxnError``."""

T = TypeVar("T")


@public_errors
class Producer(Generic[T]):
    """Sends messages to one topic, plain or inside a transaction; made by ``Client.create_producer``.

    Partition choice follows Pulsar: a partition key hashes to a partition (CRC32 of the key modulo
    the partition count: where librdkafka's default partitioner puts it, so confluent-kafka
    producers of the same topic agree), no key goes round-robin, a ``-partition-N`` topic always
    goes to N. Sends start in call order."""

    def __init__(
        self,
        client: Client,
        topic: str,
        *,
        producer_name: str | None = None,
        schema: Schema[T] | None = None,
    ) -> None:
        self._client = client
        self.topic = TopicName.parse(topic)
        """The topic this producer sends to."""
        if producer_name is not None:
            _args.text(producer_name, "producer_name")
        self.producer_name = producer_name or f"producer-{uuid.uuid4().hex[:8]}"
        """The name stored with each message (``msg.producer_name``)."""
        self.schema: Schema[T] = schema if schema is not None else cast("Schema[T]", BytesSchema())
        """The schema values are encoded with (``BytesSchema`` by default: bytes or str)."""
        self._schema_header = self.schema.header()
        self._name_bytes = self.producer_name.encode()
        self._partitions = client._partition_count(self.topic)
        self._partitions_due = time.monotonic() + PARTITIONS_REFRESH_S
        self._sequence = itertools.count()
        self._round_robin = itertools.count()
        # Sends start in call order even when a transactional one waits for ADD_PARTITION_TO_TXN:
        # one thread at a time starts them (``_starting``), the others queue theirs behind it.
        # Re-entrant: a callback may send again (e.g. to report a failure), also from a callback
        # run under this lock.
        self._order_lock = threading.RLock()
        self._starting = False  # a thread is starting a send now (outside the lock)
        self._pending: deque[_Send] = deque()  # sends waiting for an earlier one to start
        self._hooked: set[Future[None]] = set()  # registrations that will start queued sends
        self._names: dict[int, str] = {}  # partition -> its Pulsar name, for ADD_PARTITION_TO_TXN
        self._compacted: bool | None = None  # the topic's cleanup.policy compacts (None: not asked yet)
        self._closed = False

    def _refuse_compacted(self) -> None:
        """A transactional send to a topic Kafka compacts is refused before anything is written:
        its markers have no key, which a compacted topic refuses, so the transaction could never end
        and would hold the partition's readers back for good (asked once per producer; a topic that
        cannot be asked about is taken as not compacted, as before)."""
        if self._compacted is None:
            try:
                self._compacted = "compact" in self._client._admin.cleanup_policy(self.topic.kafka_topic)
            except StoreError as exc:
                log.warning("%s: cleanup.policy not known (%s); taken as not compacted", self.topic, exc)
                self._compacted = False
        if self._compacted:
            raise NotAllowedError(
                f"{self.topic} is a compacted topic (cleanup.policy=compact): transactions cannot "
                "write to it (their commit/abort markers have no key, which compaction refuses)"
            )

    def _choose_partition(self, key: bytes | None) -> int:
        if self.topic.partition is not None:
            return self.topic.partition
        if self._refresh_due():
            self._refresh_partitions()
        if key is not None:
            return zlib.crc32(key) % self._partitions
        return next(self._round_robin) % self._partitions

    def _refresh_due(self) -> bool:
        """Whether the next send looks the partition count up again (``_refresh_partitions``)."""
        return self.topic.partition is None and time.monotonic() >= self._partitions_due

    def _refresh_partitions(self) -> None:
        """Pick up partitions added to the topic since (Pulsar's autoUpdatePartitions, every 60 s);
        a failed look-up keeps the count known and tries again at the next due time."""
        self._partitions_due = time.monotonic() + PARTITIONS_REFRESH_S
        try:
            count = self._client._partition_count(self.topic, refresh=True)
        except Exception as exc:  # the broker is away: sending may still work, the count stays
            log.info(
                "producer %s: partition count of %s not refreshed: %s", self.producer_name, self.topic, exc
            )
            return
        if count > self._partitions:
            log.info("producer %s: %s grew to %d partitions", self.producer_name, self.topic, count)
            self._partitions = count

    def send_async(
        self,
        content: T,
        callback: SendCallback | None = None,
        *,
        txn: Transaction | None = None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
    ) -> Future[MessageId]:
        """Send without waiting. The returned future resolves to the MessageId once stored (or
        fails with a typed error); ``callback(result, msg_id)`` is called then too, on a client
        thread (keep it short). With ``txn``, the message is part of that transaction and
        ``txn.commit()`` waits for it."""
        if self._closed:
            raise AlreadyClosed(f"producer {self.producer_name} is closed")
        payload = self.schema.encode(content)
        return self._send_payload(
            payload, self._schema_header, callback, txn, properties, partition_key, event_timestamp
        )

    def _send_payload(
        self,
        payload: bytes | None,
        schema_header: bytes | None,
        callback: SendCallback | None,
        txn: Transaction | None,
        properties: Mapping[str, str] | None,
        partition_key: str | None,
        event_timestamp: int | None,
    ) -> Future[MessageId]:
        key: bytes | None = None
        if partition_key is not None:
            if not isinstance(partition_key, str):
                raise ConfigError(f"partition_key is a str, not {type(partition_key).__name__}")
            key = _args.encoded(partition_key, "partition_key")
        event_time: int | None = None
        if event_timestamp is not None:
            if isinstance(event_timestamp, bool) or not isinstance(event_timestamp, int | float):
                raise ConfigError(f"event_timestamp is an int (ms), not {type(event_timestamp).__name__}")
            # Whole ms, checked after the fraction is dropped: 0.5 was stored as 0, "no event time".
            if not math.isfinite(event_timestamp) or not 0 < int(event_timestamp) <= _MAX_EVENT_TIME:
                # As Pulsar's builder (``timestamp > 0``): 0 reads back as "no event time".
                raise ConfigError(
                    f"event_timestamp must be >= 1 ms and fit in 64 bits, not {event_timestamp!r}"
                )
            event_time = int(event_timestamp)
        if txn is not None and not isinstance(txn, Transaction):
            raise ConfigError(f"txn is a Transaction, not {type(txn).__name__} {txn!r}")
        if txn is not None and self._compacted is not False:
            self._refuse_compacted()
        if callback is not None and not callable(callback):  # else it failed later, only logged
            raise ConfigError(f"callback is a function (result, msg_id), not {type(callback).__name__}")
        if properties is not None and not isinstance(properties, Mapping):
            raise ConfigError(f"properties map str to str: a mapping, not {type(properties).__name__}")
        partition = self._choose_partition(key)
        check_event_time(event_time)  # a rejected send takes no sequence id
        if properties and not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
            raise ConfigError(f"properties map str to str: {dict(properties)!r}")
        props = (
            [
                (PROPERTY_PREFIX + _args.text(k, "a property name"), _args.encoded(v, f"property {k!r}"))
                for k, v in properties.items()
            ]
            if properties
            else ()
        )
        meta = encode_meta(next(self._sequence), self._name_bytes, event_time)
        # A dict: the header names are unique, and unlike a list of tuples it is never tracked by the
        # garbage collector while the record is in flight.
        headers: dict[str, bytes] = {META_HEADER: meta}
        if schema_header is not None:
            headers[SCHEMA_HEADER] = schema_header
        for name, raw in props:
            headers[name] = raw
        send = _Send(
            self._client._appender(),
            self.topic.kafka_topic,
            partition,
            payload,
            key,
            headers,
            txn,
            callback,
        )
        if txn is not None:
            headers[TXN_HEADER] = txn.txn_id_bytes
            secret = self._client._secret
            if secret is not None:  # lets the transaction open in the partition (readers check it)
                headers[TXN_MAC_HEADER] = txn._message_mac(self.topic.kafka_topic, partition, secret)
            send.registered = txn.begin_send(self._partition_name(partition))  # commit waits for it
        registered = send.registered
        hook: Future[None] | None = None  # a registration that must start the queue when done
        with self._order_lock:
            direct = not self._pending and not self._starting and (registered is None or registered.done())
            if direct:
                self._starting = True  # the common case: nothing queued; later sends queue behind it
            else:
                self._pending.append(send)
                if registered is not None and registered not in self._hooked:  # one wake-up each
                    self._hooked.add(registered)
                    hook = registered
        if direct:
            self._start(send)
            return send.result
        if hook is not None:
            hook.add_done_callback(self._registered)
        self._pump()
        return send.result

    def _start(self, send: _Send) -> None:
        """Start ``send`` (this thread holds the line: ``_starting``), then whatever queued meanwhile.
        Not under ``_order_lock``: starting may wait for room in a full producer queue, while the
        delivery thread, whose reports make that room, may run a callback that sends again."""
        try:
            send.start()
        finally:
            with self._order_lock:
                self._starting = False
                more = bool(self._pending)
        if more:
            self._pump()

    def _partition_name(self, partition: int) -> str:
        name = self._names.get(partition)
        if name is None:
            name = self._names[partition] = str(self.topic.with_partition(partition))
        return name

    def _registered(self, fut: Future[None]) -> None:
        with self._order_lock:
            self._hooked.discard(fut)
        self._pump()

    def _pump(self) -> None:
        """Start queued sends in call order: a send waits for every earlier one to have started.
        One thread at a time starts them (``_starting``); one that finds another at it leaves the
        queue to it (that one looks at the queue again when it is done)."""
        while True:
            with self._order_lock:
                if self._starting or not self._pending:
                    return
                send = self._pending[0]
                if send.registered is not None and not send.registered.done():
                    return
                self._pending.popleft()
                self._starting = True
            try:
                send.start()
            finally:
                with self._order_lock:
                    self._starting = False

    def send(
        self,
        content: T,
        *,
        txn: Transaction | None = None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
    ) -> MessageId:
        """Send and wait until stored (at most the client's operation timeout); the MessageId.

        ``txn``: part of that transaction (visible to readers only once it commits).
        ``properties``: string key/values stored with the message. ``partition_key``: chooses the
        partition and is the Kafka key. ``event_timestamp``: application time in ms."""
        future = self.send_async(
            content,
            txn=txn,
            properties=properties,
            partition_key=partition_key,
            event_timestamp=event_timestamp,
        )
        try:
            return future.result(self._client.operation_timeout_seconds)
        except TimeoutError:
            raise Timeout(
                f"send to {self.topic} not confirmed within {self._client.operation_timeout_seconds}s"
            ) from None

    def flush(self) -> None:
        """Wait until every message sent so far is stored (or failed), also transactional sends
        still waiting for their partition to join the transaction; ``Timeout`` after the client's
        operation timeout, ``AlreadyClosed`` once closed (``close`` flushed)."""
        if self._closed:
            raise AlreadyClosed(f"producer {self.producer_name} is closed")
        self._flush()

    def _flush(self) -> None:
        if self._client._appender().on_delivery_thread():
            # It would wait for the report this thread is handling: it stalled for the operation
            # timeout, and confluent-kafka's flush() there aborted the process.
            raise NotAllowedError(
                f"flush of {self.topic} in a send callback: callbacks run on the thread that reports "
                "deliveries, which cannot wait for them; flush after the callback returns"
            )
        timeout = self._client.operation_timeout_seconds
        deadline = time.monotonic() + timeout
        with self._order_lock:
            queued = [send.result for send in self._pending]  # not in the Kafka producer yet
        unsent = self._client._appender().flush(timeout)
        _done, waiting = wait(queued, max(0.0, deadline - time.monotonic()))
        if unsent or waiting:
            missing = unsent + len(waiting)
            raise Timeout(f"flush of {self.topic}: {missing} sends not stored within {timeout}s")

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called (sends are then refused)."""
        return self._closed

    def close(self) -> None:
        """Flush, then refuse further sends (``NotAllowedError``); the producer holds no other
        resources (the client's Kafka producer is shared). Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        self._client._handle_closed(self)
        try:
            self._flush()
        except NotAllowedError:
            pass  # the client is closed: it flushed every send already
        except Timeout as exc:  # closing must not fail: the sends' futures report their own outcome
            log.warning("producer %s closed with sends still in flight: %s", self.producer_name, exc)


def _notify(callback: SendCallback | None, result: Result | PulsarTxnError, mid: MessageId | None) -> None:
    if callback is None:
        return
    try:
        callback(result, mid)
    except Exception:  # an application callback must not break the client's delivery thread
        log.exception("send_async callback failed")


class _Send(Delivery):
    """One message on its way: its future, its transaction's bookkeeping, and (as a ``Delivery``) the
    record and its delivery report handler: one object per message while it is in flight, see
    ``kafka_store.producer.Delivery`` for why that matters."""

    __slots__ = ("callback", "registered", "result", "txn")

    def __init__(
        self,
        appender: Appender,
        topic: str,
        partition: int,
        payload: bytes | None,
        key: bytes | None,
        headers: dict[str, bytes],
        txn: Transaction | None,
        callback: SendCallback | None,
    ) -> None:
        self.appender = appender
        self.topic = topic
        self.partition = partition
        self.value = payload
        self.key = key
        self.headers = headers
        self.txn = txn
        self.callback = callback
        self.registered: Future[None] | None = None  # the transaction's ADD_PARTITION_TO_TXN
        self.result: Future[MessageId] = StartedFuture()  # a send cannot be cancelled

    def start(self) -> None:
        """Append to Kafka, or fail if the partition could not join the transaction."""
        exc = self.registered.exception() if self.registered is not None else None
        if exc is None:
            self.appender.append_delivery(self)
            return
        self.fail(joining_failed(exc))

    def fail(self, err: PulsarTxnError) -> None:
        self.result.set_exception(err)
        if self.txn is not None:
            self.txn.op_finished(err)
        _notify(self.callback, err, None)

    def delivered(self, offset: int | None, error: StoreError | None) -> None:
        if error is not None or offset is None:
            what = f"send to {self.topic}[{self.partition}] failed"
            self.fail(store_failure(error, what))
            return
        mid = new_message_id(self.topic, self.partition, offset)
        self.result.set_result(mid)
        if self.txn is not None:
            self.txn.op_finished(None)
        _notify(self.callback, Result.Ok, mid)
