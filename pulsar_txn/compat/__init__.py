"""A drop-in for the Pulsar Python client's ``pulsar`` module (pulsar-client 3.x), on Kafka.

Code written for pulsar-client runs here after one change::

    import pulsar_txn.compat as pulsar       # was: import pulsar

    client = pulsar.Client("pulsar://localhost:6650", bootstrap_servers="localhost:9092")
    producer = client.create_producer("my-topic", batching_enabled=True)
    producer.send(b"hello", properties={"k": "v"})
    consumer = client.subscribe("my-topic", "my-sub", consumer_type=pulsar.ConsumerType.Failover,
                                initial_position=pulsar.InitialPosition.Earliest)
    msg = consumer.receive(timeout_millis=1000)
    print(msg.data(), msg.properties(), msg.message_id())
    consumer.acknowledge(msg)

Every keyword argument of pulsar-client's calls is accepted: those with a meaning here are mapped,
tuning knobs of Pulsar's own client are ignored, and options this library cannot honour raise
``OperationNotSupported`` unless left at their default (tables in ``pulsar_txn.compat._params``).
``python -m pulsar_txn.compat.check FILE...`` (``pulsar-txn migrate-check``) reports, before
running anything, which calls of a program will work, which options have no effect, and which fail.

Additions that pulsar-client lacks: transactions (``client.new_transaction()``, ``txn=`` on sends
and acks), ``Client.embedded()``, and ``.native`` on every object for this library's own API.
See ``docs/migration-from-pulsar-python.md``.
"""

from __future__ import annotations

from enum import Enum

from pulsar_txn import errors as _errors
from pulsar_txn.client import AuthenticationToken
from pulsar_txn.compat import _params, schema
from pulsar_txn.compat._api import (
    BatchReceivePolicy,
    Client,
    Consumer,
    ConsumerDeadLetterPolicy,
    Producer,
    Reader,
    ServiceInfo,
)
from pulsar_txn.compat._ids import Message, MessageId
from pulsar_txn.compat._params import OperationNotSupported
from pulsar_txn.compat._table_view import TableView
from pulsar_txn.consumer import ConsumerType, InitialPosition
from pulsar_txn.errors import (
    AuthenticationError,
    AuthorizationError,
    ConnectError,
    ConsumerBusy,
    IncompatibleSchema,
    InvalidTopicName,
    InvalidTxnStatusError,
    MessageTooBig,
    NotAllowedError,
    ProducerBusy,
    ProducerFenced,
    Result,
    SubscriptionNotFound,
    Timeout,
    TopicNotFound,
    TransactionConflict,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
    UnknownError,
    UnsupportedVersionError,
)
from pulsar_txn.transaction import Transaction

PulsarException = _errors.PulsarTxnError
"""The root of every error raised here (pulsar-client's ``PulsarException``)."""
ConsumerBatchReceivePolicy = BatchReceivePolicy
ServiceUnitNotReady = _errors.ServiceNotReady
BrokerPersistenceError = _errors.PersistenceError
InvalidConfiguration = _errors.ConfigError
AlreadyClosed = _errors.AlreadyClosed


def _never_raised(name: str) -> type[_errors.PulsarTxnError]:
    """pulsar-client's exceptions for failures that cannot happen here: defined so that ``except``
    clauses of migrated code still work."""
    attrs = {"__doc__": f"pulsar-client's {name}; never raised here.", "result": Result[name]}
    return type(name, (_errors.PulsarTxnError,), attrs)


ChecksumError = _never_raised("ChecksumError")
ConsumerAssignError = _never_raised("ConsumerAssignError")
ConsumerNotFound = _never_raised("ConsumerNotFound")
ConsumerNotInitialized = _never_raised("ConsumerNotInitialized")
CryptoError = _never_raised("CryptoError")
CumulativeAcknowledgementNotAllowedError = _never_raised("CumulativeAcknowledgementNotAllowedError")
ErrorGettingAuthenticationData = _never_raised("ErrorGettingAuthenticationData")
Interrupted = _never_raised("Interrupted")
InvalidMessage = _never_raised("InvalidMessage")
InvalidUrl = _never_raised("InvalidUrl")
LookupError = _never_raised("LookupError")
MemoryBufferIsFull = _never_raised("MemoryBufferIsFull")
NotConnected = _never_raised("NotConnected")
ProducerBlockedQuotaExceededError = _never_raised("ProducerBlockedQuotaExceededError")
ProducerBlockedQuotaExceededException = _never_raised("ProducerBlockedQuotaExceededException")
ProducerNotInitialized = _never_raised("ProducerNotInitialized")
ProducerQueueIsFull = _never_raised("ProducerQueueIsFull")
ReadError = _never_raised("ReadError")
TooManyLookupRequestException = _never_raised("TooManyLookupRequestException")
TopicTerminated = _never_raised("TopicTerminated")
BrokerMetadataError = _never_raised("BrokerMetadataError")


