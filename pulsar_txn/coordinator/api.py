"""The coordinator service as the network server and the embedded client see it."""

from __future__ import annotations

from typing import Protocol

from pulsar_txn.txnid import TxnAction, TxnID


class CoordinatorApi(Protocol):
    """What a coordinator instance offers. Methods raise ``pulsar_txn.errors`` exceptions; each one
    carries the ``ServerError`` code to answer with."""

    @property
    def num_tcs(self) -> int:
        """How many TCs the cluster has (transaction-log partitions)."""
        ...

    def owned_tcs(self) -> list[int]:
        """TC ids this instance owns and has recovered (ready to serve)."""
        ...

    def owner_url(self, tc_id: int) -> str | None:
        """The advertised ``pulsar://host:port`` of the instance owning ``tc_id``, if known."""
        ...

    def check_serving(self, tc_id: int) -> None:
        """Raise ``TransactionCoordinatorNotFoundError`` (not owner) or ``ServiceNotReady`` (recovering)."""
        ...

    async def new_txn(self, tc_id: int, ttl_ms: int) -> TxnID: ...

    async def add_partitions(self, txn_id: TxnID, partitions: list[str]) -> None: ...

    async def add_subscriptions(self, txn_id: TxnID, subscriptions: list[tuple[str, str]]) -> None: ...

    async def end_txn(self, txn_id: TxnID, action: TxnAction, token: bytes | None = None) -> None: ...
