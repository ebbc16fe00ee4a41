"""The progress log of idempotent writes: which batch of which query is committed.

Every attempt at batch N of query Q writes one ``SparkBatchCommit{Q, N, T}`` record to the progress
topic *inside its own transaction T*, and waits for it to be stored before any data is produced. Read
raw, that record says "attempt T of (Q, N) may have produced output" (so a later run can end T);
read through the transaction buffer, it says "(Q, N) is committed" exactly when T committed.
See docs/spark-writes.md for the crash analysis.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafka_store import REGISTRY, CodecError, KafkaConfig, RecordKind, end_offsets, read_range
from pulsar_txn.buffer.marker import CTL_HEADER, TXN_HEADER
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.errors import InvalidTxnStatusError, Timeout, TransactionNotFound
from pulsar_txn.txnid import TxnID

if TYPE_CHECKING:
    from pulsar_txn.client import Client

log = logging.getLogger(__name__)

DEFAULT_PROGRESS_TOPIC = "__pulsar_txn_spark_progress"

_V1_FIELDS: list[dict[str, str]] = [
    {"name": "query_id", "type": "string"},
    {"name": "batch_id", "type": "long"},
    {"name": "txn", "type": "bytes"},  # the 16-byte TxnID
    {"name": "written_at_ms", "type": "long"},
]

SPARK_BATCH_COMMIT = REGISTRY.register(
    RecordKind(
        "SparkBatchCommit",
        code=30,
        schemas={
            1: {"type": "record", "name": "SparkBatchCommit", "fields": _V1_FIELDS},
            # v2: the sink (a writer's topic or sink_id): several writers of one micro-batch (the
            # usual foreachBatch fan-out) each commit their own part, and one's commit does not make
            # the others skip the batch. v1 records (no sink) count for every sink of their query.
            2: {
                "type": "record",
                "name": "SparkBatchCommit",
                "fields": [*_V1_FIELDS, {"name": "sink", "type": "string"}],
            },
        },
    )
)

Key = tuple[str, str | None]  # (query id, sink); sink None: a v1 record, valid for every sink


def encode_batch_commit(query_id: str, batch_id: int, txn: TxnID, sink: str = "") -> bytes:
    return SPARK_BATCH_COMMIT.encode(
        {
            "query_id": query_id,
            "batch_id": batch_id,
            "txn": txn.to_bytes(),
            "written_at_ms": int(time.time() * 1000),
            "sink": sink,
        }
    )


def progress_partition(query_id: str, partitions: int) -> int:
    """All records of one query go to one partition of the progress topic."""
    return zlib.crc32(query_id.encode()) % partitions


@dataclass(frozen=True)
class Attempt:
    offset: int
    batch_id: int
    txn: TxnID


@dataclass
class ProgressPartition:
    """One partition of the progress topic, scanned incrementally: the TB state plus, per query, the
    highest committed batch and the attempts whose transaction has not ended yet."""

    kafka: KafkaConfig
    state: TxnBufferState
    committed: dict[Key, int] = field(default_factory=dict)
    pending: dict[Key, list[Attempt]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> None:
        """Fold in what was appended since the last call, then settle what the fold decided."""
        with self.lock:
            self._refresh()

    def _refresh(self) -> None:
        tp = (self.state.topic, self.state.partition)
        end = end_offsets(self.kafka, [tp])[tp]
        for rec in read_range(self.kafka, tp[0], tp[1], self.state.scanned_to, end):
            self.state.apply(rec.offset, rec.headers, rec.value)
            txn_raw = rec.header(TXN_HEADER)
            if rec.header(CTL_HEADER) is not None or txn_raw is None or len(txn_raw) != 16:
                continue  # markers, plain records and corrupt headers are never batch commits
            try:
                fields = REGISTRY.decode_as(SPARK_BATCH_COMMIT, rec.value)
            except CodecError as exc:
                log.warning("%s[%d]@%d: not a batch commit, skipped: %s", tp[0], tp[1], rec.offset, exc)
                continue
            attempt = Attempt(rec.offset, int(fields["batch_id"]), TxnID.from_bytes(txn_raw))
            sink = fields.get("sink")
            key = (str(fields["query_id"]), None if sink is None else str(sink))
            self.pending.setdefault(key, []).append(attempt)
        self.state.scanned_to = max(self.state.scanned_to, end)
        for key, attempts in self.pending.items():
            still_open = []
            for attempt in attempts:
                outcome = self.outcome(attempt)
                if outcome is None:
                    still_open.append(attempt)
                elif outcome:
                    self.committed[key] = max(self.committed.get(key, -1), attempt.batch_id)
            attempts[:] = still_open

    def outcome(self, attempt: Attempt) -> bool | None:
        """True: committed; False: aborted (or a late write of an ended txn); None: still open."""
        state = self.state
        if attempt.txn in state.ongoing:
            return None
        if attempt.txn in state.aborted or state.is_discarded(attempt.offset):
            return False
        return state.has_ended(attempt.txn) or None

    def committed_batch(self, query_id: str, sink: str = "") -> int:
        """The highest batch of ``query_id`` known committed to ``sink`` (-1: none)."""
        return max(self.committed.get((query_id, sink), -1), self.committed.get((query_id, None), -1))

    def open_attempts(self, query_id: str, sink: str = "") -> list[Attempt]:
        return [*self.pending.get((query_id, sink), ()), *self.pending.get((query_id, None), ())]


def settle_open_attempts(
    client: Client, part: ProgressPartition, query_id: str, timeout: float, sink: str = ""
) -> None:
    """End every earlier attempt of ``query_id`` at ``sink`` whose transaction is still open (a driver
    that died mid-batch), then wait until the progress partition shows each one's outcome."""
    part.refresh()
    for attempt in part.open_attempts(query_id, sink):
        try:
            client.resume_transaction(attempt.txn).abort()
            log.warning(
                "aborted %s, a left-over attempt at batch %d of query %s",
                attempt.txn,
                attempt.batch_id,
                query_id,
            )
        except InvalidTxnStatusError as exc:
            # Committing/committed (the TC finishes writing its markers), or already ended.
            log.info("left-over attempt %s of query %s not aborted: %s", attempt.txn, query_id, exc)
        except TransactionNotFound:
            log.info("left-over attempt %s of query %s is forgotten by its TC (ended)", attempt.txn, query_id)
    deadline = time.monotonic() + timeout
    while True:
        part.refresh()
        left = part.open_attempts(query_id, sink)
        if not left:
            return
        if time.monotonic() > deadline:
            raise Timeout(
                f"earlier attempts {[str(a.txn) for a in left]} of query {query_id} did not end within "
                f"{timeout}s; retry later"
            )
        time.sleep(0.1)
