"""A batch report over a topic, read committed-only through the ``pulsar_txn`` source.

    python -m spark.jobs.batch_report --bootstrap-servers 127.0.0.1:9092 --topic orders

Per partition: records and value bytes delivered, plain records, committed transactions, the offset
range read, ``[start_offset, end_offset)`` (it ends at maxReadPosition), and the first/last publish
time; then the total (a transaction over several partitions counts once). ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from pulsar_txn.buffer.snapshot import DEFAULT_SNAPSHOT_TOPIC
from spark.jobs import exit_code_of, positive_int, secret_from_env


def planned_ranges(options: dict[str, str]) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's ``[start, end)`` as the batch source plans it now (``end``: maxReadPosition,
    or an ``endingOffsets`` below it)."""
    from spark._options import parse_options
    from spark._plan import Planner

    planner = Planner(parse_options(options, streaming=False))
    try:
        return planner.batch_ranges()
    finally:
        planner.close()


def report(session: Any, options: dict[str, str]) -> list[dict[str, Any]]:
    """One dict per partition read, sorted by topic and partition, then the total (``topic``
    "total"). The ranges are planned first and read as given (maxReadPosition only grows), so each
    row says what was read: a partition with nothing to deliver (everything aborted, or held back by
    an open transaction) is listed too, with the range read."""
    import spark as pulsar_spark
    from spark._offsets import to_json

    ranges = planned_ranges(options)
    # The planned partitions by name (assign), so that one appearing meanwhile is not read (nor
    # refused: the offsets JSON must name every partition read).
    fixed = {k: v for k, v in options.items() if k.lower() not in ("subscribe", "subscribepattern", "assign")}
    assigned: dict[str, list[int]] = {}
    for topic, partition in sorted(ranges):
        assigned.setdefault(topic, []).append(partition)
    fixed["assign"] = json.dumps(assigned)
    fixed["startingOffsets"] = json.dumps(to_json({tp: r[0] for tp, r in ranges.items()}))
    fixed["endingOffsets"] = json.dumps(to_json({tp: max(r) for tp, r in ranges.items()}))
    pulsar_spark.register(session)
    aggregated = _aggregate(session.read.format("pulsar_txn").options(**fixed).load()) if ranges else []
    found = {(r["topic"], r["partition"]): r.asDict() for r in aggregated}
    empty: dict[str, Any] = {**dict.fromkeys(_COUNTS, 0), "first_time": None, "last_time": None}
    rows = []
    for (topic, partition), (start, end) in sorted(ranges.items()):
        row = {**empty, **found.get((topic, partition), {})}
        row.update(topic=topic, partition=partition, start_offset=start, end_offset=max(start, end))
        rows.append(row)
    total = {**empty, **found.get((None, None), {})}
    total.update(topic="total", partition=None, start_offset=None, end_offset=None)
    rows.append(total)
    cols = ["topic", "partition", *_COUNTS, "start_offset", "end_offset", "first_time", "last_time"]
    return [{c: (r[c].isoformat() if hasattr(r[c], "isoformat") else r[c]) for c in cols} for r in rows]


def _aggregate(df: Any) -> list[Any]:
    """Per (topic, partition), and the grand total: by rollup, so that its distinct transactions
    are counted across partitions (a transaction in two partitions is one), not summed."""
    from pyspark.sql import functions as F

    rows: list[Any] = (
        df.rollup("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum(F.coalesce(F.length("value"), F.lit(0))).alias("value_bytes"),
            F.sum(F.when(F.col("txnId").isNull(), 1).otherwise(0)).alias("plain_records"),
            F.countDistinct("txnId").alias("committed_txns"),
            F.min("timestamp").alias("first_time"),
            F.max("timestamp").alias("last_time"),
        )
        .collect()
    )
    return rows


_COUNTS = ["records", "value_bytes", "plain_records", "committed_txns"]


def _table(rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0]) if rows else ["topic"]
    cells = [["" if r[c] is None else str(r[c]) for c in cols] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(cols, *cells, strict=True)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [cols, *cells]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark.jobs.batch_report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True, help="Kafka topic (or comma-separated topics)")
    parser.add_argument("--snapshot-topic", default=DEFAULT_SNAPSHOT_TOPIC)
    # Refused, not taken: a secret on a command line is in the process list for every user to read.
    parser.add_argument("--marker-secret", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--num-tcs", type=positive_int, default=None, help="transaction coordinators (default: any)"
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.marker_secret is not None:
        parser.error(
            "--marker-secret is not taken on the command line (ps shows it to every user): "
            "set PULSAR_TXN_MARKER_SECRET"
        )
    options = {
        "kafka.bootstrap.servers": args.bootstrap_servers,
        "subscribe": args.topic,
        "snapshotTopic": args.snapshot_topic,
    }
    marker_secret = secret_from_env("marker_secret")
    if marker_secret:
        options["markerSecret"] = marker_secret
    if args.num_tcs is not None:
        options["numTcs"] = str(args.num_tcs)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(args.master)
        .appName("pulsar-txn-batch-report")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        rows = report(session, options)
    except Exception as exc:
        return exit_code_of(exc, parser.prog)
    finally:
        session.stop()
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
