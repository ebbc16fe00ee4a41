"""pulsar-txn: Apache Pulsar transaction semantics on Kafka topics.

The public API follows Pulsar's client: ``Client`` → transactions, producers, consumers, readers.
"""

from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.client import Client
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.consumer import Consumer, ConsumerType, DeadLetterPolicy, InitialPosition
from pulsar_txn.errors import (
    AuthenticationError,
    ConfigError,
    ConsumerBusy,
    CoordinatorFencedError,
    InvalidTopicName,
    InvalidTxnStatusError,
    NotAllowedError,
    PersistenceError,
    ProducerFenced,
    PulsarTxnError,
    ServerError,
    ServiceNotReady,
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
from pulsar_txn.transaction import Transaction, TransactionState
from pulsar_txn.txnid import TxnAction, TxnID

__version__ = "0.1.0"

__all__ = [
    "EARLIEST",
    "LATEST",
    "AuthenticationError",
    "Client",
    "ConfigError",
    "Consumer",
    "ConsumerBusy",
    "ConsumerType",
    "CoordinatorConfig",
    "CoordinatorFencedError",
    "DeadLetterPolicy",
    "InitialPosition",
    "InvalidTopicName",
    "InvalidTxnStatusError",
    "Message",
    "MessageId",
    "NotAllowedError",
    "PersistenceError",
    "Producer",
    "ProducerFenced",
    "PulsarTxnError",
    "Reader",
    "ServerError",
    "ServiceNotReady",
    "Timeout",
    "TopicNotFound",
    "Transaction",
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
