"""Client: the entry point, shaped like Pulsar's Python client."""

from __future__ import annotations

import inspect
import logging
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, overload

from pydantic import ValidationError

from kafka_store import (
    Appender,
    KafkaConfig,
    LocalBroker,
    StoreError,
    TopicAdmin,
    TopicNotFoundError,
    end_offsets,
)
from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn._deadlines import DeadlineWatch
from pulsar_txn._future import relay
from pulsar_txn._schema_registry import DEFAULT_SCHEMA_TOPIC, SchemaRegistry
from pulsar_txn._topic_delete import TopicDeleted, delete_topic
from pulsar_txn.buffer.reader import UNKNOWN_NUM_TCS, BufferOptions, discover_num_tcs, load_state
from pulsar_txn.buffer.snapshot import DEFAULT_SNAPSHOT_TOPIC, SnapshotStore
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.config import CoordinatorConfig, system_groups, validation_problems
from pulsar_txn.consumer import Consumer, ConsumerType, InitialPosition
from pulsar_txn.errors import (
    AlreadyClosed,
    ConfigError,
    InvalidTopicName,
    ProducerBusy,
    PulsarTxnError,
    TopicNotFound,
    from_store_error,
)
from pulsar_txn.message import EARLIEST, MessageId
from pulsar_txn.naming import (
    DEFAULT_LOG_TOPIC,
    TopicName,
    from_kafka,
    names_of_kafka_topic,
    system_topic_setting,
)
from pulsar_txn.producer import Producer
from pulsar_txn.reader import Reader, last_message_ids
from pulsar_txn.schema import Schema
from pulsar_txn.tc_client import SyncTcClient, check_service_url
from pulsar_txn.transaction import Transaction, TransactionBuilder, TransactionState
from pulsar_txn.txnid import TxnID

log = logging.getLogger(__name__)

T = TypeVar("T")
H = TypeVar("H", "Producer[Any]", "Reader[Any]", "Consumer[Any]")


