"""Message and MessageId as applications see them."""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka_store import StoredRecord
from pulsar_txn.buffer.marker import TXN_HEADER
from pulsar_txn.naming import TopicName
from pulsar_txn.txnid import TxnID

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
LATEST = MessageId("", -1, -1)


@dataclass(frozen=True, slots=True)
class Message:
    """A received message: payload plus Pulsar's metadata."""

    message_id: MessageId
    data: bytes
    partition_key: str | None
    properties: dict[str, str]
    event_timestamp: int | None
    publish_timestamp: int
    producer_name: str | None
    sequence_id: int | None
    txn_id: TxnID | None
    redelivery_count: int = 0
    topic_name: str = field(default="")

    def value(self) -> bytes:
        return self.data

    @classmethod
    def from_record(cls, rec: StoredRecord, redelivery_count: int = 0) -> Message:
        props: dict[str, str] = {}
        producer = seq = event_time = txn = None
        for name, raw in rec.headers:
            if name.startswith(PROPERTY_PREFIX):
                props[name[len(PROPERTY_PREFIX) :]] = raw.decode("utf-8", "replace")
            elif name == TXN_HEADER and len(raw) == 16:
                txn = TxnID.from_bytes(raw)
            elif name == PRODUCER_HEADER:
                producer = raw.decode("utf-8", "replace")
            elif name == SEQUENCE_HEADER:
                seq = int(raw)
            elif name == EVENT_TIME_HEADER:
                event_time = int(raw)
        return cls(
            MessageId(rec.topic, rec.partition, rec.offset),
            rec.value or b"",
            rec.key.decode("utf-8", "replace") if rec.key is not None else None,
            props,
            event_time,
            rec.timestamp_ms,
            producer,
            seq,
            txn,
            redelivery_count,
            str(TopicName.parse(rec.topic).with_partition(rec.partition)),
        )
