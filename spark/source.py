"""``PulsarTxnDataSource``: committed-only batch and streaming reads of pulsar-txn topics.

``spark.read.format("pulsar_txn")`` / ``spark.readStream.format("pulsar_txn")`` with Spark's Kafka
source options (docs/spark.md). Every range ends at its partition's maxReadPosition, so an open
transaction holds back everything from its first message on; markers, aborted and discarded records
are dropped on the executors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pulsar_txn.errors import ConfigError
from spark._offsets import Offsets, from_json, rate_limit, to_json
from spark._options import LATEST, SourceOptions, TopicPartition, parse_options
from spark._plan import Planner, RangePartition
from spark._read import read_partition
from spark._schema import spark_schema

log = logging.getLogger(__name__)

NAME = "pulsar_txn"


def _partition(part: InputPartition) -> RangePartition:
    if not isinstance(part, RangePartition):
        raise ConfigError(f"not a pulsar_txn input partition: {part!r}")
    return part


class PulsarTxnDataSource(DataSource):
    """Spark data source ``pulsar_txn``: see docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        raw = {str(k).lower(): str(v) for k, v in self.options.items()}.get("includeheaders", "false")
        return spark_schema(raw.strip().lower() in ("true", "1", "yes"))

    def reader(self, schema: StructType) -> DataSourceReader:
        return PulsarTxnBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PulsarTxnStreamReader(parse_options(self.options, streaming=True))


class PulsarTxnBatchReader(DataSourceReader):
    """One input partition per topic-partition: ``[startingOffsets, min(endingOffsets, maxReadPosition))``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planner = Planner(self.options)
        try:
            out: list[InputPartition] = []
            for tp, (start, end) in planner.batch_ranges().items():
                if start < end:
                    out.append(planner.range_partition(tp, start, end))
            # Spark wants at least one partition; an empty range reads nothing.
            return out or [RangePartition(self.options, "", 0, 0, 0, [], [])]
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(_partition(partition))


class PulsarTxnStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic": {"partition": next offset}}``; a micro-batch ends at each partition's
    maxReadPosition at planning time (capped by ``maxOffsetsPerTrigger``)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # Lives in the driver-side Python worker for the query's lifetime: TB states are loaded once
        # (snapshot + tail scan) and then only scanned forward at each planning call.
        self.planner = Planner(options)
        self._target: Offsets | None = None
        # Spark keeps no start for batch 0 (its offset log holds ends): it asks initialOffset() when
        # it plans batch 0, again when it runs it, and again after a restart before batch 0 was
        # committed. The first answer is kept, and a start at "latest" (which moves between the
        # asks) gets an empty batch 0 ending there, so the offset log holds it for any re-run.
        self._initial: Offsets | None = None
        starting = options.starting
        self._empty_first = starting == "latest" or (
            isinstance(starting, dict) and LATEST in starting.values()
        )

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            tps = self.planner.partitions()
            bounds = self.planner.bounds(tps)
            starts = self.planner.resolve(self.options.starting, bounds)
            for tp, start in starts.items():
                if start > bounds[tp].end:  # taken later for a topic created again, from its log start
                    starts[tp] = self.planner.past_end(tp, start, bounds[tp].end)
            self._initial = starts
        return to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.planner.partitions(skip_missing=True)  # a topic gone is reported by the batches
        self._target = {tp: b.limit for tp, b in self.planner.bounds(tps).items()}

    def _available(self, starts: Offsets) -> tuple[Offsets, Offsets]:
        """(begins, ends): where each partition's next batch would begin and how far it could go."""
        tps = self.planner.partitions(skip_missing=True)
        bounds = self.planner.bounds(tps)
        gone = sorted(set(starts) - set(tps))
        if gone:  # once: the batch's end offsets leave them out, so the next one starts without them
            self.planner.vanished(gone)
        begins: Offsets = {tp: o for tp, o in starts.items() if tp in bounds}
        ends: Offsets = {}
        for tp in tps:
            if tp in starts and bounds[tp].end < starts[tp]:
                # Replaced since the query read there (a restarted query has no kept TB state to tell).
                # Spark's Kafka source goes on from the new end; the query read none of the new
                # partition (its offset is past that end), so this one goes on from its log start.
                self.planner.went_back(tp, starts[tp], bounds[tp].end, "the end offset")
                ends[tp] = bounds[tp].low
                continue
            # A partition that appeared since: from its log start (offsets retention deleted before
            # the query knew the partition are no loss, and not counted by maxOffsetsPerTrigger).
            begin = begins.setdefault(tp, bounds[tp].low)
            limit = bounds[tp].limit
            if self._target is not None:
                limit = min(limit, self._target.get(tp, begin))
            ends[tp] = max(begin, limit)
        return begins, ends

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        starts = from_json(start)
        if self._empty_first:
            self._empty_first = False
            if starts == self._initial:  # batch 0 (see __init__)
                return to_json(starts)
        begins, ends = self._available(starts)
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(begins, ends, limit.max_rows)
        return to_json(ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        starts, ends = from_json(start), from_json(end)
        ranges: list[tuple[TopicPartition, int, int]] = [
            (tp, starts.get(tp, 0), e) for tp, e in sorted(ends.items()) if starts.get(tp, 0) < e
        ]
        if not ranges:
            return []
        # Bounds now, not those latestOffset saw: a batch planned again after a restart, or planned
        # just before the topic was created again, must not read the new partition past its
        # maxReadPosition (an open transaction's message at its start, say).
        bounds = self.planner.bounds(sorted({tp for tp, _, _ in ranges}))
        out: list[InputPartition] = []
        for tp, begin, e in ranges:
            low, limit = bounds[tp].low, bounds[tp].limit
            if e > limit:
                self.planner.went_back(tp, e, limit, "the readable end (maxReadPosition)")
                e = limit
            s = self.planner.check_start(tp, begin, low) if tp in starts else max(begin, low)
            if s < e:
                out.append(self.planner.range_partition(tp, s, e))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(_partition(partition))

    def commit(self, end: dict[str, Any]) -> None:
        pass  # Spark's checkpoint holds the offsets; nothing to acknowledge in Kafka

    def stop(self) -> None:
        self.planner.close()
