"""``MessageId`` and ``Message`` as the Pulsar Python client shapes them (methods, not attributes)."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from pulsar_txn import message as _message
from pulsar_txn.errors import ConfigError
from pulsar_txn.txnid import TxnID

T = TypeVar("T")


class MessageId:
    """A message's position: Kafka's (partition, offset) as Pulsar's (partition, ledger, entry).

    ``entry_id()`` is the Kafka offset and ``ledger_id()`` is always 0, so ids of one partition order
    as in Pulsar. ``MessageId.earliest`` / ``MessageId.latest`` start readers and seeks."""

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]
    __slots__ = ("_id",)

    def __init__(self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1):
        """pulsar-client's constructor. An id made this way has no topic, as there; made with the
        defaults it is ``MessageId.earliest``."""
        if entry_id < 0 and ledger_id < 0:
            self._id = _message.EARLIEST
        else:
            # pulsar-client's ids of a non-partitioned topic say partition -1; on Kafka it is 0.
            self._id = _message.MessageId("", max(partition, 0), entry_id)

    @classmethod
    def wrap(cls, mid: _message.MessageId) -> MessageId:
        """The compat id of one of this library's ``pulsar_txn.MessageId``."""
        out = cls.__new__(cls)
        out._id = mid
        return out

    @property
    def native(self) -> _message.MessageId:
        """The same id as ``pulsar_txn.MessageId`` (for this library's own API)."""
        return self._id

    def partition(self) -> int:
        """The partition index."""
        return self._id.partition

    def ledger_id(self) -> int:
        """0 (Kafka has no ledgers); -1 for ``earliest``, the largest long for ``latest``."""
        return self._key()[1] if self._key()[0] != 0 else 0

    def entry_id(self) -> int:
        """The Kafka offset; -1 for ``earliest``, the largest long for ``latest``."""
        return self._key()[2] if self._key()[0] != 0 else self._id.offset

    def batch_index(self) -> int:
        """Always -1 (no batch indexes)."""
        return -1

    def serialize(self) -> bytes:
        """Bytes that ``MessageId.deserialize`` turns back into this id (topic included)."""
        return str(self._id).encode()

    @staticmethod
    def deserialize(message_id_bytes: bytes | str, topic: str | None = None) -> MessageId:
        """The id ``serialize`` gave, as bytes or (as pulsar-client takes too) text."""
        try:
            if isinstance(message_id_bytes, str):
                text = message_id_bytes
            elif isinstance(message_id_bytes, bytes | bytearray | memoryview):
                text = bytes(message_id_bytes).decode()
            else:  # bytes(int) would allocate that many zero bytes
                raise TypeError(type(message_id_bytes).__name__)
            mid = _message.MessageId.parse(text)
        except (ValueError, TypeError, UnicodeDecodeError):
            raise ConfigError(f"not a serialized MessageId: {message_id_bytes!r}") from None
        if topic is not None and not mid.topic and mid not in (_message.EARLIEST, _message.LATEST):
            mid = _message.MessageId(topic, mid.partition, mid.offset)
        return MessageId.wrap(mid)

    def _key(self) -> tuple[int, int, int]:
        # earliest sorts first and latest last, as in Pulsar; ids compare by (partition, offset).
        if self._id == _message.EARLIEST:
            return (-1, -1, -1)
        if self._id == _message.LATEST:
            return (1, (1 << 63) - 1, (1 << 63) - 1)
        return (0, self._id.partition, self._id.offset)

    def _same_topic(self, other: MessageId) -> bool:
        # An id made by the constructor has no topic: it matches the id of any topic, as in Pulsar.
        return not self._id.topic or not other._id.topic or self._id.topic == other._id.topic

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageId) and self._key() == other._key() and self._same_topic(other)

    def _other_key(self, other: object) -> tuple[int, int, int] | None:
        """``other``'s sort key, for this layer's ids and the library's own (None: not an id)."""
        if isinstance(other, _message.MessageId):
            other = MessageId.wrap(other)
        return other._key() if isinstance(other, MessageId) else None

    def __lt__(self, other: object) -> bool:
        key = self._other_key(other)
        return NotImplemented if key is None else self._key() < key

    def __le__(self, other: object) -> bool:
        key = self._other_key(other)
        return NotImplemented if key is None else self._key() <= key

    def __gt__(self, other: object) -> bool:
        key = self._other_key(other)
        return NotImplemented if key is None else self._key() > key

    def __ge__(self, other: object) -> bool:
        key = self._other_key(other)
        return NotImplemented if key is None else self._key() >= key

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        # pulsar-client prints (ledger, entry, partition, batch index)
        return f"({self.ledger_id()},{self.entry_id()},{self._id.partition},-1)"

    def __repr__(self) -> str:
        return f"MessageId({self._id.topic!r}, partition={self._id.partition}, entry_id={self._id.offset})"


