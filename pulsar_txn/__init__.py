"""pulsar-txn: Apache Pulsar transaction semantics on Kafka topics."""

from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.errors import (
    ConsumerBusy,
    CoordinatorFencedError,
    InvalidTxnStatusError,
    NotAllowedError,
    ProducerFenced,
    PulsarTxnError,
    ServerError,
    ServiceNotReady,
    Timeout,
    TransactionConflict,
    TransactionCoordinatorNotFoundError,
    TransactionHasOperationFailed,
    TransactionNotFound,
)
from pulsar_txn.txnid import TxnAction, TxnID

__version__ = "0.1.0"

__all__ = [
    "ConsumerBusy",
    "CoordinatorConfig",
    "CoordinatorFencedError",
    "InvalidTxnStatusError",
    "NotAllowedError",
    "ProducerFenced",
    "PulsarTxnError",
    "ServerError",
    "ServiceNotReady",
    "Timeout",
    "TransactionConflict",
    "TransactionCoordinatorNotFoundError",
    "TransactionHasOperationFailed",
    "TransactionNotFound",
    "TxnAction",
    "TxnID",
    "__version__",
]
