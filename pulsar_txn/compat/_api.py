"""``Client``, ``Producer``, ``Consumer`` and ``Reader`` with the Pulsar Python client's signatures,
on top of this library's own classes (which stay reachable as ``.native``)."""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pulsar_txn import _args
from pulsar_txn import client as _client
from pulsar_txn import consumer as _consumer
from pulsar_txn import message as _message
from pulsar_txn import producer as _producer
from pulsar_txn import reader as _reader
from pulsar_txn.compat import _params
from pulsar_txn.compat._ids import Message, MessageId, native_id
from pulsar_txn.compat._listener import ListenerDispatch, ListenerThread
from pulsar_txn.compat._table_view import TableView
from pulsar_txn.compat.schema import to_native
from pulsar_txn.errors import AlreadyClosed, ConfigError, PulsarTxnError, Result, Timeout, TopicNotFound
from pulsar_txn.naming import TopicName, from_kafka
from pulsar_txn.transaction import Transaction, TransactionBuilder

T = TypeVar("T")
_H = TypeVar("_H", "Consumer[Any]", "Reader[Any]", "TableView[Any]")


@dataclass(frozen=True)
class ServiceInfo:
    """pulsar-client's ``ServiceInfo``: a cluster endpoint (no TLS to the coordinator here)."""

    service_url: str
    authentication: Any = None
    tls_trust_certs_file_path: str | None = None

    @property
    def use_tls(self) -> bool:
        """Always False: connections to the coordinator are plain TCP."""
        return False


def _check_service_url(service_url: object) -> None:
    """pulsar-client URLs this client cannot use, refused as not supported (a clear
    ``OperationNotSupported``, not the generic ``ConfigError`` of the URL parser)."""
    if isinstance(service_url, str):
        if service_url.startswith(("pulsar+ssl://", "https://")):
            raise _params.OperationNotSupported(
                f"{service_url!r:.80}: TLS to the coordinator is not supported (use pulsar://host:port)"
            )
        if "," in service_url:
            raise _params.OperationNotSupported(
                f"{service_url!r:.80}: one coordinator address is needed (pulsar://host:port); any "
                "coordinator of the cluster serves every transaction through lookups"
            )


@dataclass(frozen=True)
class ConsumerDeadLetterPolicy:
    """pulsar-client's dead-letter policy; ``initial_subscription_name`` is not supported."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise ConfigError("max_redeliver_count must be at least 1")

    def native(self) -> _consumer.DeadLetterPolicy:
        """This library's ``DeadLetterPolicy``."""
        if self.initial_subscription_name is not None:
            raise _params.OperationNotSupported("dead letter initial_subscription_name is not supported")
        return _consumer.DeadLetterPolicy(self.max_redeliver_count, self.dead_letter_topic)


@dataclass(frozen=True)
class BatchReceivePolicy:
    """pulsar-client's ``ConsumerBatchReceivePolicy``: ``batch_receive()`` returns up to
    ``max_num_message`` messages, waiting at most ``timeout_ms`` (``max_num_bytes`` is ignored)."""

    max_num_message: int = -1
    max_num_bytes: int = 10 * 1024 * 1024
    timeout_ms: int = 100

    def __post_init__(self) -> None:
        if self.max_num_message <= 0 and self.max_num_bytes <= 0 and self.timeout_ms <= 0:
            # pulsar-client refuses it so (its std::invalid_argument, a ValueError in Python).
            raise ValueError("At least one of maxNumMessages, maxNumBytes and timeoutMs must be specified.")


_NO_LIMIT_MS = 365 * 24 * 3600 * 1000  # a batch receive timeout "without limit"


def _no_null_value(content: object) -> None:
    if content is None:
        raise _params.OperationNotSupported(
            "sending a null value (pulsar-client's tombstone for compaction) is not supported here "
            "(records without a value that others wrote are delivered, with has_null_value() True)"
        )