class AuthenticationToken:
    """Token authentication, as Pulsar's ``AuthenticationToken(token)``; ``Client(...,
    authentication=AuthenticationToken("..."))`` (a plain string token is accepted too)."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        """``token``: the token, or a function returning it, as Pulsar's client takes (called when a
        ``Client`` is made with this authentication)."""
        if not token or not (isinstance(token, str) or callable(token)):
            raise ConfigError("AuthenticationToken needs a non-empty token or a function returning one")
        self._token = token

    @property
    def token(self) -> str:
        """The token sent to the coordinator."""
        value = self._token() if callable(self._token) else self._token
        if not isinstance(value, str) or not value:
            raise ConfigError("the AuthenticationToken function did not return a non-empty string")
        return value

    def __repr__(self) -> str:
        return "AuthenticationToken(***)"  # never print the secret


def _bounded(kafka: KafkaConfig, operation_timeout_seconds: float) -> KafkaConfig:
    """``kafka`` with its request timeout lowered to the operation timeout, unless set explicitly:
    the operation timeout bounds every blocking call, Kafka's requests (topic lookups, offsets,
    admin calls) included."""
    wanted_ms = max(1, int(operation_timeout_seconds * 1000))
    if "request_timeout_ms" in kafka.model_fields_set or wanted_ms >= kafka.request_timeout_ms:
        return kafka
    return kafka.model_copy(update={"request_timeout_ms": wanted_ms})


@public_errors
class Client:
    """``Client(service_url, bootstrap_servers=...)`` or ``Client(service_url, kafka={...})``.

    ``service_url`` is a coordinator (``pulsar://host:6650``); Kafka is where the data lives
    (``kafka`` takes any ``KafkaConfig`` field, e.g. SASL settings). ``operation_timeout_seconds``
    bounds every blocking call; ``authentication`` is a token (``AuthenticationToken`` or str) for
    the coordinator; ``keep_alive_interval_seconds`` (30, as Pulsar's): a coordinator connection
    silent that long gets a PING, and after twice that it is given up and its TCs looked up again.
    ``marker_secret``, ``snapshot_topic`` and ``log_topic`` must match the coordinators' settings
    (consumers look up, in the transaction log, transactions that stay pending); ``schema_topic``
    is where Avro producers register their schemas for readers (the same for every client of a
    cluster). ``num_tcs``: the cluster's TC count; by default the transaction log's partition
    count, learnt on first use, so reads fold exactly as the transaction-buffer service does. No
    network I/O happens until the first producer, reader or transaction needs it. Use as a context
    manager, or call ``close``.
    """

    def __init__(
        self,
        service_url: str,
        *,
        bootstrap_servers: str | None = None,
        kafka: dict[str, Any] | KafkaConfig | None = None,
        operation_timeout_seconds: float = 30.0,
        authentication: AuthenticationToken | str | None = None,
        num_tcs: int | None = None,
        marker_secret: str | bytes | None = None,
        snapshot_topic: str = DEFAULT_SNAPSHOT_TOPIC,
        log_topic: str = DEFAULT_LOG_TOPIC,
        keep_alive_interval_seconds: float = 30.0,
        schema_topic: str = DEFAULT_SCHEMA_TOPIC,
    ) -> None:
        if isinstance(kafka, KafkaConfig):
            self.kafka = kafka
        elif kafka is not None and not isinstance(kafka, Mapping):
            raise ConfigError(f"kafka is a KafkaConfig or a dict of its settings, not {type(kafka).__name__}")
        else:
            settings = dict(kafka or {})
            if bootstrap_servers:
                settings["bootstrap_servers"] = bootstrap_servers
            if "bootstrap_servers" not in settings:
                raise ConfigError("Client needs bootstrap_servers= or kafka={'bootstrap_servers': ...}")
            try:
                self.kafka = KafkaConfig(**settings)
            except ValidationError as exc:
                raise ConfigError(f"kafka settings: {validation_problems(exc)}") from exc
        operation_timeout_seconds = _args.seconds(operation_timeout_seconds, "operation_timeout_seconds")
        self.kafka = _bounded(self.kafka, operation_timeout_seconds)
        if num_tcs is not None:
            _args.integer(num_tcs, "num_tcs", minimum=1)
        check_service_url(service_url)  # a typo fails here, not at the first transaction
        self.service_url = service_url
        self.operation_timeout_seconds = operation_timeout_seconds
        self._keep_alive = _args.seconds(keep_alive_interval_seconds, "keep_alive_interval_seconds")
        if isinstance(authentication, AuthenticationToken):
            authentication = authentication.token
        if authentication is not None:  # a coordinator refuses such tokens in its own config too
            authentication = _args.bearer_token(authentication, "authentication")
        self._auth = authentication
        self._num_tcs = num_tcs
        self._secret = _marker_key(marker_secret)
        self._snapshot_topic = system_topic_setting(snapshot_topic, "snapshot_topic")
        self._schema_topic = system_topic_setting(schema_topic, "schema_topic")
        self._schemas: SchemaRegistry | None = None
        # The coordinators' transaction log (consumers look things up there).
        self._log_topic = system_topic_setting(log_topic, "log_topic")
        self._lock = threading.Lock()
        self._tc_client: SyncTcClient | None = None
        self._tc_lock = threading.Lock()  # one coordinator connect at a time (not under _lock)
        self._appender_: Appender | None = None
        self._admin = TopicAdmin(self.kafka)
        self._snapshot_store: SnapshotStore | None = None
        self._counts: dict[str, int] = {}
        self._owned: list[Any] = []  # embedded broker / coordinator stopped on close
        # Consumer groups of the deployment's own services: no subscription may be named so (it
        # would join the group and share its partitions with the service). The defaults, and an
        # embedded coordinator's own.
        self._reserved_groups = system_groups(CoordinatorConfig())
        self._closed = False  # then nothing makes its connections again (NotAllowedError instead)
        self._dlq_producers: dict[str, Producer[bytes]] = {}
        self._consumers: list[Consumer[Any]] = []
        # Live handles per transaction (an original and those of resume_transaction): once one ends
        # it, the others know, so a send on another is refused instead of landing after the end's
        # marker (discarded) while that handle's own commit reported success.
        self._handles: dict[TxnID, weakref.WeakSet[Transaction]] = {}
        self._handles_lock = threading.Lock()
        # Open producers and readers: close() closes them too (each leaves the set when closed).
        # Weak: one the application dropped unclosed is not kept alive here (a Spark writer made a
        # producer per batch on a client cached for the process: a strong set grew for good).
        self._open_handles: weakref.WeakSet[Producer[Any] | Reader[Any]] = weakref.WeakSet()
        self._closing = False  # close() has begun: no new producer or reader is taken
        self._ends = DeadlineWatch("pulsar-txn-end-deadlines")  # commit_async / abort_async in flight

    # ------------------------------------------------------------------ embedded mode
    @classmethod
    def embedded(
        cls,
        *,
        bootstrap_servers: str | None = None,
        data_dir: str | Path | None = None,
        coordinator: CoordinatorConfig | None = None,
        **kwargs: Any,
    ) -> Client:
        """A client with the coordinator running in-process, against ``bootstrap_servers`` or, if not
        given, an embedded broker started here. Everything started is stopped by ``close``."""
        from pulsar_txn.coordinator.embedded import EmbeddedCoordinator

        owned: list[Any] = []
        kafka: KafkaConfig | None = None
        if bootstrap_servers is None:
            made = None if data_dir else _TempDir(tempfile.mkdtemp(prefix="pulsar-txn-"))
            root = Path(made.path) if made is not None else Path(str(data_dir))
            broker = LocalBroker(root / "broker")
            try:
                bootstrap_servers = broker.start()
            except BaseException:
                if made is not None:
                    made.stop()
                raise
            owned.append(broker)
            if made is not None:
                owned.append(made)  # removed after the broker stopped (close stops them in order)
            # Last: it stops the broker after this process has exited if nobody did (no close(), an
            # exception outside ``with``, a SIGKILL).
            try:
                owned.append(broker.reaper(made.path if made is not None else None))
            except OSError as exc:  # no watcher: close() still stops it
                log.warning("cannot watch the embedded broker for an exit without close(): %s", exc)
            kafka = broker.kafka_config()  # with the idle gate the embedded broker wants
        try:
            if kafka is None:
                kafka = KafkaConfig(bootstrap_servers=bootstrap_servers)
            if "operation_timeout_seconds" in kwargs:  # it bounds the start too (its topic creation, ...)
                seconds = _args.seconds(kwargs["operation_timeout_seconds"], "operation_timeout_seconds")
                kafka = _bounded(kafka, seconds)
            config = coordinator or CoordinatorConfig(
                port=0, num_tcs=4, ownership="static", static_tc_ids=(0, 1, 2, 3)
            )
            ec = EmbeddedCoordinator(kafka, config).start()
            owned.insert(0, ec)
            assert ec.url is not None
            secret = config.marker_secret.get_secret_value() if config.marker_secret else None
            token = config.auth_token.get_secret_value() if config.auth_token else None
            client = cls(
                ec.url,
                kafka=kafka,
                num_tcs=config.num_tcs,
                marker_secret=secret,
                authentication=token,
                log_topic=config.log_topic,
                **kwargs,
            )
        except BaseException:
            # No client to close: what was started for it (coordinator, broker, data dir) goes now,
            # also when an argument turns out bad only here.
            for started in owned:
                started.stop()
            raise
        client._owned = owned
        client._reserved_groups.update(system_groups(config))
        return client

    # ------------------------------------------------------------------ factories
    def new_transaction(self) -> TransactionBuilder:
        """``client.new_transaction().with_transaction_timeout(seconds).build()``, as in Pulsar."""
        self._check_open()
        return TransactionBuilder(self)

    def transaction(self, timeout: float = 60.0) -> Transaction:
        """A new open transaction; ``with client.transaction(timeout=30) as txn:`` commits on
        success and aborts on an exception. ``timeout`` in seconds: the coordinator aborts the
        transaction if it has not ended by then."""
        return self.new_transaction().with_transaction_timeout(timeout).build()

    @overload
    def create_producer(self, topic: str, *, producer_name: str | None = None) -> Producer[bytes | str]: ...

    @overload
    def create_producer(
        self, topic: str, *, producer_name: str | None = None, schema: Schema[T]
    ) -> Producer[T]: ...

    @overload
    def create_producer(
        self, topic: str, *, producer_name: str | None = None, schema: Schema[Any] | None
    ) -> Producer[Any]: ...

    def create_producer(
        self, topic: str, *, producer_name: str | None = None, schema: Schema[Any] | None = None
    ) -> Producer[Any]:
        """A producer for ``topic`` (``TopicNotFound`` if it does not exist). ``schema``: how
        values are encoded (default bytes; ``StringSchema()``, ``JsonSchema(T)``, ``AvroSchema(T)``)."""
        self._check_open()
        _check_schema(schema)
        writer = schema.writer_schema() if schema is not None else None
        if writer is not None:
            # Before the first send: a reader meeting its messages can always look it up.
            try:
                self._schema_registry().register(writer)
            except StoreError as exc:
                raise from_store_error(exc, f"register the schema of producer on {topic}") from exc
        return self._opened_handle(Producer(self, topic, producer_name=producer_name, schema=schema))

    @overload
    def subscribe(
        self,
        topic: str | list[str] | None,
        subscription_name: str,
        *,
        consumer_type: ConsumerType | str = ...,
        initial_position: InitialPosition | str = ...,
        pattern: str | None = ...,
        schema: None = ...,
        **options: Any,
    ) -> Consumer[bytes]: ...

    @overload
    def subscribe(
        self,
        topic: str | list[str] | None,
        subscription_name: str,
        *,
        consumer_type: ConsumerType | str = ...,
        initial_position: InitialPosition | str = ...,
        pattern: str | None = ...,
        schema: Schema[T],
        **options: Any,
    ) -> Consumer[T]: ...

    def subscribe(
        self,
        topic: str | list[str] | None,
        subscription_name: str,
        *,
        consumer_type: ConsumerType | str = ConsumerType.Exclusive,
        initial_position: InitialPosition | str = InitialPosition.Latest,
        pattern: str | None = None,
        schema: Schema[Any] | None = None,
        **options: Any,
    ) -> Consumer[Any]:
        """Subscribe to a topic, a list of topics, or (``pattern=``, a regex matching a topic's Kafka
        name or its Pulsar name, ``persistent://public/default/...``) a pattern.

        ``consumer_type``: Exclusive (default) or Failover. ``initial_position``: where a new
        subscription starts (Latest by default). ``schema``: how ``msg.value()`` decodes. Other
        options: ``consumer_name``, ``ack_timeout_millis``, ``negative_ack_redelivery_delay_ms``,
        ``dead_letter_policy``, ``subscribe_timeout`` (seconds), ``instance_id``,
        ``subscription_isolation_level`` (``READ_COMMITTED``, the default, or ``READ_UNCOMMITTED``),
        ``pattern_auto_discovery_period`` (seconds, 60 by default: how often a pattern subscription
        looks for new matching topics)."""
        _check_schema(schema)
        schema = self._reading_with(schema)
        consumer_type = _enum(ConsumerType, consumer_type, "consumer_type")
        initial_position = _enum(InitialPosition, initial_position, "initial_position")
        unknown = sorted(set(options) - _SUBSCRIBE_OPTIONS)
        if unknown:
            raise ConfigError(f"unknown subscribe option(s) {unknown}; known: {sorted(_SUBSCRIBE_OPTIONS)}")
        regex: re.Pattern[str] | None = None
        if pattern is not None:
            try:
                regex = re.compile(_args.text(pattern, "pattern"))
            except re.error as exc:
                raise ConfigError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
            names = self._matching_topics(regex)
            if not names:
                raise TopicNotFound(f"no topic matches {pattern!r}")
        elif topic:
            # A topic named twice (by either name) is subscribed once; its partitions by name each.
            given: dict[tuple[str, int | None], TopicName] = {}
            for t in topic if isinstance(topic, list | tuple) else [topic]:
                name = TopicName.parse(t)  # InvalidTopicName for anything but a topic name
                given.setdefault((name.kafka_topic, name.partition), name)
            names = list(given.values())
        else:
            raise ConfigError("subscribe needs a topic, a list of topics, or pattern=")
        consumer = Consumer(
            self,
            names,
            subscription_name,
            consumer_type=ConsumerType(consumer_type),
            initial_position=InitialPosition(initial_position),
            schema=schema,
            pattern=regex,
            **options,
        )
        return self._opened_handle(consumer)

    def _matching_topics(self, regex: re.Pattern[str]) -> list[TopicName]:
        """The data topics a pattern subscription takes: those whose Kafka name or Pulsar full name
        (persistent://t/ns/x, also in a namespace other than public/default: Kafka name t.ns.x) the
        regex matches in full; internal and pending-ack topics, and this client's system topics
        (whatever their names), never."""
        names = []
        system = self._system_topics()
        for t in self._admin.list_topics():
            if t in system:
                continue
            full = [n for n in names_of_kafka_topic(t) if regex.fullmatch(str(n))]
            if full:
                names.append(TopicName.parse(str(full[-1])))  # parsed: remembered as its name
            elif regex.fullmatch(t):
                names.append(from_kafka(t))
        return [
            n for n in names if not n.local.startswith("__") and "__transaction_pending_ack" not in n.local
        ]

    def _system_topics(self) -> tuple[str, ...]:
        """The Kafka names of this deployment's own topics, as this client is configured."""
        return (self._log_topic, self._snapshot_topic, self._schema_topic)

    def _dlq_producer(self, topic: str) -> Producer[bytes]:
        with self._lock:
            producer = self._dlq_producers.get(topic)
            if producer is None:
                producer = self._dlq_producers[topic] = Producer[bytes](self, topic)
            return producer

    @overload
    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = ...,
        *,
        schema: None = ...,
        start_message_id_inclusive: bool = ...,
    ) -> Reader[bytes]: ...

    @overload
    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = ...,
        *,
        schema: Schema[T],
        start_message_id_inclusive: bool = ...,
    ) -> Reader[T]: ...

    @overload
    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = ...,
        *,
        schema: Schema[Any] | None,
        start_message_id_inclusive: bool = ...,
    ) -> Reader[Any]: ...

    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = EARLIEST,
        *,
        schema: Schema[Any] | None = None,
        start_message_id_inclusive: bool = False,
    ) -> Reader[Any]:
        """A reader of the committed messages of ``topic`` from ``EARLIEST``, ``LATEST`` or after a
        given MessageId (as Pulsar's reader: the message itself too with
        ``start_message_id_inclusive=True``); ``schema`` as in ``subscribe``."""
        self._check_open()
        _check_schema(schema)
        schema = self._reading_with(schema)
        _args.instance(start_message_id, MessageId, "start_message_id")
        _args.instance(start_message_id_inclusive, bool, "start_message_id_inclusive")
        return self._opened_handle(
            Reader(self, topic, start_message_id, schema=schema, inclusive=start_message_id_inclusive)
        )

    def _opened_handle(self, handle: H) -> H:
        """Kept for ``close`` (consumers in a list of their own: they are closed first)."""
        with self._lock:
            closing = self._closing
            busy = None
            if isinstance(handle, Producer) and any(
                isinstance(h, Producer)
                and h.producer_name == handle.producer_name
                and _overlap(h.topic, handle.topic)
                for h in self._open_handles
            ):
                busy = f"a producer named {handle.producer_name!r} is already open on {handle.topic}"
            if not closing and busy is None:
                if isinstance(handle, Consumer):
                    self._consumers.append(handle)
                else:
                    self._open_handles.add(handle)
        if closing:  # close() began while it was made: it would not see this one
            handle.close()
            raise AlreadyClosed("client is closed")
        if busy is not None:
            # As Pulsar's broker: (producer name, sequence id) names a message, so a name is taken once.
            handle.close()
            raise ProducerBusy(busy)
        return handle

    def _handle_closed(self, handle: Producer[Any] | Reader[Any] | Consumer[Any]) -> None:
        """A closed handle is forgotten (a long-lived client kept every consumer it ever made)."""
        with self._lock:
            if isinstance(handle, Consumer):
                self._consumers = [c for c in self._consumers if c is not handle]
            else:
                self._open_handles.discard(handle)

    def get_last_message_ids(self, topic: str) -> dict[int, MessageId | None]:
        """Per partition, the id of the last committed (readable) message, None where there is none."""
        self._check_open()  # before any lookup: a closed client makes no Kafka client again
        return last_message_ids(self, topic)

    def resume_transaction(self, txn_id: TxnID | str, timeout_ms: int = 60_000) -> Transaction:
        """A handle on a transaction begun elsewhere, from its TxnID or its printed form ``"(0,3)"``:
        commit or abort it by id from another client or process. ``timeout_ms`` only bounds this
        handle's client-side state; the coordinator keeps the transaction's own timeout."""
        tid = txn_id if isinstance(txn_id, TxnID) else TxnID.parse(_args.text(txn_id, "txn_id"))
        return Transaction(self, tid, int(_args.number(timeout_ms, "timeout_ms", minimum=1)))

    # ------------------------------------------------------------------ internals used by the API
    def _new_txn(self, timeout_ms: int) -> Transaction:
        return self._opened(self._tc().new_txn(timeout_ms), timeout_ms)

    def _new_txn_async(self, timeout_ms: int) -> Future[Transaction]:
        result: Future[Transaction] = Future()
        relay(self._tc().new_txn_async(timeout_ms), result, lambda txn_id: self._opened(txn_id, timeout_ms))
        return result

    def _opened(self, txn_id: TxnID, timeout_ms: int) -> Transaction:
        """The handle of a transaction NEW_TXN just opened (0: the coordinator's default timeout)."""
        return Transaction(self, txn_id, timeout_ms or 60_000)

    def _track_handle(self, txn: Transaction) -> None:
        with self._handles_lock:
            handles = self._handles.get(txn.txn_id)
            if handles is None:
                handles = self._handles[txn.txn_id] = weakref.WeakSet()
                if len(self._handles) % 1024 == 0:  # drop the entries of handles gone (never ended)
                    self._handles = {k: v for k, v in self._handles.items() if len(v)}
                    self._handles.setdefault(txn.txn_id, handles)
            handles.add(txn)

    def _handle_ended(self, txn: Transaction, state: TransactionState) -> None:
        """``txn`` (one handle) ended its transaction in ``state``: tell this client's other handles."""
        with self._handles_lock:
            handles = self._handles.pop(txn.txn_id, None)
        for other in list(handles or ()):
            if other is not txn:
                other._ended_elsewhere(state)

    def _check_open(self) -> None:
        """``AlreadyClosed`` (a ``NotAllowedError``) once closed, as Pulsar's AlreadyClosedException."""
        if self._closed:
            raise AlreadyClosed("client is closed")

    def _tc_connected(self) -> bool:
        """Whether the coordinator client exists (``_tc`` then returns at once, no I/O)."""
        return self._tc_client is not None

    def _tc(self) -> SyncTcClient:
        existing = self._tc_client
        if existing is not None:
            return existing
        # Its own lock: connecting may take the whole operation timeout while the coordinator is
        # down, and _lock guards what plain sends, acks and readers need (they must not wait on it).
        with self._tc_lock:
            if self._tc_client is not None:
                return self._tc_client
            self._check_open()
            client = SyncTcClient(
                self.service_url,
                auth_token=self._auth,
                operation_timeout=self.operation_timeout_seconds,
                num_tcs=self._num_tcs,
                keep_alive_interval=self._keep_alive,
            )
            try:
                client.connect()
            except BaseException:
                client.close()  # its loop thread, else one leaked per failed connect
                raise
            with self._lock:
                closed = self._closed
                if not closed:
                    self._tc_client = client
            if closed:  # close() ran meanwhile: it did not see this one
                client.close()
                self._check_open()
            return client

    def _deadline_watch(self) -> DeadlineWatch:
        """Where transaction ends in flight register (their deadlines, and ``close`` waits for them)."""
        return self._ends

    def _appender(self) -> Appender:
        appender = self._appender_
        if appender is not None:  # every send asks: no lock once made (kept until close)
            return appender
        with self._lock:
            if self._appender_ is None:
                self._check_open()
                self._appender_ = Appender(
                    self.kafka, delivery_timeout_ms=int(self.operation_timeout_seconds * 1000)
                )
            return self._appender_

    def _schema_registry(self) -> SchemaRegistry:
        with self._lock:
            if self._schemas is None:
                self._check_open()
                self._schemas = SchemaRegistry(
                    self.kafka,
                    self._schema_topic,
                    self._admin,
                    self._appender,
                    self.operation_timeout_seconds,
                )
            return self._schemas

    def _reading_with(self, schema: Schema[T] | None) -> Schema[T] | None:
        """The schema a consumer or reader decodes with: ``schema`` looking unknown writer schemas
        up in this client's registry."""
        return None if schema is None else schema.with_registry(self._schema_registry().lookup)

    def _snapshots(self) -> SnapshotStore:
        with self._lock:
            if self._snapshot_store is None:
                self._check_open()
                self._snapshot_store = SnapshotStore(self.kafka, topic=self._snapshot_topic)
            return self._snapshot_store

    def _buffer_options(self) -> BufferOptions:
        return BufferOptions(num_tcs=self._tc_count(), marker_secret=self._secret, log_topic=self._log_topic)

    def _tc_count(self) -> int:
        """``num_tcs`` as given, else the transaction log's partition count (learnt once), so this
        client's reads fold exactly as the TB service's do."""
        if self._num_tcs is None:
            self._num_tcs = discover_num_tcs(self.kafka, self._log_topic, admin=self._admin)
        return self._num_tcs or UNKNOWN_NUM_TCS

    def _buffer_state(self, topic: str, partition: int) -> TxnBufferState:
        """A partition's TB state now: its latest snapshot, then a scan to the partition's end."""
        state, _ = load_state(
            self.kafka, topic, partition, store=self._snapshots(), options=self._buffer_options()
        )
        return state

    def _sentinel_offset(
        self, topic: str, partition: int, position: MessageId, *, uncommitted: bool = False
    ) -> int:
        """Where ``EARLIEST`` / ``LATEST`` put a reader or a cursor on a partition: its start, or its
        maxReadPosition now (from a state scanned to the partition's end, as a consumer's Latest:
        later messages, and those of transactions open now, are read). ``uncommitted`` (a
        READ_UNCOMMITTED subscription, which reads past maxReadPosition): LATEST is the end now."""
        if position == EARLIEST:
            return 0
        if uncommitted:
            return end_offsets(self.kafka, [(topic, partition)])[(topic, partition)]
        return self._buffer_state(topic, partition).max_read_position

    def _partition_count(self, topic: TopicName, *, refresh: bool = False) -> int:
        """The topic's partition count, cached; ``refresh``: ask the broker again."""
        name = topic.kafka_topic
        count = self._counts.get(name)
        if refresh or count is None or (topic.partition is not None and topic.partition >= count):
            # Unknown, or a partition beyond the count known here: the topic may have grown since.
            try:
                count = self._admin.partition_count(name)
            except TopicNotFoundError:
                raise TopicNotFound(f"topic {topic.base} (Kafka topic {name}) does not exist") from None
            self._counts[name] = count
        if topic.partition is not None and topic.partition >= count:
            raise TopicNotFound(f"{topic} does not exist: {name} has {count} partitions")
        return count

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        """Create a (partitioned) topic; a no-op if it exists. (Pulsar does this with its admin API;
        here it is a Kafka topic with that many partitions.)"""
        self._check_open()
        name = TopicName.parse(topic)
        if name.partition is not None:
            # As Pulsar's admin refuses it (412): it would create the partitioned topic's base.
            raise InvalidTopicName(f"{topic!r}: a topic to create is named without '-partition-N'")
        _args.integer(partitions, "partitions", minimum=1, maximum=_MAX_PARTITIONS)
        self._counts[name.kafka_topic] = self._admin.ensure_topic(name.kafka_topic, partitions)

    def delete_topic(self, topic: str, *, force: bool = False) -> TopicDeleted:
        """Delete a topic with its subscriptions, as ``pulsar-admin topics delete`` does: the
        subscriptions' consumer groups (cursors) and pending-ack logs, and the topic's
        transaction-buffer snapshots. A subscription with connected consumers makes it fail with
        ``NotAllowedError`` unless ``force``; a group that also reads other topics is kept. Raises
        ``TopicNotFound`` if there is no such topic; ``NotAllowedError`` for a system topic (the
        transaction log, snapshots, owners, pending-ack logs, any ``__`` topic), as Pulsar refuses to
        delete system topics. Transactions that produced to it still end: the
        coordinator gives up their markers there once the topic has been missing for a grace period."""
        self._check_open()
        _args.instance(force, bool, "force")
        result = delete_topic(
            self.kafka,
            self._admin,
            self._snapshots(),
            topic,
            force=force,
            system_topics=self._system_topics(),
        )
        self._counts.pop(TopicName.parse(topic).kafka_topic, None)
        self._deleted(f"topic {topic} was deleted")
        return result

    def _deleted(self, why: str) -> None:
        """Topics this client may have written to were deleted: later writes go through a new Kafka
        producer, since a topic created again under the name would find the current producer's
        sequence numbers out of order (a fatal error, docs/broker-quirks.md)."""
        with self._lock:
            appender = self._appender_
        if appender is not None:
            appender.renew(why)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close consumers, producers and connections; then stop what ``embedded`` started (always)."""
        try:
            # As Pulsar's client.close(): producers (flushed) and readers too; using one afterwards
            # raises AlreadyClosed (Pulsar: AlreadyClosedException). Taken, with new ones refused,
            # before anything waits: one made meanwhile was left open in a set nobody swept again.
            with self._lock:
                self._closing = True
                handles, self._open_handles = list(self._open_handles), weakref.WeakSet()
                consumers, self._consumers = self._consumers, []
            for consumer in consumers:
                consumer.close()
            for handle in handles:
                try:
                    handle.close()
                except PulsarTxnError as exc:  # keep closing the rest
                    log.warning("closing %r failed: %s", handle, exc)
            # Let asynchronous commits and aborts finish first (each ends or times out on its own).
            self._ends.wait_idle(2 * self.operation_timeout_seconds + 5)
            self._ends.close()
            with self._lock:
                self._closed = True
            # Each taken under the lock: two close() calls at once must not close one twice (or
            # find it gone between the check and the call).
            with self._lock:
                appender, self._appender_ = self._appender_, None
                tc, self._tc_client = self._tc_client, None
                store, self._snapshot_store = self._snapshot_store, None
            if appender is not None:
                appender.close()
            if tc is not None:
                tc.close()
            if store is not None:
                store.close()
            self._admin.close()
        finally:
            owned, self._owned = self._owned, []
            for thing in owned:
                try:
                    thing.stop()
                except Exception:  # keep stopping the rest (the broker, then its watcher)
                    log.exception("stopping %r failed", thing)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _marker_key(secret: object) -> bytes | None:
    """The marker-authentication key: str (UTF-8) or bytes, not empty. An empty one made every
    genuine marker fail authentication (a coordinator treats an empty secret as none, so it signs
    nothing): readers then held at the first transaction for good."""
    if secret is None:
        return None
    if not isinstance(secret, str | bytes):
        raise ConfigError(f"marker_secret is a str or bytes, not {type(secret).__name__}")
    if not secret:
        raise ConfigError("marker_secret must not be empty (None: markers are not authenticated)")
    return secret.encode() if isinstance(secret, str) else bytes(secret)


_MAX_PARTITIONS = 100_000  # Kafka's own bound on a topic's partitions
# What subscribe(**options) passes on to the Consumer (the rest of its parameters are subscribe's own).
_SUBSCRIBE_OPTIONS = frozenset(inspect.signature(Consumer.__init__).parameters) - {
    "self",
    "client",
    "topics",
    "subscription_name",
    "consumer_type",
    "initial_position",
    "schema",
    "pattern",
}
EnumT = TypeVar("EnumT", bound=Enum)


def _enum(kind: type[EnumT], value: object, what: str) -> EnumT:
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(str(m.value) for m in kind)
        raise ConfigError(f"{what} {value!r} is not one of {known}") from None


def _overlap(a: TopicName, b: TopicName) -> bool:
    """Whether producers on ``a`` and ``b`` write to a partition in common: ``t`` overlaps each of its
    ``t-partition-N`` (Pulsar's producer on ``t`` is one per partition topic, under its name)."""
    return a.base == b.base and (a.partition is None or b.partition is None or a.partition == b.partition)


def _check_schema(schema: object) -> None:
    if schema is not None and not isinstance(schema, Schema):
        raise ConfigError(f"schema is a pulsar_txn Schema (e.g. StringSchema()), not {type(schema).__name__}")


class _TempDir:
    """A data directory this process made for an embedded broker: removed when the client closes
    (each demo or test run would otherwise leave ~25 MB behind in the temp dir)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def stop(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
