"""pulsar-txn: Apache Pulsar transaction semantics on Kafka topics.

The public API follows Pulsar's client: ``Client`` → transactions, producers, consumers, readers.
"""

from pulsar_txn._topic_delete import TopicDeleted
from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.client import AuthenticationToken, Client
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.consumer import (
    Consumer,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    SubscriptionIsolationLevel,
)
from pulsar_txn.errors import (
    AlreadyClosed,
    AuthenticationError,
    ConfigError,
    ConnectError,
    ConsumerBusy,
    CoordinatorFencedError,
    IncompatibleSchema,
    InvalidTopicName,
    InvalidTxnID,
    InvalidTxnStatusError,
    MessageTooBig,
    NotAllowedError,
    PersistenceError,
    ProducerBusy,
    ProducerFenced,
    PulsarTxnError,
    Result,
    SchemaSerializationError,
    ServerError,
    ServiceNotReady,
    SubscriptionNotFound,
    Timeout,
    TopicNotFound,
    TransactionConflict,
    TransactionCoordinatorNotFoundError,
    TransactionHasOperationFailed,
    TransactionNotFound,
)
from pulsar_txn.message import EARLIEST, LATEST, Message, MessageId
from pulsar_txn.producer import Producer
from pulsar_txn.reader import Reader
from pulsar_txn.schema import AvroSchema, BytesSchema, JsonSchema, Schema, StringSchema
from pulsar_txn.transaction import Transaction, TransactionBuilder, TransactionState
from pulsar_txn.txnid import TxnAction, TxnID

__version__ = "0.1.0"

__all__ = [
    "EARLIEST",
    "LATEST",
    "AlreadyClosed",
    "AuthenticationError",
    "AuthenticationToken",
    "AvroSchema",
    "BytesSchema",
    "Client",
    "ConfigError",
    "ConnectError",
    "Consumer",
    "ConsumerBusy",
    "ConsumerType",
    "CoordinatorConfig",
    "CoordinatorFencedError",
    "DeadLetterPolicy",
    "IncompatibleSchema",
    "InitialPosition",
    "InvalidTopicName",
    "InvalidTxnID",
    "InvalidTxnStatusError",
    "JsonSchema",
    "Message",
    "MessageId",
    "MessageTooBig",
    "NotAllowedError",
    "PersistenceError",
    "Producer",
    "ProducerBusy",
    "ProducerFenced",
    "PulsarTxnError",
    "Reader",
    "Result",
    "Schema",
    "SchemaSerializationError",
    "ServerError",
    "ServiceNotReady",
    "StringSchema",
    "SubscriptionIsolationLevel",
    "SubscriptionNotFound",
    "Timeout",
    "TopicDeleted",
    "TopicNotFound",
    "Transaction",
    "TransactionBuilder",
    "TransactionConflict",
    "TransactionCoordinatorNotFoundError",
    "TransactionHasOperationFailed",
    "TransactionNotFound",
    "TransactionState",
    "TransactionsAdmin",
    "TxnAction",
    "TxnID",
    "__version__",
]
