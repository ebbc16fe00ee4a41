"""Example streaming job: read committed records, count them per key, write the running counts back
in one transaction per micro-batch, exactly once across crashes and restarts.

    python -m spark.jobs.stream_aggregate --service-url pulsar://127.0.0.1:6650 \\
        --bootstrap-servers 127.0.0.1:9092 --input orders --output order-counts \\
        --checkpoint /tmp/order-counts-ckpt [--available-now] [--max-offsets-per-trigger 1000]

Each output message has the input key as its key and ``{"key", "count", "batch"}`` (JSON) as its
value: the key's running count after micro-batch ``batch``. Restarted with the same ``--checkpoint``
after any crash, the job continues where it stopped; a batch that was already committed is not
written again (spark.writer, docs/spark-writes.md). Secrets come from the environment, as for the
coordinator: PULSAR_TXN_AUTH_TOKEN (the coordinators' token) and PULSAR_TXN_MARKER_SECRET.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from spark.jobs import exit_code_of, positive_int, secret_from_env

log = logging.getLogger("spark.jobs.stream_aggregate")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m spark.jobs.stream_aggregate", description=__doc__.split("\n")[0]
    )
    p.add_argument("--service-url", required=True, help="coordinator, e.g. pulsar://127.0.0.1:6650")
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--input", required=True, help="topic to read (committed records only)")
    p.add_argument("--output", required=True, help="topic the running counts go to")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (keep it across restarts)")
    p.add_argument("--num-tcs", type=positive_int, default=None, help="number of TCs of the cluster")
    p.add_argument("--snapshot-topic", default=None, help="TB snapshot topic, if not the default")
    p.add_argument("--progress-topic", default=None, help="progress topic of idempotent writes")
    p.add_argument("--max-offsets-per-trigger", type=positive_int, default=None)
    p.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval")
    p.add_argument("--available-now", action="store_true", help="process what is there now, then exit")
    p.add_argument("--run-seconds", type=float, default=None, help="stop after this long (default: run)")
    p.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    p.add_argument("--txn-timeout-seconds", type=float, default=120.0)
    return p.parse_args(argv)


def build(spark: Any, args: argparse.Namespace) -> Any:
    """The streaming query (not started): read -> count per key -> transactional foreachBatch."""
    from pyspark.sql.functions import col, count, lit, struct, to_json

    import spark as pulsar_spark
    from spark.writer import transactional_foreach_batch

    pulsar_spark.register(spark)
    source_options = {"kafka.bootstrap.servers": args.bootstrap_servers, "subscribe": args.input}
    marker_secret = secret_from_env("marker_secret")
    if marker_secret:  # markers (and snapshots) are authenticated: the reader must check them too
        source_options["markerSecret"] = marker_secret
    source_options["startingOffsets"] = "earliest"
    if args.num_tcs is not None:
        source_options["numTcs"] = str(args.num_tcs)
    if args.snapshot_topic:
        source_options["snapshotTopic"] = args.snapshot_topic
    if args.max_offsets_per_trigger is not None:
        source_options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
    counts = (
        spark.readStream.format("pulsar_txn")
        .options(**source_options)
        .load()
        .select(col("key").cast("string").alias("key"))
        .groupBy("key")
        .agg(count(lit(1)).alias("count"))
    )
    settings: dict[str, Any] = {
        "service_url": args.service_url,
        "bootstrap_servers": args.bootstrap_servers,
        "topic": args.output,
        "num_tcs": args.num_tcs,
        "txn_timeout_seconds": args.txn_timeout_seconds,
        "authentication": secret_from_env("token"),
        "marker_secret": marker_secret,
    }
    if args.progress_topic:
        settings["progress_topic"] = args.progress_topic
    write = transactional_foreach_batch(**settings)

    def write_counts(df: Any, batch_id: int) -> None:
        out = df.select(
            col("key"),
            to_json(struct(col("key"), col("count"), lit(batch_id).alias("batch"))).alias("value"),
        )
        write(out, batch_id)

    writer = (
        counts.writeStream.outputMode("update")
        .foreachBatch(write_counts)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{args.trigger_seconds} seconds")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv's packages
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("pulsar-txn-stream-aggregate")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    try:
        query = build(spark, args).start()
        log.info("query %s started (checkpoint %s)", query.id, args.checkpoint)
        if args.run_seconds is not None:
            query.awaitTermination(args.run_seconds)
            query.stop()
        else:
            query.awaitTermination()
        return 0
    except Exception as exc:
        return exit_code_of(exc, "python -m spark.jobs.stream_aggregate")
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
