"""Transactional writes from Spark: a DataFrame, or every micro-batch of a stream, goes to topics in
ONE pulsar-txn transaction, idempotently per (query id, batch id).

The driver opens the transaction; every task resumes it by id and produces its partition's rows
(``spark._write_task``); the driver commits only if every task succeeded, else aborts. With a query
id, a record in the progress topic, written inside the same transaction, makes a replayed batch a
no-op (``spark._write_progress``). Design and crash analysis: docs/spark-writes.md.

    from spark.writer import transactional_foreach_batch, write_transactional

    write_transactional(df, topic="out", service_url="pulsar://coord:6650", bootstrap_servers="kafka:9092")
    query = stream.writeStream.foreachBatch(
        transactional_foreach_batch(topic="out", service_url=..., bootstrap_servers=...)
    ).option("checkpointLocation", "/ckpt").start()
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka_store import StoreError, TopicAdmin
from pulsar_txn import _args, errors
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.client import Client
from pulsar_txn.errors import ConfigError, PulsarTxnError, TransactionHasOperationFailed, from_store_error
from pulsar_txn.naming import TopicName
from pulsar_txn.transaction import Transaction, TransactionState
from pulsar_txn.txnid import TxnID
from spark._write_progress import (
    DEFAULT_PROGRESS_TOPIC,
    ProgressPartition,
    encode_batch_commit,
    progress_partition,
    settle_open_attempts,
)
from spark._write_schema import RowLayout, layout_for
from spark._write_task import (
    ClientSettings,
    client_for,
    close_clients,
    freeze_kafka,
    require_topic,
    write_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"  # set by Spark on the thread that runs a micro-batch

__all__ = [
    "TransactionalWriter",
    "WriteResult",
    "close_clients",
    "transactional_foreach_batch",
    "write_transactional",
]


@dataclass(frozen=True)
class WriteResult:
    """What a write did: committed in ``txn_id``, or skipped because the batch was already committed."""

    txn_id: TxnID | None
    skipped: bool
    query_id: str | None = None
    batch_id: int | None = None


class TransactionalWriter:
    """The settings of transactional writes; ``write`` does one. Safe to reuse across batches."""

    def __init__(
        self,
        *,
        service_url: str,
        bootstrap_servers: str,
        topic: str | None = None,
        txn_timeout_seconds: float = 120.0,
        operation_timeout_seconds: float = 30.0,
        kafka: dict[str, Any] | None = None,
        authentication: str | None = None,
        num_tcs: int | None = None,
        marker_secret: str | None = None,
        progress_topic: str = DEFAULT_PROGRESS_TOPIC,
        progress_partitions: int = 1,
        sink_id: str | None = None,
    ) -> None:
        """``sink_id``: which of a micro-batch's writers this is, for idempotence: each (query id,
        batch id, sink) is written once. Defaults to ``topic``; writers of one ``foreachBatch`` that
        take their topics from a ``topic`` column need one each."""
        if not service_url or not bootstrap_servers:
            raise ConfigError("a transactional write needs service_url and bootstrap_servers")
        txn_timeout_seconds = _args.seconds(txn_timeout_seconds, "txn_timeout_seconds")
        operation_timeout_seconds = _args.seconds(operation_timeout_seconds, "operation_timeout_seconds")
        progress_partitions = _args.integer(progress_partitions, "progress_partitions", minimum=1)
        if topic is not None:
            TopicName.parse(topic)  # InvalidTopicName at once
        TopicName.parse(progress_topic)
        self.topic = topic
        # By the topic's full name, so a restart that spells the topic otherwise finds its batches;
        # the name as given too, as writers before session 33 recorded it.
        self.sink = _args.text(sink_id, "sink_id") if sink_id is not None else _sink_of(topic)
        self._sinks = list(dict.fromkeys([self.sink, topic or ""] if sink_id is None else [self.sink]))
        self.txn_timeout_seconds = txn_timeout_seconds
        self.progress_topic = progress_topic
        self.progress_partitions = progress_partitions
        self.settings = ClientSettings(
            service_url=service_url,
            bootstrap_servers=bootstrap_servers,
            kafka=freeze_kafka(kafka or {}),
            authentication=authentication,
            num_tcs=num_tcs,
            marker_secret=marker_secret,
            operation_timeout_seconds=operation_timeout_seconds,
        )

    # ------------------------------------------------------------------ one write
    def write(
        self,
        df: DataFrame,
        *,
        query_id: str | None = None,
        batch_id: int | None = None,
        drain_on_skip: bool = False,
    ) -> WriteResult:
        """Write ``df`` in one transaction. With ``query_id`` and ``batch_id``: at most once per pair
        (a replay of a committed batch returns ``skipped=True``; with ``drain_on_skip`` the DataFrame is
        still executed, which a stateful streaming query needs to advance its state store)."""
        layout = layout_for(df.schema, self.topic)
        if (query_id is None) != (batch_id is None):
            raise ConfigError("give both query_id and batch_id (idempotent write) or neither")
        if query_id is not None and batch_id is not None:
            query_id = _args.text(query_id, "query_id")
            batch_id = _args.integer(batch_id, "batch_id", minimum=0)
            if not query_id:
                raise ConfigError("query_id must be non-empty")
        client = client_for(self.settings)
        if self.topic is not None:
            require_topic(client, self.topic)  # TopicNotFound now, before a transaction is opened
        if query_id is None or batch_id is None:
            txn = self._attempt(client, df, layout, None)
            return WriteResult(txn, skipped=False)
        with _query_lock(query_id):
            try:  # the progress log is read with the storage layer: its errors become typed ones
                part, index = self._progress(client, query_id)
                timeout = self.settings.operation_timeout_seconds
                for sink in self._sinks:
                    settle_open_attempts(client, part, query_id, timeout, sink)
                committed = max(part.committed_batch(query_id, sink) for sink in self._sinks)
            except StoreError as exc:
                raise from_store_error(exc, f"reading the progress of query {query_id}") from exc
            if batch_id <= committed:
                log.info(
                    "query %s batch %d already committed to %r (up to %d): skipped",
                    query_id,
                    batch_id,
                    self.sink,
                    committed,
                )
                if drain_on_skip:
                    df.write.format("noop").mode("overwrite").save()
                return WriteResult(None, skipped=True, query_id=query_id, batch_id=batch_id)
            txn = self._attempt(client, df, layout, (query_id, batch_id, index))
            return WriteResult(txn, skipped=False, query_id=query_id, batch_id=batch_id)

    def _attempt(
        self, client: Client, df: DataFrame, layout: RowLayout, progress: tuple[str, int, int] | None
    ) -> TxnID:
        txn = client.transaction(timeout=self.txn_timeout_seconds)
        try:
            if progress is not None:
                query_id, batch_id, index = progress
                # Stored (and so findable by a later run) before any task produces.
                producer = client.create_producer(
                    str(TopicName.parse(self.progress_topic).with_partition(index))
                )
                producer.send(
                    encode_batch_commit(query_id, batch_id, txn.txn_id, self.sink),
                    txn=txn,
                    partition_key=query_id,
                )
            self._run_tasks(df, layout, txn)
            txn.commit()
        except BaseException as exc:
            _abort_quietly(txn)
            if isinstance(exc, PulsarTxnError) or not isinstance(exc, Exception):
                raise
            raise _task_error(exc, txn.txn_id) from exc
        return txn.txn_id

    def _run_tasks(self, df: DataFrame, layout: RowLayout, txn: Transaction) -> None:
        sc = df.sparkSession.sparkContext
        tag = f"pulsar-txn-write-{uuid.uuid4().hex[:12]}"
        sc.addJobTag(tag)  # job tags add to the streaming query's job group, never replace it
        try:
            df.foreachPartition(
                functools.partial(write_partition, self.settings, layout, str(txn.txn_id), txn.timeout_ms)
            )
        finally:
            sc.removeJobTag(tag)
        retried = _retried_result_stage(df.sparkSession, tag)
        if retried:
            raise TransactionHasOperationFailed(
                f"{retried}: a failed task may have produced part of its partition into {txn.txn_id}, so "
                "the transaction is aborted; retry the batch",
                retriable=True,
            )

    def _progress(self, client: Client, query_id: str) -> tuple[ProgressPartition, int]:
        name = TopicName.parse(self.progress_topic).kafka_topic
        with _registry_lock:
            count = _progress_counts.get((self.settings.bootstrap_servers, name))
        if count is None:
            count = TopicAdmin(client.kafka).ensure_topic(
                name,
                self.progress_partitions,
                {"retention.ms": "-1"},  # a last commit must never expire
            )
            with _registry_lock:
                _progress_counts[(self.settings.bootstrap_servers, name)] = count
        index = progress_partition(query_id, count)
        options = client._buffer_options()
        # The fold depends on the TC count and the marker secret too: a writer with other settings
        # must not read its progress through a state another writer folded.
        key = (self.settings.bootstrap_servers, name, index, options.num_tcs, options.marker_secret)
        with _registry_lock:
            part = _progress_parts.get(key)
            if part is None:
                state = TxnBufferState(
                    name,
                    index,
                    num_tcs=options.num_tcs,
                    marker_secret=options.marker_secret,
                )
                part = _progress_parts[key] = ProgressPartition(client.kafka, state)
        return part, index


# Per driver process: the progress partitions scanned so far, and one lock per query so two writes of
# one query in this process never interleave.
_progress_parts: dict[tuple[str, str, int, int | None, bytes | None], ProgressPartition] = {}
_progress_counts: dict[tuple[str, str], int] = {}
_query_locks: dict[str, threading.Lock] = {}
_registry_lock = threading.Lock()


def _sink_of(topic: str | None) -> str:
    """The default sink of a writer: its topic's full name ("" for a writer taking a topic column)."""
    return str(TopicName.parse(topic)) if topic is not None else ""


