"""The transaction coordinator: TxnIDs, the state machine, the Kafka transaction log, timeouts,
low watermarks, end-transaction driving, ownership and fencing."""

from pulsar_txn.coordinator.service import CoordinatorService
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.coordinator.tc import TransactionCoordinator

__all__ = ["CoordinatorService", "TransactionCoordinator", "TxnStatus"]
