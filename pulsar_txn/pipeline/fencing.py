"""Fencing a pipeline's dead predecessor: abort the transactions it left open.

Kafka's ``init_transactions()`` does this for a ``transactional.id``; Pulsar has no such step, so the
pipeline does it from what Kafka already holds: transactions with pending acks on its (exclusive)
subscription, and transactions open in its output partitions whose first message carries its
producer name. Left alone they would end only at their timeout, and the messages they hold back
would then come back *after* later ones, breaking per-partition order.

The other side of it: a predecessor that is not dead (a long pause, a partition) is never told that
it lost its partitions (the broker fences the replaced static member, but its consumer keeps them),
and would go on committing what the new instance processes too. ``TakeoverWatch`` lets a running
instance find out from the group's member list: once another member has its instance id, it commits
nothing more and stops with ``PipelineFenced`` instead of taking the subscription back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from kafka_store import StoreError, describe_group, group_admin, read_range
from pulsar_txn.buffer.reader import load_state
from pulsar_txn.errors import (
    ConfigError,
    InvalidTxnStatusError,
    ProducerFenced,
    Timeout,
    TopicNotFound,
    TransactionConflict,
    TransactionNotFound,
    from_store_error,
)
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
    return set(consumer.pending_transactions()) | open_in_output(client, output, producer_prefix)


def open_in_output(client: Client, output: TopicName, producer_prefix: str) -> set[TxnID]:
    """Transactions open in ``output``'s partitions whose first message there is from a producer
    named ``producer_prefix...``."""
    found: set[TxnID] = set()
    try:
        partitions = client._partition_count(output)
    except TopicNotFound:
        # Not worth a new session (each would fail the same way): as for too few partitions.
        raise ConfigError(
            f"output topic {output} does not exist: create it with as many partitions as the input"
        ) from None
    try:  # storage helpers, below the public API's error boundary: a Kafka hiccup restarts the session
        for partition in range(partitions):
            state, _ = load_state(
                client.kafka,
                output.kafka_topic,
                partition,
                store=client._snapshots(),
                options=client._buffer_options(),
            )
            for txn, first in state.ongoing.items():
                records = read_range(client.kafka, output.kafka_topic, partition, first, first + 1)
                rec = next(iter(records), None)
                producer = producer_name_of(rec) if rec is not None else None
                if producer is not None and producer.startswith(producer_prefix):
                    found.add(txn)
    except StoreError as exc:
        raise from_store_error(exc, f"fencing: reading {output}") from exc
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
    looked_up = time.monotonic()
    while held := txns & set(consumer.pending_transactions()):
        now = time.monotonic()
        if now > deadline:
            raise Timeout(f"pending acks of {sorted(map(str, held))} not released within {timeout}s")
        if now - looked_up > 1.0:
            # Usually the abort markers release them. Ack records written after their transaction's
            # abort marker (a late write of the previous run) are released by nothing but a look-up
            # in the transaction log, which the consumer itself makes only after a minute.
            consumer.release_if_aborted(held)
            looked_up = now
        time.sleep(0.05)
    return aborted


class ForeignTransaction(TransactionConflict):
    """Input of this pipeline is held by a transaction its session did not begin: a replaced instance,
    paused mid-batch, stored its batch's ack record after this session's fencing scan. The consumer
    skips those inputs while the transaction is open; processing later ones would put them out of
    order, so the session restarts instead (retriable), and its fencing aborts the transaction."""

    retriable = True


class PipelineFenced(ProducerFenced):
    """Another instance with this pipeline's ``instance_id`` took its subscription over: this one
    commits nothing more and stops (``run`` does not retry it: a new session would take the
    subscription back)."""


class TakeoverWatch:
    """Whether another consumer with our ``instance_id`` has replaced ``consumer`` in the
    subscription's group, checked every ``interval_s`` on a daemon thread (``fenced`` is set then),
    or on demand with ``check``. ``ours``: client ids of this pipeline's earlier consumers (a
    static member that did not leave is listed until its successor's join replaces it)."""

    def __init__(
        self,
        client: Client,
        consumer: Consumer[bytes],
        instance_id: str,
        interval_s: float | None,
        ours: Collection[str] = (),
    ) -> None:
        self._client = client
        self._consumer = consumer
        self._instance_id = instance_id
        self._interval = interval_s
        self._ours = frozenset(ours)
        self.fenced = threading.Event()
        self._stop = threading.Event()
        self._admin: object | None = None  # one admin client for every look-up (made on first use)

    def start(self) -> TakeoverWatch:
        if self._interval is not None:
            threading.Thread(target=self._run, name="pipeline-takeover-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()  # not joined: a check in progress ends by itself (bounded by Kafka's timeout)

    def check(self) -> bool:
        """Ask the group now; True (and ``fenced`` set) if another member has our instance id. A
        failed look-up says nothing (False)."""
        if self.fenced.is_set():
            return True
        mine = self._consumer._client_id
        try:
            if self._admin is None:
                self._admin = group_admin(self._client.kafka)
            members = describe_group(self._client.kafka, self._consumer.subscription, admin=self._admin)
        except Exception as exc:  # StoreError, or the admin call's own timeout
            log.debug("takeover check of %s failed: %s", self._consumer.subscription, exc)
            return False
        listed = {m.client_id for m in members}
        others = listed - self._ours - {mine}
        if mine not in listed and any(
            m.instance_id == self._instance_id and m.client_id in others for m in members
        ):
            if not self.fenced.is_set():
                log.warning(
                    "another instance with id %r took subscription %r over: this one stops",
                    self._instance_id,
                    self._consumer.subscription,
                )
            self.fenced.set()
        return self.fenced.is_set()

    def error(self) -> PipelineFenced:
        return PipelineFenced(
            f"another pipeline instance with id {self._instance_id!r} took subscription "
            f"{self._consumer.subscription!r} over"
        )

    def _run(self) -> None:
        assert self._interval is not None
        while not self._stop.wait(self._interval):
            if self.check():
                return
