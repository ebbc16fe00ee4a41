"""Committed-only batch reads with Spark's built-in Kafka connector (spark-sql-kafka-0-10).

``committed_read(options)`` plans the read on the driver exactly as the ``pulsar_txn`` source does
(maxReadPosition per partition from ``pulsar_txn.buffer``) and returns what to give Spark's Kafka
source: ``startingOffsets`` / ``endingOffsets`` JSON (ending at maxReadPosition) plus a filter over
the Kafka rows' ``headers`` that drops markers, aborted transactions and discarded records::

    plan = committed_read({"kafka.bootstrap.servers": servers, "subscribe": "orders"})
    df = (spark.read.format("kafka")
          .option("kafka.bootstrap.servers", servers)
          .options(**plan.kafka_options())        # assign, startingOffsets, endingOffsets, includeHeaders
          .load()
          .where(plan.filter_sql))

The filter names every aborted TxnID of each partition (pruned to the log-start offset) as a binary
literal, so its size grows with the aborted transactions kept by retention (docs/spark.md,
"Limitations").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pulsar_txn.buffer.marker import CTL_HEADER, TXN_HEADER
from spark._options import TopicPartition, parse_options
from spark._plan import Planner, RangePartition


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _any_header(condition: str) -> str:
    """SQL true if a header satisfies ``condition`` (over ``h``), else false, never null: Spark's
    Kafka source gives ``headers = null`` for a record without headers, and a null in a filter
    would drop the row."""
    return f"coalesce(exists(headers, h -> {condition}), false)"


def _partition_exclusion(part: RangePartition) -> str | None:
    """SQL true for the records of this range that the TB filter drops besides control records."""
    terms = []
    if part.aborted:
        literals = ", ".join(f"X'{raw.hex()}'" for raw in part.aborted)
        terms.append(_any_header(f"h.key = {_sql_string(TXN_HEADER)} AND h.value IN ({literals})"))
    terms.extend(f"(offset BETWEEN {first} AND {last})" for first, last in part.discarded)
    if not terms:
        return None
    return f"(topic = {_sql_string(part.topic)} AND partition = {part.partition} AND ({' OR '.join(terms)}))"


def filter_sql(ranges: list[RangePartition]) -> str:
    """A Spark SQL predicate over Kafka rows (``includeHeaders=true``) keeping exactly the records the
    transaction buffer delivers, for records inside ``ranges``. Pure: unit-tested."""
    ctl = _sql_string(CTL_HEADER)
    txn = _sql_string(TXN_HEADER)
    clauses = [
        "NOT " + _any_header(f"h.key = {ctl}"),  # markers and any other control record
        # a corrupt TxnID header (a null value included)
        "NOT " + _any_header(f"h.key = {txn} AND (h.value IS NULL OR length(h.value) <> 16)"),
    ]
    exclusions = [e for e in (_partition_exclusion(p) for p in ranges) if e is not None]
    if exclusions:
        clauses.append("NOT (" + " OR ".join(exclusions) + ")")
    return " AND ".join(clauses)


def offsets_json(offsets: Mapping[TopicPartition, int]) -> str:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(out, separators=(",", ":"))


@dataclass(frozen=True)
class CommittedRead:
    """What to hand Spark's Kafka source for a committed-only batch read."""

    assign: str
    starting_offsets: str
    ending_offsets: str
    filter_sql: str

    def kafka_options(self) -> dict[str, str]:
        return {
            "assign": self.assign,
            "startingOffsets": self.starting_offsets,
            "endingOffsets": self.ending_offsets,
            "includeHeaders": "true",
            # Kafka's own transactions too (a Kafka transactional producer's aborted records carry no
            # headers of ours): Kafka consumers read uncommitted unless told (interop review, s42).
            "kafka.isolation.level": "read_committed",
        }

    def filter_column(self) -> Any:
        """The filter as a Column (``pyspark.sql.functions.expr``)."""
        from pyspark.sql import functions

        return functions.expr(self.filter_sql)


def plan_from_ranges(ranges: list[RangePartition]) -> CommittedRead:
    """Pure: the Kafka options and filter for these ranges."""
    assign: dict[str, list[int]] = {}
    for r in ranges:
        assign.setdefault(r.topic, []).append(r.partition)
    return CommittedRead(
        assign=json.dumps({t: sorted(ps) for t, ps in sorted(assign.items())}, separators=(",", ":")),
        starting_offsets=offsets_json({(r.topic, r.partition): r.start for r in ranges}),
        ending_offsets=offsets_json({(r.topic, r.partition): r.end for r in ranges}),
        filter_sql=filter_sql(ranges),
    )


def committed_read(options: Mapping[str, str]) -> CommittedRead:
    """Plan a committed-only batch read with the ``pulsar_txn`` source's options (``kafka.*``,
    ``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets``, ``endingOffsets``,
    ``markerSecret``, ``snapshotTopic``, ``numTcs``). Every partition is listed, empty ranges included
    (Spark's Kafka source wants offsets for each assigned partition)."""
    opts = parse_options(options, streaming=False)
    planner = Planner(opts)
    try:
        ranges = []
        for tp, (start, end) in planner.batch_ranges().items():
            ranges.append(planner.range_partition(tp, min(start, end), end))
        return plan_from_ranges(ranges)
    finally:
        planner.close()
