"""A batch report over a topic, read committed-only through the ``pulsar_txn`` source.

    python -m spark.jobs.batch_report --bootstrap-servers 127.0.0.1:9092 --topic orders

Per partition: records and value bytes delivered, plain records, committed transactions, the offset
range read (it ends at maxReadPosition) and the first/last publish time. ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from pulsar_txn.buffer.snapshot import DEFAULT_SNAPSHOT_TOPIC
from spark.jobs import exit_code_of, positive_int, secret_from_env


def report(session: Any, options: dict[str, str]) -> list[dict[str, Any]]:
    """One dict per partition, sorted by topic and partition."""
    from pyspark.sql import functions as F

    import spark as pulsar_spark

    pulsar_spark.register(session)
    df = session.read.format("pulsar_txn").options(**options).load()
    rows = (
        df.groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum(F.coalesce(F.length("value"), F.lit(0))).alias("value_bytes"),
            F.sum(F.when(F.col("txnId").isNull(), 1).otherwise(0)).alias("plain_records"),
            F.countDistinct("txnId").alias("committed_txns"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.min("timestamp").alias("first_time"),
            F.max("timestamp").alias("last_time"),
        )
        .orderBy("topic", "partition")
        .collect()
    )
    return [
        {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.asDict().items()} for r in rows
    ]


def _table(rows: list[dict[str, Any]]) -> str:
    cols = [
        "topic",
        "partition",
        "records",
        "value_bytes",
        "plain_records",
        "committed_txns",
        "first_offset",
        "last_offset",
        "first_time",
        "last_time",
    ]
    cells = [[str(r[c]) for c in cols] for r in rows]
    total = ["total", "", *(str(sum(int(r[c]) for r in rows)) for c in cols[2:6]), "", "", "", ""]
    widths = [max(len(x) for x in col) for col in zip(cols, *cells, total, strict=True)]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [cols, *cells, total]
    ]
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