MessageId.earliest = MessageId.wrap(_message.EARLIEST)
MessageId.latest = MessageId.wrap(_message.LATEST)


def native_id(mid: Any) -> _message.MessageId:
    """This library's id for a compat id, a native id, or a compat message."""
    if isinstance(mid, MessageId):
        return mid.native
    if isinstance(mid, Message):
        return mid.native.message_id
    if isinstance(mid, _message.MessageId):
        return mid
    if isinstance(mid, _message.Message):
        return mid.message_id
    raise ConfigError(f"expected a Message or MessageId, got {type(mid).__name__}")


class Message(Generic[T]):
    """A received message with pulsar-client's accessors (``msg.data()``, ``msg.properties()``, ...)."""

    __slots__ = ("_msg", "_topic")

    def __init__(self, msg: _message.Message[T], topic_name: str | None = None) -> None:
        self._msg = msg
        self._topic = topic_name if topic_name is not None else msg.topic_name

    @property
    def native(self) -> _message.Message[T]:
        """The same message as ``pulsar_txn.Message`` (for this library's own API)."""
        return self._msg

    def data(self) -> bytes:
        """The raw payload."""
        return bytes(self._msg.data)

    def value(self) -> T:
        """The payload decoded with the consumer's or reader's schema."""
        return self._msg.value()

    def properties(self) -> dict[str, str]:
        """The message's properties."""
        return dict(self._msg.properties)

    def partition_key(self) -> str:
        """The partition key ("" if none)."""
        return self._msg.partition_key or ""

    def ordering_key(self) -> str:
        """Always "" (no ordering keys here)."""
        return ""

    def publish_timestamp(self) -> int:
        """When the broker stored it, in ms since the epoch."""
        return self._msg.publish_timestamp

    def event_timestamp(self) -> int:
        """The producer's event time in ms (0 if none)."""
        return self._msg.event_timestamp or 0

    def message_id(self) -> MessageId:
        """Where the message is."""
        return MessageId.wrap(self._msg.message_id)

    def topic_name(self) -> str:
        """The topic's name; with ``-partition-N`` for a partitioned topic, as in Pulsar."""
        return self._topic

    def redelivery_count(self) -> int:
        """How many times it was redelivered to this subscription."""
        return self._msg.redelivery_count

    def schema_version(self) -> str:
        """The schema header it was written with ("" for plain bytes)."""
        header = self._msg.schema_header
        return header.decode("ascii", "replace") if header else ""

    def producer_name(self) -> str:
        """The name of the producer that sent it."""
        return self._msg.producer_name or ""

    def has_null_value(self) -> bool:
        """True for a record written with no value (a Kafka tombstone); ``value()`` is then None."""
        return self._msg.has_null_value

    def encryption_context(self) -> None:
        """Always None (no encryption here)."""
        return None

    def txn_id(self) -> TxnID | None:
        """The transaction that published it (an addition: pulsar-client has no transactions)."""
        return self._msg.txn_id

    def __repr__(self) -> str:
        return f"Message({self._msg.message_id}, {len(self._msg.data)} bytes)"
