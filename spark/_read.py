"""Executor side: read one ``RangePartition`` from Kafka and yield Arrow record batches.

The hot loop touches each client message once and appends to plain column lists; Arrow builds the
columns in bulk. The TB rule itself stays in ``TxnBufferState.is_visible``: the executor rebuilds a
state holding just the aborted set and discarded ranges the driver shipped for this range.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kafka_store import PartitionReader
from pulsar_txn.buffer.marker import CTL_HEADER, TXN_HEADER
from pulsar_txn.buffer.snapshot import still_the_partition
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.errors import DataLossError, InvalidTxnID, Timeout
from pulsar_txn.txnid import TxnID
from spark._plan import RangePartition
from spark._schema import arrow_schema

log = logging.getLogger(__name__)

_TS_US = pa.timestamp("us", tz="UTC")


class RangeFilter:
    """``TxnBufferState.is_visible`` for one range, on raw header bytes (the executor's hot path).

    Below maxReadPosition the rule reduces to: a control record is dropped; a transactional record is
    dropped when its TxnID header is not 16 bytes, names an aborted txn, or its offset is discarded.
    Checking the raw 16 bytes against a set avoids a TxnID object per record; a property test checks
    this against ``TxnBufferState.is_visible`` on random partitions (tests/unit/test_spark_read.py).
    """

    def __init__(self, aborted: list[bytes], discarded: list[list[int]]) -> None:
        self.aborted = frozenset(aborted)
        self._state = TxnBufferState("", 0)  # for ``is_discarded`` (the shared range lookup)
        self._state.discarded = [list(r) for r in discarded]
        self.has_discarded = bool(discarded)

    def txn_visible(self, offset: int, txn_raw: bytes) -> bool:
        """Visibility of a non-control record carrying TxnID header ``txn_raw``."""
        if len(txn_raw) != 16 or txn_raw in self.aborted:
            return False
        return not (self.has_discarded and self._state.is_discarded(offset))


def _txn_name(raw: bytes, names: dict[bytes, str | None]) -> str | None:
    name = names.get(raw)
    if name is None and raw not in names:
        try:
            name = str(TxnID.from_bytes(raw)) if len(raw) == 16 else None
        except InvalidTxnID:  # a raw read (transactionFilter=false) shows it as no transaction
            name = None
        names[raw] = name
    return name


def read_partition(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """Visible records of ``[part.start, part.end)`` in offset order, in Arrow batches."""
    opts = part.options
    topic, partition, end = part.topic, part.partition, part.end
    if part.start >= end:
        return
    reader = PartitionReader(opts.kafka_config(), fetch_wait_ms=50)
    try:
        low, _high = reader.watermarks(topic, partition)
        start = part.start
        if low > start:
            if opts.fail_on_data_loss:
                raise DataLossError(
                    f"{topic}[{partition}]: offsets {start}..{min(low, end) - 1} were deleted before "
                    "they were read (set failOnDataLoss=false to skip them)"
                )
            start = low
        if start >= end:
            return
        if not _same_partition(reader, part):
            return
        reader.assign({(topic, partition): start})
        schema = arrow_schema(opts.include_headers)
        state = RangeFilter(part.aborted, part.discarded) if opts.transaction_filter else None
        names: dict[bytes, str | None] = {}
        last_progress = time.monotonic()
        done = False
        expected = start  # the next offset; a jump past the log start means retention deleted records
        while not done:
            msgs = reader.poll_messages(opts.fetch_batch, 0.2)
            if msgs and msgs[0].offset() > expected:
                _check_gap(reader, part, expected, msgs[0].offset())
            if msgs:
                expected = msgs[-1].offset() + 1
            if not msgs:
                if reader.at_eof(topic, partition):
                    # Nothing more below ``end`` (compaction gaps, or records deleted meanwhile);
                    # a partition now shorter than planned was created again under its name.
                    if reader.watermarks(topic, partition)[1] < end:
                        _replaced(part, "it now ends below the planned range")
                    return
                if time.monotonic() - last_progress > opts.poll_timeout_s:
                    raise Timeout(
                        f"no progress reading {topic}[{partition}] at {start}..{end} for "
                        f"{opts.poll_timeout_s:.0f}s"
                    )
                continue
            last_progress = time.monotonic()
            batch, done = _columns(msgs, end, state, opts.include_headers, names)
            if batch[0]:
                yield _record_batch(batch, topic, partition, schema, opts.include_headers)
    finally:
        reader.close()


def _same_partition(reader: PartitionReader, part: RangePartition) -> bool:
    """Whether the partition is still the one the range was planned on (False: not to be read, with
    ``failOnDataLoss=false``). A topic deleted and created again under its name between planning and
    this task (or its retry) holds other records at the planned offsets, and the shipped aborted set
    is not theirs: an open transaction's message and what it holds back were read."""
    if part.anchor is None:
        return True
    scanned_to, offset, fingerprint = part.anchor
    timeout = part.options.kafka_config().request_timeout_ms / 1000
    same = still_the_partition(
        reader, part.topic, part.partition, scanned_to, (offset, fingerprint), timeout, what="planned read"
    )
    if same is False:
        _replaced(part, "another record stands where the plan read")
        return False
    return True  # None: the broker did not answer; the read that follows reports it


def _replaced(part: RangePartition, why: str) -> None:
    what = (
        f"{part.topic}[{part.partition}] was deleted and created again after offsets "
        f"{part.start}..{part.end - 1} were planned ({why})"
    )
    if part.options.fail_on_data_loss:
        raise DataLossError(f"{what}: the planned records are gone (set failOnDataLoss=false to go on)")
    log.warning("%s; nothing read from the new partition for this range", what)


def _check_gap(reader: PartitionReader, part: RangePartition, expected: int, got: int) -> None:
    """Records are missing between ``expected`` and ``got``. A compacted topic has such gaps; if the
    log start has passed ``expected``, retention deleted records while this task read (the client
    then resets to the earliest offset), which ``failOnDataLoss`` does not allow."""
    low, _high = reader.watermarks(part.topic, part.partition)
    if low <= expected:
        return
    lost_to = min(low, got, part.end) - 1
    if part.options.fail_on_data_loss:
        raise DataLossError(
            f"{part.topic}[{part.partition}]: offsets {expected}..{lost_to} were deleted while they were "
            "being read (set failOnDataLoss=false to skip them)"
        )
    log.warning("%s[%d]: offsets %d..%d are gone; skipped", part.topic, part.partition, expected, lost_to)


def _columns(
    msgs: list[Any],
    end: int,
    state: RangeFilter | None,
    include_headers: bool,
    names: dict[bytes, str | None],
) -> tuple[tuple[list[Any], ...], bool]:
    """Column lists of the visible messages below ``end``; and whether ``end`` was reached."""
    offsets: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    types: list[int] = []
    txns: list[str | None] = []
    headers: list[list[dict[str, Any]] | None] = []
    done = False
    visible = state.txn_visible if state is not None else None
    for m in msgs:
        o = m.offset()
        if o >= end:
            done = True
            break
        if o + 1 >= end:
            done = True  # the range's last offset: whether kept or dropped, nothing more to read
        h = m.headers()
        txn = None
        if h:
            ctl = False
            for k, v in h:
                if k == TXN_HEADER:
                    txn = v if v is not None else b""  # a null value is a corrupt TxnID, as the fold has it
                elif k == CTL_HEADER:
                    ctl = True
            if visible is not None and (ctl or (txn is not None and not visible(o, txn))):
                continue  # markers, aborted and discarded records are never delivered
        offsets.append(o)
        keys.append(m.key())
        values.append(m.value())
        ts_type, ts = m.timestamp()
        stamps.append(ts)
        types.append(ts_type - 1)  # librdkafka 1/2 (create/log-append) -> Kafka's 0/1; none -> -1
        txns.append(_txn_name(txn, names) if txn is not None else None)
        if include_headers:
            # null for a record without headers, as Spark's Kafka source gives
            headers.append([{"key": k, "value": v} for k, v in h] if h else None)
    return (offsets, keys, values, stamps, types, txns, headers), done


def _record_batch(
    cols: tuple[list[Any], ...], topic: str, partition: int, schema: pa.Schema, include_headers: bool
) -> pa.RecordBatch:
    offsets, keys, values, stamps, types, txns, headers = cols
    n = len(offsets)
    stamp_ms = pa.array(stamps, pa.int64())
    arrays = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        pc.multiply(stamp_ms, 1000).cast(_TS_US),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        arrays.append(pa.array(headers, schema.field("headers").type))
    arrays.append(pa.array(txns, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