def _query_lock(query_id: str) -> threading.Lock:
    with _registry_lock:
        return _query_locks.setdefault(query_id, threading.Lock())


def _abort_quietly(txn: Transaction) -> None:
    if txn.state in (TransactionState.OPEN, TransactionState.TIME_OUT, TransactionState.ERROR):
        try:
            txn.abort()
        except PulsarTxnError as exc:  # e.g. it committed after all: the TC's outcome stands
            log.warning("aborting %s after a failed write: %s", txn.txn_id, exc)


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*): (.*)$")


def _task_error(exc: Exception, txn_id: TxnID) -> PulsarTxnError:
    """A typed error for a failed Spark job: the task's own pulsar-txn error type when the worker's
    traceback names one, else TransactionHasOperationFailed."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    cause = lines[0] if lines else type(exc).__name__
    cls: type[PulsarTxnError] = TransactionHasOperationFailed
    for line in reversed(lines):
        match = _EXC_LINE.match(line)
        if match and match.group(1) != "SQLSTATE":
            cause = match.group(2)
            named = getattr(errors, match.group(1).rsplit(".", 1)[-1], None)
            if isinstance(named, type) and issubclass(named, PulsarTxnError):
                cls = named
            break
    return cls(f"transactional write failed, {txn_id} aborted: {cause}")


_STATUS_WAIT_S = 10.0
_ENDED = frozenset({"SUCCEEDED", "FAILED"})


def _retried_result_stage(session: SparkSession, tag: str, wait_s: float = _STATUS_WAIT_S) -> str | None:
    """Why the tagged jobs' producing stage (their last) cannot be trusted, or None: it lost a task,
    or ran again (a stage re-run after a fetch failure starts its tasks at attempt 0 again, so the
    tasks' own check cannot see it). Spark's status store is filled from its listener bus, after the
    action returned: wait (bounded) until it shows every job of the write ended. If it never does
    (events late, or dropped when the bus's queue was full), nothing shows the write free of re-run
    tasks, and that is a reason too: the transaction is aborted and the batch retried."""
    sc = session.sparkContext
    tracker = sc.statusTracker()
    deadline = time.monotonic() + wait_s
    while True:
        jobs = [tracker.getJobInfo(int(j)) for j in sc._jsc.sc().statusTracker().getJobIdsForTag(tag)]
        if jobs and all(j is not None and str(j.status) in _ENDED for j in jobs):
            break
        if time.monotonic() > deadline:
            return f"Spark's status store did not show the write's jobs ended within {wait_s:.0f}s"
        time.sleep(0.02)
    stages = [int(s) for j in jobs if j is not None for s in j.stageIds]
    if not stages:
        return None  # a job over no partitions (an empty DataFrame) runs no task: nothing was produced
    stage = tracker.getStageInfo(max(stages))
    if stage is None:
        return f"Spark's status store has no record of the write's stages {stages}"
    if stage.currentAttemptId > 0 or stage.numFailedTasks > 0:
        return (
            f"stage {stage.stageId} (attempt {stage.currentAttemptId}, {stage.numFailedTasks} failed tasks)"
        )
    return None


# ---------------------------------------------------------------------- the functions of issue 6
def write_transactional(
    df: DataFrame,
    *,
    service_url: str,
    bootstrap_servers: str,
    topic: str | None = None,
    batch_id: int | None = None,
    query_id: str | None = None,
    txn_timeout_seconds: float = 120.0,
    **options: Any,
) -> WriteResult:
    """Write a DataFrame (columns ``value`` and optionally ``key``, ``topic``, ``partition``,
    ``headers``) to topics in one transaction; idempotent when ``query_id`` and ``batch_id`` are given.
    ``options``: the other ``TransactionalWriter`` settings."""
    writer = TransactionalWriter(
        service_url=service_url,
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        txn_timeout_seconds=txn_timeout_seconds,
        **options,
    )
    return writer.write(df, query_id=query_id, batch_id=batch_id)


def transactional_foreach_batch(
    *, query_id: str | None = None, **settings: Any
) -> Callable[[DataFrame, int], None]:
    """A function for ``writeStream.foreachBatch``: each micro-batch is written in one transaction,
    once per (query id, batch id). The query id is the streaming query's ``id`` (kept in the
    checkpoint, so it survives restarts) unless ``query_id`` is given."""
    writer = TransactionalWriter(**settings)

    def write_batch(df: DataFrame, batch_id: int) -> None:
        qid = query_id or df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not qid:
            raise ConfigError("no streaming query id on this thread: pass query_id= explicitly")
        writer.write(df, query_id=qid, batch_id=batch_id, drain_on_skip=True)

    return write_batch