class Client:
    """``pulsar.Client(service_url, authentication=None, operation_timeout_seconds=30, ...)`` on Kafka.

    Where Kafka is comes on top of pulsar-client's parameters: ``bootstrap_servers=`` or ``kafka={...}``
    (and the other keyword options of ``pulsar_txn.Client``). ``Client.embedded()`` runs a coordinator
    in-process. Transactions as in Pulsar's Java client: ``client.new_transaction()...build()``."""

    def __init__(self, service_url: str, *args: Any, **kwargs: Any) -> None:
        _check_service_url(service_url)
        self._auto_create = bool(kwargs.pop("auto_create_topics", True))
        own = {k: kwargs.pop(k) for k in list(kwargs) if k in _params.NATIVE_CLIENT_OPTIONS}
        given = _params.CLIENT.positional(args, kwargs)
        _params.CLIENT.check(given)
        self._track_handles(given.get("message_listener_threads", 1))
        auth = given.get("authentication")
        if auth is not None and not isinstance(auth, str | _client.AuthenticationToken):
            auth = _token_of(auth)
        self.native = _client.Client(
            service_url,
            authentication=auth,
            operation_timeout_seconds=float(given.get("operation_timeout_seconds", 30)),
            **own,
        )
        """The ``pulsar_txn.Client`` underneath."""

    def get_service_info(self) -> ServiceInfo:
        """Where this client connects (pulsar-client's ``get_service_info``)."""
        return ServiceInfo(self.native.service_url)

    @classmethod
    def embedded(cls, *args: Any, **kwargs: Any) -> Client:
        """A client with an in-process coordinator (``pulsar_txn.Client.embedded``)."""
        out = cls.__new__(cls)
        out._track_handles(1)
        out._auto_create = bool(kwargs.pop("auto_create_topics", True))
        out.native = _client.Client.embedded(*args, **kwargs)
        return out

    def _auto_created(self, make: Callable[[], T], topics: list[str]) -> T:
        """``make()``; if a topic is missing, create it (one partition) and try again, as a Pulsar
        broker does by default (``allowAutoTopicCreation``). ``auto_create_topics=False`` on the
        Client turns this off."""
        try:
            return make()
        except TopicNotFound:
            if not self._auto_create or not topics:
                raise
            for topic in topics:
                self.native.create_topic(topic, 1)  # a no-op for a topic that exists
            return make()

    def create_producer(self, topic: str, *args: Any, **kwargs: Any) -> Producer[Any]:
        """pulsar-client's ``create_producer(topic, producer_name=None, schema=..., ...)``; what each
        option does here: ``_params.CREATE_PRODUCER``."""
        given = _params.CREATE_PRODUCER.positional(args, kwargs)
        _params.CREATE_PRODUCER.check(given)
        schema = to_native(given.get("schema"))
        name = given.get("producer_name")
        native = self._auto_created(
            lambda: self.native.create_producer(topic, producer_name=name, schema=schema), [topic]
        )
        return Producer(native)

    def subscribe(self, topic: Any, subscription_name: str, *args: Any, **kwargs: Any) -> Consumer[Any]:
        """pulsar-client's ``subscribe(topic, subscription_name, consumer_type=..., ...)``: ``topic``
        may be a name, a list or a compiled regex; Exclusive and Failover only."""
        given = _params.SUBSCRIBE.positional(args, kwargs)
        _params.SUBSCRIBE.check(given)
        options: dict[str, Any] = {}
        if isinstance(topic, re.Pattern):  # pulsar-client subscribes to a pattern given as a regex
            options["pattern"], topic = topic.pattern, None
            if given.get("pattern_auto_discovery_period") is not None:
                options["pattern_auto_discovery_period"] = given["pattern_auto_discovery_period"]
        if given.get("consumer_name") is not None:
            options["consumer_name"] = given["consumer_name"]
        if given.get("unacked_messages_timeout_ms"):
            options["ack_timeout_millis"] = int(given["unacked_messages_timeout_ms"])
        if "negative_ack_redelivery_delay_ms" in given:
            options["negative_ack_redelivery_delay_ms"] = int(given["negative_ack_redelivery_delay_ms"])
        dlq = given.get("dead_letter_policy")
        if dlq is not None:
            if not isinstance(dlq, ConsumerDeadLetterPolicy | _consumer.DeadLetterPolicy):
                raise ConfigError("dead_letter_policy: use pulsar_txn.compat.ConsumerDeadLetterPolicy")
            options["dead_letter_policy"] = dlq.native() if isinstance(dlq, ConsumerDeadLetterPolicy) else dlq
        consumer_type = _enum_value(given.get("consumer_type"), _consumer.ConsumerType, "Exclusive")
        initial = _enum_value(given.get("initial_position"), _consumer.InitialPosition, "Latest")
        schema = to_native(given.get("schema"))
        # Checked before subscribing: a consumer made and then refused would hold the subscription.
        policy = given.get("batch_receive_policy")
        if policy is not None and not isinstance(policy, BatchReceivePolicy):
            raise ConfigError("batch_receive_policy: use pulsar_txn.compat.ConsumerBatchReceivePolicy")
        listener = _listener_of(given, "message_listener")
        native = self._auto_created(
            lambda: self.native.subscribe(
                topic,
                subscription_name,
                consumer_type=consumer_type,
                initial_position=initial,
                schema=schema,
                **options,
            ),
            [topic] if isinstance(topic, str) else list(topic or []),
        )
        return self._made(Consumer(native, self.native, policy, listener, self._dispatch))

    def create_reader(self, topic: str, start_message_id: Any, *args: Any, **kwargs: Any) -> Reader[Any]:
        """pulsar-client's ``create_reader(topic, start_message_id, ...)``: committed messages after
        ``start_message_id`` (from it with ``start_message_id_inclusive=True``)."""
        given = _params.CREATE_READER.positional(args, kwargs)
        _params.CREATE_READER.check(given)
        start = native_id(start_message_id)
        inclusive = bool(given.get("start_message_id_inclusive", False))
        schema = to_native(given.get("schema"))
        reader = self._auto_created(
            lambda: self.native.create_reader(
                topic, start, schema=schema, start_message_id_inclusive=inclusive
            ),
            [topic],
        )
        return self._made(Reader(reader, self.native, _listener_of(given, "reader_listener"), self._dispatch))

    def get_topic_partitions(self, topic: str) -> list[str]:
        """The topic's partitions as Pulsar names them (``persistent://.../t-partition-N``); a
        non-partitioned topic gives itself."""
        name = TopicName.parse(topic)
        count = self.native._partition_count(name, refresh=True)  # pulsar-client asks every time
        if count <= 1:
            return [str(name)]
        return [f"{name}-partition-{i}" for i in range(count)]

    def new_transaction(self) -> TransactionBuilder:
        """A transaction builder, as Pulsar's Java ``client.newTransaction()`` (an addition)."""
        return self.native.new_transaction()

    def transaction(self, timeout: float = 60.0) -> Transaction:
        """A transaction to use as a context manager (an addition; see ``pulsar_txn.Client``)."""
        return self.native.transaction(timeout)

    def create_table_view(
        self, topic: str, subscription_name: str | None = None, schema: Any = None
    ) -> TableView[Any]:
        """pulsar-client's ``create_table_view(topic, subscription_name=None, schema=...)``: the
        latest committed value of every key of ``topic`` (``subscription_name`` is only a label:
        a table view reads without a subscription here)."""
        native_schema = to_native(schema)
        reader = self._auto_created(
            lambda: self.native.create_reader(topic, _message.EARLIEST, schema=native_schema), [topic]
        )
        return self._made(TableView(reader, topic, subscription_name))

    def _track_handles(self, listener_threads: object) -> None:
        """What ``close`` and message listeners need (also for ``embedded``, which skips __init__)."""
        threads = _args.integer(listener_threads, "message_listener_threads", minimum=1)
        self._handles: weakref.WeakSet[Any] = weakref.WeakSet()  # consumers, readers, table views
        self._dispatch = ListenerDispatch(threads)

    def _made(self, handle: _H) -> _H:
        """Remember a consumer, reader or table view this client made, for ``close``."""
        self._handles.add(handle)
        return handle

    def close(self) -> None:
        """Close the client and everything it made: their listener and table-view threads stop
        (they used to go on, retrying reads of closed handles every 0.5 s, and ``is_connected``
        stayed True), as pulsar-client's do."""
        for handle in list(self._handles):
            with contextlib.suppress(PulsarTxnError):
                handle.close()
        self._dispatch.shutdown()
        self.native.close()

    def shutdown(self) -> None:
        """Same as ``close`` here."""
        self.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Producer(Generic[T]):
    """pulsar-client's Producer: ``send``, ``send_async(content, callback)``, ``flush``, ``close``;
    ``txn=`` on both sends is this library's addition."""

    def __init__(self, native: _producer.Producer[T]) -> None:
        self.native = native
        self._last_sequence_id = -1

    def topic(self) -> str:
        """The topic written to."""
        return str(self.native.topic)

    def producer_name(self) -> str:
        """The producer's name (written with every message)."""
        return self.native.producer_name

    def last_sequence_id(self) -> int:
        """How many messages this wrapper has sent, minus one (-1 before the first)."""
        return self._last_sequence_id

    def is_connected(self) -> bool:
        """True until closed (the Kafka producer reconnects by itself)."""
        return not self.native.closed

    def send(self, content: T, *args: Any, txn: Transaction | None = None, **kwargs: Any) -> MessageId:
        """Send and wait until stored; returns its MessageId. ``txn=``: inside that transaction."""
        given = _params.SEND.positional(args, kwargs)
        _params.SEND.check(given)
        _no_null_value(content)
        mid = self.native.send(content, txn=txn, **_send_options(given))
        self._last_sequence_id += 1
        return MessageId.wrap(mid)

    def send_async(
        self,
        content: T,
        callback: Callable[[Any, MessageId | None], None] | None,
        *args: Any,
        txn: Transaction | None = None,
        **kwargs: Any,
    ) -> None:
        """Send; ``callback(result, msg_id)`` once stored or failed, ``result`` a ``Result`` as in
        pulsar-client (``Result.Ok``, ``Result.Timeout``, ...). ``txn=``: inside that transaction."""
        given = _params.SEND_ASYNC.positional(args, kwargs)
        _params.SEND_ASYNC.check(given)
        _no_null_value(content)

        def done(result: Result | PulsarTxnError, mid: _message.MessageId | None) -> None:
            if callback is not None:
                code = result.error() if isinstance(result, PulsarTxnError) else result
                callback(code, MessageId.wrap(mid) if mid is not None else None)

        try:
            self.native.send_async(content, done, txn=txn, **_send_options(given))
        except AlreadyClosed as exc:  # pulsar-client reports it to the callback, as any failure
            done(exc, None)
            return
        self._last_sequence_id += 1

    def flush(self) -> None:
        """Wait until every message sent so far is stored."""
        self.native.flush()

    def close(self) -> None:
        """Flush and close the producer."""
        self.native.close()


