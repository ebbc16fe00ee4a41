"""Message and MessageId as applications see them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from kafka_store import StoredRecord
from pulsar_txn.buffer.marker import TXN_HEADER
from pulsar_txn.naming import partition_name
from pulsar_txn.schema import SCHEMA_HEADER, BytesSchema, Schema
from pulsar_txn.txnid import TxnID

T = TypeVar("T")

PRODUCER_HEADER = "pulsar.producer"
SEQUENCE_HEADER = "pulsar.seq"
EVENT_TIME_HEADER = "pulsar.event_time"
REDELIVERY_HEADER = "pulsar.redelivery"
PROPERTY_PREFIX = "pulsar.prop."


@dataclass(frozen=True, slots=True, order=True)
class MessageId:
    """Where a message is: (Kafka topic, partition, offset). Orders like Pulsar's MessageId within a
    partition; ``earliest``/``latest`` are the sentinels readers start from."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        topic, partition, offset = text.rsplit(":", 2)
        return cls(topic, int(partition), int(offset))


EARLIEST = MessageId("", -1, -2)
"""Start a reader at the first message of each partition (Pulsar's ``MessageId.earliest``)."""
LATEST = MessageId("", -1, -1)
"""Start a reader after the last committed message (Pulsar's ``MessageId.latest``)."""

_BYTES = BytesSchema()


class Payload(bytes):
    """The raw bytes of a message; also callable, so both this library's ``msg.data`` and the
    Pulsar Python client's ``msg.data()`` give the bytes."""

    __slots__ = ()

    def __call__(self) -> bytes:
        return bytes(self)


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

    def value(self) -> T:
        """The payload decoded with the schema; ``IncompatibleSchema`` if it was written with a
        schema this one cannot read, ``SchemaSerializationError`` if it does not decode."""
        return self.schema.decode_message(self.data, self.schema_header)

    @classmethod
    def from_record(
        cls, rec: StoredRecord, redelivery_count: int = 0, schema: Schema[Any] | None = None
    ) -> Message[Any]:
        props: dict[str, str] = {}
        producer = seq = event_time = txn = schema_header = None
        for name, raw in rec.headers:
            if name == SCHEMA_HEADER:
                schema_header = raw
            elif name.startswith(PROPERTY_PREFIX):
                props[name[len(PROPERTY_PREFIX) :]] = raw.decode("utf-8", "replace")
            elif name == TXN_HEADER and len(raw) == 16:
                txn = TxnID.from_bytes(raw)
            elif name == PRODUCER_HEADER:
                producer = raw.decode("utf-8", "replace")
            elif name == SEQUENCE_HEADER:
                seq = int(raw)
            elif name == EVENT_TIME_HEADER:
                event_time = int(raw)
        chosen: Schema[Any] = schema or _BYTES
        return Message(
            MessageId(rec.topic, rec.partition, rec.offset),
            Payload(rec.value or b""),
            rec.key.decode("utf-8", "replace") if rec.key is not None else None,
            props,
            event_time,
            rec.timestamp_ms,
            producer,
            seq,
            txn,
            redelivery_count,
            partition_name(rec.topic, rec.partition),
            schema_header,
            chosen,
        )
