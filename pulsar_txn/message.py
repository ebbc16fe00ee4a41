"""Message and MessageId as applications see them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar, cast

from kafka_store import StoredRecord
from pulsar_txn._meta_header import META_HEADER, decode_meta, fits
from pulsar_txn.buffer.marker import TXN_HEADER
from pulsar_txn.errors import ConfigError
from pulsar_txn.naming import partition_name
from pulsar_txn.schema import SCHEMA_HEADER, BytesSchema, Schema
from pulsar_txn.txnid import TxnID

T = TypeVar("T")

# Producer name, sequence id and event time travel in one header, ``pulsar.meta`` (_meta_header.py).
# Earlier versions wrote these three separate headers; readers still accept them.
PRODUCER_HEADER = "pulsar.producer"
SEQUENCE_HEADER = "pulsar.seq"
EVENT_TIME_HEADER = "pulsar.event_time"
REDELIVERY_HEADER = "pulsar.redelivery"
PROPERTY_PREFIX = "pulsar.prop."


@functools.total_ordering  # from __lt__ and the dataclass's __eq__ (equal ids have equal keys)
@dataclass(frozen=True, slots=True)
class MessageId:
    """Where a message is: (Kafka topic, partition, offset). Orders like Pulsar's MessageId within a
    partition; ``earliest``/``latest`` are the sentinels readers start from, and sort before and
    after every other id, as in Pulsar."""

    topic: str
    partition: int
    offset: int

    def __post_init__(self) -> None:
        # Only ids an application builds come here (received ones are made by new_message_id): an
        # id naming no message, or of the wrong types, would ack or seek something never named.
        topic, partition, offset = self.topic, self.partition, self.offset
        if not isinstance(topic, str):
            raise ConfigError(f"a MessageId's topic is a str ('' for none), not {topic!r:.100}")
        for name, value in (("partition", partition), ("offset", offset)):
            if type(value) is not int:
                raise ConfigError(f"a MessageId's {name} is an int, not {value!r:.100}")
        sentinel = topic == "" and partition == -1 and offset in (-1, -2)  # EARLIEST / LATEST
        if (partition < 0 or offset < 0) and not sentinel:
            raise ConfigError(
                f"MessageId({topic!r}, {partition}, {offset}) names no message: partition and "
                "offset are >= 0 (or use EARLIEST / LATEST)"
            )

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"

    def _key(self) -> tuple[int, str, int, int]:
        sentinel = self.partition == -1 and not self.topic  # EARLIEST (offset -2) or LATEST (-1)
        rank = (2 if self.offset == -1 else 0) if sentinel else 1
        return (rank, self.topic, self.partition, self.offset)

    def __lt__(self, other: MessageId) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() < other._key()

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """The inverse of ``str(message_id)``: ``<kafka topic>:<partition>:<offset>``; ``ConfigError``
        for anything else."""
        if not isinstance(text, str):
            raise ConfigError(f"a MessageId's printed form is a str, not {type(text).__name__} {text!r}")
        try:
            topic, partition, offset = text.rsplit(":", 2)
            mid = cls(topic, int(partition), int(offset))
        except ConfigError:
            raise
        except ValueError:
            raise ConfigError(f"not a MessageId: {text!r:.200} (expected 'topic:partition:offset')") from None
        return mid


EARLIEST = MessageId("", -1, -2)
"""Start a reader at the first message of each partition (Pulsar's ``MessageId.earliest``)."""
LATEST = MessageId("", -1, -1)
"""Start a reader after the last committed message (Pulsar's ``MessageId.latest``)."""


def moved_by_seek(target: MessageId | int, message_id: MessageId) -> bool:
    """Whether a seek to ``target`` moves the partition ``message_id`` lies in: a publish time,
    ``EARLIEST`` and ``LATEST`` move every partition, an id only its own (one without a topic: that
    partition of the one topic a seek accepts it for)."""
    if not isinstance(target, MessageId) or target in (EARLIEST, LATEST):
        return True
    return target.partition == message_id.partition and target.topic in ("", message_id.topic)


_BYTES = BytesSchema()


class Payload(bytes):
    """The raw bytes of a message; also callable, so both this library's ``msg.data`` and the
    Pulsar Python client's ``msg.data()`` give the bytes."""

    __slots__ = ()

    def __call__(self) -> bytes:
        return bytes(self)


NULL_PAYLOAD = Payload()
"""The ``data`` of every message written with no value (told apart from ``b""`` by identity)."""


@dataclass(frozen=True, slots=True)
class Message(Generic[T]):
    """A received message: payload plus Pulsar's metadata.

    ``data`` (or ``data()``) is the raw payload; ``value()`` decodes it with the schema of the
    consumer or reader that received it (bytes by default)."""

    message_id: MessageId
    data: Payload
    partition_key: str | None
    properties: dict[str, str]
    event_timestamp: int | None
    publish_timestamp: int
    producer_name: str | None
    sequence_id: int | None
    txn_id: TxnID | None
    redelivery_count: int = 0
    topic_name: str = field(default="")
    schema_header: bytes | None = field(default=None, repr=False)
    """The ``pulsar.schema`` header the message was written with (None: plain bytes)."""
    schema: Schema[T] = field(default=cast("Schema[T]", _BYTES), repr=False, compare=False)
    """The schema ``value()`` decodes with."""

    def __hash__(self) -> int:
        # Equal messages have the same id; the properties dict would make the generated hash fail.
        return hash(self.message_id)

    @property
    def has_null_value(self) -> bool:
        """True for a record written with no value (a Kafka tombstone, Pulsar's null value): ``data``
        is then empty and ``value()`` is None."""
        return self.data is NULL_PAYLOAD

    def value(self) -> T:
        """The payload decoded with the schema; ``IncompatibleSchema`` if it was written with a
        schema this one cannot read, ``SchemaSerializationError`` if it does not decode. None for a
        null value (``has_null_value``), as Pulsar's ``getValue()`` gives, whatever the schema."""
        if self.data is NULL_PAYLOAD:
            return cast("T", None)
        return self.schema.decode_message(self.data, self.schema_header)

    @classmethod
    def from_record(
        cls, rec: StoredRecord, redelivery_count: int = 0, schema: Schema[Any] | None = None
    ) -> Message[Any]:
        # Called once per received message: header checks in order of frequency, cached TxnIDs, and
        # fields set through the slot descriptors (a frozen dataclass's __init__ costs twice as much).
        props: dict[str, str] = {}
        producer = seq = event_time = txn = schema_header = None
        for name, raw in rec.headers:
            if name == META_HEADER:
                meta = decode_meta(raw)
                if meta is not None:
                    producer, seq, event_time = meta
            elif name == TXN_HEADER and len(raw) == 16:
                txn = _TXN_IDS.get(raw) or _txn_id(raw)
            elif name.startswith(PROPERTY_PREFIX):
                props[name[_PREFIX_LEN:]] = raw.decode("utf-8", "replace")
            elif name == SCHEMA_HEADER:
                schema_header = raw
            elif name == PRODUCER_HEADER:  # the separate headers of earlier versions
                producer = raw.decode("utf-8", "replace")
            elif name == SEQUENCE_HEADER:
                seq = _legacy_int(raw)
            elif name == EVENT_TIME_HEADER:
                event_time = _legacy_int(raw)
        topic, partition = rec.topic, rec.partition
        mid = new_message_id(topic, partition, rec.offset)
        msg: Message[Any] = _new(Message)
        s = _FIELDS
        s[0](msg, mid)
        value = rec.value
        s[1](msg, NULL_PAYLOAD if value is None else Payload(value))
        s[2](msg, rec.key.decode("utf-8", "replace") if rec.key is not None else None)
        s[3](msg, props)
        s[4](msg, event_time)
        s[5](msg, rec.timestamp_ms)
        s[6](msg, producer)
        s[7](msg, seq)
        s[8](msg, txn)
        s[9](msg, redelivery_count)
        s[10](msg, partition_name(topic, partition))
        s[11](msg, schema_header)
        s[12](msg, schema or _BYTES)
        return msg


_new = object.__new__
_PREFIX_LEN = len(PROPERTY_PREFIX)
_ID_TOPIC = MessageId.__dict__["topic"].__set__
_ID_PARTITION = MessageId.__dict__["partition"].__set__
_ID_OFFSET = MessageId.__dict__["offset"].__set__
# Slot setters of Message in field order; from_record relies on this order (checked at import).
_FIELDS = tuple(Message.__dict__[f.name].__set__ for f in fields(Message))
_FIELD_ORDER = (
    "message_id",
    "data",
    "partition_key",
    "properties",
    "event_timestamp",
    "publish_timestamp",
    "producer_name",
    "sequence_id",
    "txn_id",
    "redelivery_count",
    "topic_name",
    "schema_header",
    "schema",
)
if tuple(f.name for f in fields(Message)) != _FIELD_ORDER:  # pragma: no cover - a refactoring slip
    raise ImportError("Message's fields changed: update from_record")
_TXN_IDS: dict[bytes, TxnID] = {}


def new_message_id(topic: str, partition: int, offset: int) -> MessageId:
    """``MessageId(topic, partition, offset)`` for hot paths (one per message sent or received): set
    through the slot descriptors, where the frozen dataclass's __init__ calls object.__setattr__ per
    field."""
    mid: MessageId = _new(MessageId)
    _ID_TOPIC(mid, topic)
    _ID_PARTITION(mid, partition)
    _ID_OFFSET(mid, offset)
    return mid


def _legacy_int(raw: bytes) -> int | None:
    """A decimal header of earlier versions; None if damaged, or too large for the ``pulsar.meta``
    header (a dead-letter or pipeline re-send of the message would fail on it every time)."""
    try:
        value = int(raw)
    except ValueError:  # a foreign or damaged header: the message is delivered without it
        return None
    return value if fits(value) else None


def producer_name_of(rec: StoredRecord) -> str | None:
    """The producer name a record was written with (either header form), if any."""
    return Message.from_record(rec).producer_name


def _txn_id(raw: bytes) -> TxnID:
    if len(_TXN_IDS) >= 4096:  # bounded: a long-running consumer sees unboundedly many
        _TXN_IDS.clear()
    txn = _TXN_IDS[raw] = TxnID.from_bytes(raw)
    return txn