class Consumer(Generic[T]):
    """pulsar-client's Consumer; ``acknowledge(msg, txn)`` and ``acknowledge_cumulative(msg, txn)``
    take this library's transactions."""

    def __init__(
        self,
        native: _consumer.Consumer[T],
        client: _client.Client,
        batch_policy: BatchReceivePolicy | None,
        listener: Callable[[Consumer[T], Message[T]], Any] | None = None,
        dispatch: ListenerDispatch | None = None,
    ) -> None:
        self.native = native
        self._client = client
        self._batch = batch_policy or BatchReceivePolicy()
        self._open = True
        self._names = _TopicNames(client)
        self._listener: ListenerThread | None = None
        if listener is not None:
            self._listener = ListenerThread(
                native.subscription,
                lambda ms: self._names.wrap(native.receive(ms)),
                lambda msg: listener(self, msg),
                dispatch,
            )
            self._listener.start()

    def _no_listener(self, call: str) -> None:
        if self._listener is not None:
            raise ConfigError(f"cannot {call}() when a message_listener is set (as pulsar-client)")

    def topic(self) -> str:
        """The subscribed topic (topics joined by commas)."""
        return ",".join(str(t) for t in self.native.topics)

    def subscription_name(self) -> str:
        """The subscription's name."""
        return self.native.subscription

    def consumer_name(self) -> str:
        """This consumer's name."""
        return self.native.consumer_name

    def is_connected(self) -> bool:
        """False once closed or unsubscribed."""
        return self._open

    def receive(self, timeout_millis: int | None = None) -> Message[T]:
        """The next message; ``Timeout`` after ``timeout_millis`` (None: wait). Refused when a
        ``message_listener`` is set."""
        self._no_listener("receive")
        return self._names.wrap(self.native.receive(timeout_millis))

    def batch_receive(self) -> list[Message[T]]:
        """Up to the batch receive policy's count of messages, within its timeout."""
        self._no_listener("batch_receive")
        count = self._batch.max_num_message if self._batch.max_num_message > 0 else 100
        # pulsar-client: a timeout of 0 or below means no limit (the batch fills up first).
        timeout = self._batch.timeout_ms if self._batch.timeout_ms > 0 else _NO_LIMIT_MS
        return [self._names.wrap(m) for m in self.native.batch_receive(count, timeout)]

    def acknowledge(self, message: Any, txn: Transaction | None = None) -> None:
        """Acknowledge a message or id; with ``txn``, inside that transaction."""
        self.native.acknowledge(native_id(message), txn)

    def acknowledge_cumulative(self, message: Any, txn: Transaction | None = None) -> None:
        """Acknowledge everything up to a message or id; with ``txn``, inside it."""
        self.native.acknowledge_cumulative(native_id(message), txn)

    def negative_acknowledge(self, message: Any) -> None:
        """Have the message redelivered after the negative-ack delay."""
        self.native.negative_acknowledge(native_id(message))

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every received, unacknowledged message."""
        self.native.redeliver_unacknowledged_messages()

    def seek(self, messageid: Any) -> None:
        """Move the subscription to a MessageId, or to a publish time (ms since the epoch)."""
        self.native.seek(_seek_target(messageid))

    def get_last_message_id(self) -> MessageId:
        """The last readable message of the subscription's (first) topic's partitions, the one with
        the highest offset; ``MessageId.earliest`` if there is none."""
        ids = self._client.get_last_message_ids(str(self.native.topics[0])).values()
        known = [mid for mid in ids if mid is not None]
        return MessageId.wrap(max(known, key=lambda m: m.offset)) if known else MessageId.earliest

    def pause_message_listener(self) -> None:
        """Stop calling the message listener until ``resume_message_listener`` (a call under way
        finishes); messages wait in the subscription meanwhile."""
        if self._listener is None:
            raise ConfigError("pause_message_listener(): this consumer has no message_listener")
        self._listener.pause()

    def resume_message_listener(self) -> None:
        """Call the message listener again."""
        if self._listener is None:
            raise ConfigError("resume_message_listener(): this consumer has no message_listener")
        self._listener.resume()

    def unsubscribe(self) -> None:
        """Delete the subscription and close the consumer. If it is refused (e.g. other consumers
        are connected), the consumer and its listener go on, as with pulsar-client."""
        if self._listener is not None:
            self._listener.pause()
        try:
            self.native.unsubscribe()
        except BaseException:
            if self._listener is not None:
                self._listener.resume()
            raise
        self._stop_listener()
        self._open = False

    def close(self) -> None:
        """Close the consumer (its acknowledgements are kept)."""
        self._stop_listener()
        self.native.close()
        self._open = False

    def _stop_listener(self) -> None:
        if self._listener is not None:
            self._listener.stop()


class Reader(Generic[T]):
    """pulsar-client's Reader."""

    def __init__(
        self,
        native: _reader.Reader[T],
        client: _client.Client,
        listener: Callable[[Reader[T], Message[T]], Any] | None = None,
        dispatch: ListenerDispatch | None = None,
    ) -> None:
        self.native = native
        self._names = _TopicNames(client)
        self._open = True
        self._listener: ListenerThread | None = None
        if listener is not None:
            self._listener = ListenerThread(
                str(native.topic),
                lambda ms: self._names.wrap(native.read_next(ms)),
                lambda msg: listener(self, msg),
                dispatch,
            )
            self._listener.start()

    def topic(self) -> str:
        """The topic read."""
        return str(self.native.topic)

    def read_next(self, timeout_millis: int | None = None) -> Message[T]:
        """The next committed message; ``Timeout`` after ``timeout_millis`` (None: wait for one).
        Refused when a ``reader_listener`` is set."""
        if self._listener is not None:
            raise ConfigError("cannot read_next() when a reader_listener is set (as pulsar-client)")
        while True:
            try:
                return self._names.wrap(self.native.read_next(timeout_millis))
            except Timeout:
                if timeout_millis is not None:
                    raise

    def has_message_available(self) -> bool:
        """Whether a committed message is ready to read."""
        return self.native.has_message_available()

    def seek(self, messageid: Any) -> None:
        """Move the reader to a MessageId, or to a publish time (ms since the epoch)."""
        self.native.seek(_seek_target(messageid))

    def is_connected(self) -> bool:
        """True until closed."""
        return self._open

    def close(self) -> None:
        """Close the reader."""
        if self._listener is not None:
            self._listener.stop()
        self.native.close()
        self._open = False


