"""Spark integration: committed-only reads of pulsar-txn topics and transactional writes.

``spark.register(session)`` registers the ``pulsar_txn`` data source; then
``session.read.format("pulsar_txn")`` and ``session.readStream.format("pulsar_txn")`` work.
"""

from __future__ import annotations

from typing import Any

from spark._errors import typed_error

__all__ = ["register", "typed_error"]


def register(session: Any) -> None:
    """Register the ``pulsar_txn`` data source with a SparkSession (idempotent)."""
    from spark.source import PulsarTxnDataSource

    session.dataSource.register(PulsarTxnDataSource)