class CompressionType(Enum):
    """Accepted and ignored (Kafka compression is a producer setting in ``kafka={...}``)."""

    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4


class PartitionsRoutingMode(Enum):
    """Accepted and ignored: the partition is the key's CRC32 hash (librdkafka's default), else round
    robin."""

    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class BatchingType(Enum):
    """Accepted and ignored (librdkafka batches by itself)."""

    Default = 0
    KeyBased = 1


class ProducerAccessMode(Enum):
    """Only ``Shared`` is supported."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class RegexSubscriptionMode(Enum):
    """Accepted and ignored (Kafka topics are all persistent)."""

    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2


class ConsumerCryptoFailureAction(Enum):
    """Accepted and ignored (no encryption here)."""

    FAIL = 0
    DISCARD = 1
    CONSUME = 2


class LoggerLevel(Enum):
    """Accepted and ignored: this library logs through Python's ``logging`` (logger ``pulsar_txn``)."""

    Debug = 0
    Info = 1
    Warn = 2
    Error = 3


class ConsoleLogger:
    """pulsar-client's console logger for ``Client(logger=...)``: accepted and ignored, as that
    option is (this library logs through Python's ``logging``)."""

    def __init__(self, log_level: LoggerLevel = LoggerLevel.Info) -> None:
        self.log_level = log_level


class FileLogger:
    """pulsar-client's file logger for ``Client(logger=...)``: accepted and ignored (see
    ``ConsoleLogger``); configure a ``logging`` handler for ``pulsar_txn`` instead."""

    def __init__(self, log_level: LoggerLevel, log_file: str) -> None:
        self.log_level = log_level
        self.log_file = log_file


AuthenticationTLS = _params.unsupported_class(
    "AuthenticationTLS", _params.UNSUPPORTED_CLASSES["AuthenticationTLS"]
)
AuthenticationAthenz = _params.unsupported_class(
    "AuthenticationAthenz", _params.UNSUPPORTED_CLASSES["AuthenticationAthenz"]
)
AuthenticationOauth2 = _params.unsupported_class(
    "AuthenticationOauth2", _params.UNSUPPORTED_CLASSES["AuthenticationOauth2"]
)
AuthenticationBasic = _params.unsupported_class(
    "AuthenticationBasic", _params.UNSUPPORTED_CLASSES["AuthenticationBasic"]
)


__all__ = [
    "AlreadyClosed",
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationError",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AuthorizationError",
    "BatchReceivePolicy",
    "BatchingType",
    "BrokerMetadataError",
    "BrokerPersistenceError",
    "ChecksumError",
    "Client",
    "CompressionType",
    "ConnectError",
    "ConsoleLogger",
    "Consumer",
    "ConsumerAssignError",
    "ConsumerBatchReceivePolicy",
    "ConsumerBusy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerNotFound",
    "ConsumerNotInitialized",
    "ConsumerType",
    "CryptoError",
    "CumulativeAcknowledgementNotAllowedError",
    "ErrorGettingAuthenticationData",
    "FileLogger",
    "IncompatibleSchema",
    "InitialPosition",
    "Interrupted",
    "InvalidConfiguration",
    "InvalidMessage",
    "InvalidTopicName",
    "InvalidTxnStatusError",
    "InvalidUrl",
    "LoggerLevel",
    "LookupError",
    "MemoryBufferIsFull",
    "Message",
    "MessageId",
    "MessageTooBig",
    "NotAllowedError",
    "NotConnected",
    "OperationNotSupported",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerNotInitialized",
    "ProducerQueueIsFull",
    "PulsarException",
    "ReadError",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
    "ServiceInfo",
    "ServiceUnitNotReady",
    "SubscriptionNotFound",
    "TableView",
    "Timeout",
    "TooManyLookupRequestException",
    "TopicNotFound",
    "TopicTerminated",
    "Transaction",
    "TransactionConflict",
    "TransactionCoordinatorNotFoundError",
    "TransactionNotFound",
    "UnknownError",
    "UnsupportedVersionError",
    "exceptions",
    "schema",
]

# Last: it takes its classes from this module (pulsar-client has a ``pulsar.exceptions`` too).
from pulsar_txn.compat import exceptions  # noqa: E402