class _TopicNames:
    """Messages as Pulsar names their topic: ``-partition-N`` only for partitioned topics."""

    def __init__(self, client: _client.Client) -> None:
        self._client = client
        self._plain: dict[str, str | None] = {}  # Kafka topic -> its name if it has one partition

    def wrap(self, msg: _message.Message[T]) -> Message[T]:
        kafka_topic = msg.message_id.topic
        if msg.message_id.partition > 0:  # partitioned (also a topic of one partition grown since)
            self._plain[kafka_topic] = None
        elif kafka_topic not in self._plain:
            name = from_kafka(kafka_topic)
            self._plain[kafka_topic] = str(name) if self._client._partition_count(name) <= 1 else None
        return Message(msg, self._plain[kafka_topic])


def _listener_of(given: Mapping[str, Any], name: str) -> Any:
    listener = given.get(name)
    if listener is not None and not callable(listener):
        raise ConfigError(f"{name} must be callable (listener(consumer_or_reader, message))")
    return listener


def _seek_target(messageid: Any) -> _message.MessageId | int:
    """Where a ``seek`` goes: a native id, or a publish time (an ``int``, ms) as pulsar-client takes it."""
    if isinstance(messageid, int) and not isinstance(messageid, bool):
        return messageid
    return native_id(messageid)


