"""Fencing a pipeline's dead predecessor: abort the transactions it left open.

Kafka's ``init_transactions()`` does this for a ``transactional.id``; Pulsar has no such step, so the
pipeline does it from what Kafka already holds: transactions with pending acks on its (exclusive)
subscription, and transactions open in its output partitions whose first message carries its
producer name. Left alone they would end only at their timeout, and the messages they hold back
would then come back *after* later ones, breaking per-partition order.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from kafka_store import read_range
from pulsar_txn.buffer.reader import load_state
from pulsar_txn.errors import InvalidTxnStatusError, Timeout, TransactionNotFound
from pulsar_txn.message import producer_name_of
from pulsar_txn.naming import TopicName
from pulsar_txn.txnid import TxnID

if TYPE_CHECKING:
    from pulsar_txn.client import Client
    from pulsar_txn.consumer import Consumer

log = logging.getLogger(__name__)


def leftover_transactions(
    client: Client, consumer: Consumer[bytes], output: TopicName, producer_prefix: str
) -> set[TxnID]:
    """Open transactions that hold our input (pending acks) or our output (first message is ours)."""
    found = set(consumer.pending_transactions())
    for partition in range(client._partition_count(output)):
        state, _ = load_state(
            client.kafka,
            output.kafka_topic,
            partition,
            store=client._snapshots(),
            options=client._buffer_options(),
        )
        for txn, first in state.ongoing.items():
            rec = next(iter(read_range(client.kafka, output.kafka_topic, partition, first, first + 1)), None)
            producer = producer_name_of(rec) if rec is not None else None
            if producer is not None and producer.startswith(producer_prefix):
                found.add(txn)
    return found


def abort_leftovers(client: Client, consumer: Consumer[bytes], txns: set[TxnID], timeout: float) -> int:
    """Abort ``txns`` (already-ended ones are fine) and wait until the consumer has seen every outcome,
    so that nothing it holds back can be redelivered after later messages. Returns how many were
    aborted here."""
    aborted = 0
    for txn in sorted(txns, key=lambda t: (t.most_bits, t.least_bits)):
        try:
            client.resume_transaction(txn).abort()
            aborted += 1
            log.info("aborted %s left open by a previous run", txn)
        except (InvalidTxnStatusError, TransactionNotFound):
            log.info("%s already ended (committed or aborted) before this run", txn)
    deadline = time.monotonic() + timeout
    while txns & set(consumer.pending_transactions()):
        if time.monotonic() > deadline:
            raise Timeout(f"pending acks of {sorted(map(str, txns))} not released within {timeout}s")
        time.sleep(0.05)
    return aborted