def _send_options(given: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: given[k] for k in ("properties",) if given.get(k) is not None}
    if given.get("partition_key"):  # pulsar-client sets it only when truthy: "" is no key
        out["partition_key"] = given["partition_key"]
    if given.get("event_timestamp"):  # pulsar-client sets it only when truthy: 0 is "none"
        out["event_timestamp"] = given["event_timestamp"]
    return out


def _enum_value(value: Any, enum: Any, default: str) -> Any:
    """pulsar-client's enum members (or ours, or their names) as this library's enum."""
    if value is None:
        return enum(default)
    name = getattr(value, "name", None)
    if name == "KeyShared":
        return enum("Key_Shared")
    if isinstance(value, enum):
        return value
    try:
        return enum(name if name is not None else value)
    except ValueError:
        raise ConfigError(f"unknown {enum.__name__}: {value!r}") from None


def _token_of(auth: Any) -> str:
    """The token of pulsar-client's ``AuthenticationToken`` (the only method supported here)."""
    if type(auth).__name__ == "AuthenticationToken":
        token = getattr(auth, "token", None) or getattr(auth, "_token", None)
        if isinstance(token, str) and token:
            return token
    if type(auth).__name__ == "AuthenticationToken":  # pulsar-client's own: its token is out of reach
        raise ConfigError(
            "pulsar-client's AuthenticationToken keeps its token in C++: use "
            "pulsar_txn.compat.AuthenticationToken(token) (same arguments)"
        )
    raise _params.OperationNotSupported(
        f"authentication {type(auth).__name__} is not supported; use AuthenticationToken(token)"
    )
