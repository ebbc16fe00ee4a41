"""The ``pulsar_txn`` Spark source on the real local Spark against the real broker: batch and streaming
reads deliver exactly the committed records, bounded by maxReadPosition."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_store import KafkaConfig, end_offsets
from tests.conftest import Cluster, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


@pytest.fixture(scope="module")
def spark(spark_session: Any) -> Any:
    import spark as pulsar_spark

    pulsar_spark.register(spark_session)
    return spark_session


def _opts(c: Cluster, kafka: KafkaConfig, topic: str, **extra: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": topic,
        "snapshotTopic": c.config.snapshot_topic,
        "numTcs": str(c.config.num_tcs),
        **extra,
    }


def _batch(spark: Any, opts: dict[str, str]) -> list[Any]:
    return spark.read.format("pulsar_txn").options(**opts).load().collect()  # type: ignore[no-any-return]


def _values(rows: list[Any]) -> list[str]:
    """Values in (partition, offset) order."""
    return [r.value.decode() for r in sorted(rows, key=lambda r: (r.partition, r.offset))]


def test_batch_read_returns_exactly_committed_records_while_txns_are_open_or_aborted(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster()
    topic = f"sb_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    plain_before = [f"p{i}" for i in range(6)]
    for v in plain_before:
        producer.send(v)
    committed = c.client.transaction(60)
    for i in range(6):
        producer.send(f"c{i}", txn=committed)
    committed.commit()
    aborted = c.client.transaction(60)
    for i in range(6):
        producer.send(f"a{i}", txn=aborted)
    aborted.abort()
    for i in range(4):
        producer.send(f"q{i}")
    open_txn = c.client.transaction(60)
    for i in range(4):
        producer.send(f"o{i}", txn=open_txn)
    for i in range(4):
        producer.send(f"r{i}")  # behind the open txn's first message: held back
    producer.flush()
    opts = _opts(c, kafka, topic)

    rows = _batch(spark, opts)
    got = _values(rows)
    visible_now = plain_before + [f"c{i}" for i in range(6)] + [f"q{i}" for i in range(4)]
    assert sorted(got) == sorted(visible_now)
    # Publish order per partition (round robin: even sends on one partition, odd on the other).
    for p in (0, 1):
        part = [r for r in sorted(rows, key=lambda r: r.offset) if r.partition == p]
        assert [r.offset for r in part] == sorted(r.offset for r in part)
    by_value = {r.value.decode(): r for r in rows}
    assert by_value["c0"].txnId == str(committed.txn_id)
    assert by_value["p0"].txnId is None
    assert by_value["p0"].topic == topic

    # The raw read (filter off) sees everything written, markers included.
    raw = _batch(spark, {**opts, "transactionFilter": "false"})
    ends = end_offsets(kafka, [(topic, 0), (topic, 1)])
    assert len(raw) == sum(ends.values())

    # Explicit ending offsets past maxReadPosition are capped there.
    capped = _batch(spark, {**opts, "endingOffsets": f'{{"{topic}":{{"0":-1,"1":{ends[(topic, 1)]}}}}}'})
    assert sorted(_values(capped)) == sorted(visible_now)

    open_txn.commit()
    after = _values(_batch(spark, opts))
    assert sorted(after) == sorted(visible_now + [f"o{i}" for i in range(4)] + [f"r{i}" for i in range(4)])

    # startingOffsets per partition: skip the first two offsets of partition 0.
    part0 = sorted((r for r in _batch(spark, opts) if r.partition == 0), key=lambda r: r.offset)
    tail = _batch(spark, {**opts, "startingOffsets": f'{{"{topic}":{{"0":{part0[2].offset},"1":-2}}}}'})
    assert sorted(r.value for r in tail if r.partition == 0) == sorted(r.value for r in part0[2:])


def test_batch_read_with_headers_has_sparks_kafka_schema_plus_txn_id(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster()
    topic = f"sh_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send("plain", partition_key="k1")
    with c.client.transaction(60) as txn:
        producer.send("in-txn", txn=txn)
    df = spark.read.format("pulsar_txn").options(**_opts(c, kafka, topic, includeHeaders="true")).load()
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
        "txnId",
    ]
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [r.value for r in rows] == [b"plain", b"in-txn"]
    assert rows[0].key == b"k1"
    assert rows[0].timestampType == 0
    assert abs(rows[0].timestamp.timestamp() - time.time()) < 300
    names = {h.key for h in rows[1].headers}
    assert "ptxn.txn" in names
    assert rows[1].txnId == str(txn.txn_id)


def test_bad_options_raise_typed_errors(spark: Any, kafka: KafkaConfig, uid: str) -> None:
    from pyspark.errors import PySparkException

    from pulsar_txn.errors import ConfigError
    from spark import typed_error
    from spark._options import parse_options

    with pytest.raises(ConfigError, match="subscribe"):
        parse_options({"kafka.bootstrap.servers": kafka.bootstrap_servers}, streaming=False)
    # Through Spark, the typed error's message reaches the user, and spark.typed_error gives it back.
    with pytest.raises(PySparkException, match="startingOffsets cannot be latest") as wrapped:
        _batch(
            spark,
            {
                "kafka.bootstrap.servers": kafka.bootstrap_servers,
                "subscribe": f"nope_{uid}",
                "startingOffsets": "latest",
            },
        )
    typed = typed_error(wrapped.value)
    assert isinstance(typed, ConfigError) and "startingOffsets cannot be latest" in str(typed)
    assert typed.__cause__ is wrapped.value


def test_sql_kafka_plan_keeps_exactly_what_the_source_delivers_on_real_rows(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    from kafka_store import Appender
    from pulsar_txn.buffer.marker import TXN_HEADER
    from spark.sql_kafka import committed_read

    c = cluster(tb_service_enabled=False)
    topic = f"sk_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(4):
        producer.send(f"p{i}")
    with c.client.transaction(60) as done:
        for i in range(4):
            producer.send(f"c{i}", txn=done)
    aborted = c.client.transaction(60)
    for i in range(4):
        producer.send(f"a{i}", txn=aborted)
    aborted.abort()
    app = Appender(kafka)
    try:
        # A late message of an ended txn (discarded) and a corrupt TxnID header: never delivered.
        app.append(topic, 0, b"late", headers=[(TXN_HEADER, done.txn_id.to_bytes())]).result(10)
        app.append(topic, 1, b"corrupt", headers=[(TXN_HEADER, b"short")]).result(10)
    finally:
        app.close()
    producer.send("q0")
    open_txn = c.client.transaction(60)
    producer.send("o0", txn=open_txn, partition_key="k")
    producer.send("r0", partition_key="k")  # same partition, behind the open txn: held back
    producer.flush()
    opts = _opts(c, kafka, topic)

    plan = committed_read(opts)
    raw = (
        spark.read.format("pulsar_txn")
        .options(**opts, transactionFilter="false", includeHeaders="true")
        .option("startingOffsets", plan.starting_offsets)
        .option("endingOffsets", plan.ending_offsets)
        .load()
    )
    kept = raw.where(plan.filter_sql).collect()
    assert len(raw.collect()) > len(kept)
    ours = _batch(spark, opts)
    assert sorted(_values(kept)) == sorted(_values(ours))
    assert sorted(_values(ours)) == sorted([f"p{i}" for i in range(4)] + [f"c{i}" for i in range(4)] + ["q0"])
    assert raw.where(plan.filter_column()).count() == len(kept)
    open_txn.abort()


def test_sql_kafka_plan_keeps_records_without_headers_as_sparks_kafka_source_gives_them(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """spark-sql-kafka gives ``headers = null`` (not an empty array) for a record without headers;
    a null in the filter dropped such records (with aborted transactions in the partition too)."""
    from pyspark.sql import functions as F

    from kafka_store import Appender
    from spark.sql_kafka import committed_read

    c = cluster(tb_service_enabled=False)
    topic = f"skb_{uid}"
    c.client.create_topic(topic, 1)
    app = Appender(kafka)
    producer = c.client.create_producer(topic)
    try:
        app.append(topic, 0, b"bare1").result(10)  # a plain Kafka producer's record: no headers
        aborted = c.client.transaction(60)
        producer.send("a0", txn=aborted)
        aborted.abort()
        app.append(topic, 0, b"bare2").result(10)
    finally:
        app.close()
    producer.send("p0")
    opts = _opts(c, kafka, topic)
    plan = committed_read(opts)
    raw = (
        spark.read.format("pulsar_txn")
        .options(**opts, transactionFilter="false", includeHeaders="true")
        .option("startingOffsets", plan.starting_offsets)
        .option("endingOffsets", plan.ending_offsets)
        .load()
    )
    # Our source gives null too (session 42, Spark review: it gave []).
    assert [r.headers for r in raw.collect() if r.value in (b"bare1", b"bare2")] == [None, None]
    as_kafka = raw.withColumn("headers", F.when(F.size("headers") > 0, F.col("headers")))  # else null
    kept = as_kafka.where(plan.filter_sql).collect()
    assert sorted(_values(kept)) == sorted(_values(_batch(spark, opts))) == ["bare1", "bare2", "p0"]


def test_batch_report_counts_committed_records_bytes_and_txns_per_partition(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    from spark.jobs.batch_report import _table, report

    c = cluster(tb_service_enabled=False)
    topic = f"sr_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send("abc")
    for n in (2, 3):
        with c.client.transaction(60) as txn:
            for _ in range(n):
                producer.send("xy", txn=txn)
    aborted = c.client.transaction(60)
    producer.send("gone", txn=aborted)
    aborted.abort()
    rows = report(spark, _opts(c, kafka, topic))
    assert [r["topic"] for r in rows] == [topic, "total"]
    r = rows[0]
    assert (r["records"], r["value_bytes"], r["plain_records"], r["committed_txns"]) == (6, 13, 1, 2)
    assert (r["start_offset"], r["end_offset"]) == (0, 10)  # 6 records, 3 markers, 1 aborted: all read
    assert "total" in _table(rows)


def test_batch_report_lists_every_partition_read_with_its_range_and_counts_a_txn_once(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """A partition with nothing delivered (only aborted data, or held back by an open transaction)
    was missing, the range was the delivered offsets' (not the range read, which ends at
    maxReadPosition), and the total summed a transaction once per partition (Spark review)."""
    from spark.jobs.batch_report import _table, report

    c = cluster(tb_service_enabled=False)
    topic = f"br_{uid}"
    c.client.create_topic(topic, 4)
    producer = c.client.create_producer(topic)
    p = [f"{topic}-partition-{i}" for i in range(4)]
    parts = {i: c.client.create_producer(p[i]) for i in range(4)}
    parts[0].send("aa")
    with c.client.transaction(60) as txn:  # one transaction over partitions 0 and 1
        parts[0].send("bbb", txn=txn)
        parts[1].send("c", txn=txn)
    with c.client.transaction(60) as txn:
        parts[0].send("dd", txn=txn)
    aborted = c.client.transaction(60)
    parts[2].send("zz", txn=aborted)
    aborted.abort()
    held = c.client.transaction(60)
    parts[3].send("open", txn=held)
    parts[3].send("held-plain")
    try:
        rows = report(spark, _opts(c, kafka, topic))
    finally:
        held.abort()
    by_partition = {r["partition"]: r for r in rows if r["topic"] == topic}
    assert sorted(by_partition) == [0, 1, 2, 3]
    assert [(by_partition[i]["start_offset"], by_partition[i]["end_offset"]) for i in range(4)] == [
        (0, 5),
        (0, 2),
        (0, 2),
        (0, 0),
    ]
    assert [by_partition[i]["records"] for i in range(4)] == [3, 1, 0, 0]
    total = rows[-1]
    assert total["topic"] == "total" and (total["records"], total["committed_txns"]) == (4, 2)
    assert "total" in _table(rows)
    del producer


# ---------------------------------------------------------------------------------------------- streaming
Delivered = dict[int, list[tuple[int, int, str]]]  # batch id -> (partition, offset, value)


def _stream(
    spark: Any, opts: dict[str, str], checkpoint: Path, trigger: dict[str, Any], results: Delivered
) -> Any:
    """Start a query whose foreachBatch sink is idempotent per batch id (as a real exactly-once sink);
    a batch Spark runs again after a restart must carry exactly the same records."""

    def sink(df: Any, batch_id: int) -> None:
        rows = sorted((r.partition, r.offset, r.value.decode()) for r in df.collect())
        if batch_id in results:
            assert results[batch_id] == rows, f"batch {batch_id} replayed with different records"
        results[batch_id] = rows

    return (
        spark.readStream.format("pulsar_txn")
        .options(**opts)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def _flatten(results: Delivered) -> list[tuple[int, int, str]]:
    return [row for batch in sorted(results) for row in results[batch]]


def _assert_exactly_once_in_order(results: Delivered, expected: set[str]) -> None:
    rows = _flatten(results)
    values = [v for _, _, v in rows]
    assert len(values) == len(set(values)), "a record was delivered twice"
    assert set(values) == expected
    for p in {p for p, _, _ in rows}:
        offsets = [o for q, o, _ in rows if q == p]
        assert offsets == sorted(offsets), f"partition {p} delivered out of order"


class _Writer(threading.Thread):
    """A bounded producer loop: transactions of 3 (every 3rd aborted) and a plain message each round."""

    def __init__(self, c: Cluster, topic: str, rounds: int, pause: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.c, self.topic, self.rounds, self.pause = c, topic, rounds, pause
        self.expected: set[str] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = self.c.client.create_producer(self.topic)
            for i in range(self.rounds):
                txn = self.c.client.transaction(60)
                values = [f"t{i}-{j}" for j in range(3)]
                for v in values:
                    producer.send(v, txn=txn)
                if i % 3 == 2:
                    txn.abort()
                else:
                    txn.commit()
                    self.expected.update(values)
                producer.send(f"plain{i}")
                self.expected.add(f"plain{i}")
                time.sleep(self.pause)
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def finish(self) -> set[str]:
        self.join(120)
        assert not self.is_alive(), "writer did not finish"
        if self.error is not None:
            raise self.error
        return self.expected


def test_stream_available_now_delivers_each_committed_record_once_across_restarts(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str, tmp_path: Path
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"sa_{uid}"
    c.client.create_topic(topic, 2)
    opts = _opts(c, kafka, topic, startingOffsets="earliest", maxOffsetsPerTrigger="20")
    writer = _Writer(c, topic, rounds=15)
    writer.start()
    results: Delivered = {}
    for _ in range(2):  # runs (each a restart from the checkpoint) while transactions commit and abort
        q = _stream(spark, opts, tmp_path / "ckpt", {"availableNow": True}, results)
        assert q.awaitTermination(120)
    expected = writer.finish()
    q = _stream(spark, opts, tmp_path / "ckpt", {"availableNow": True}, results)
    assert q.awaitTermination(120)
    _assert_exactly_once_in_order(results, expected)
    assert all(len(rows) <= 20 for rows in results.values()), "maxOffsetsPerTrigger not honoured"


def test_stream_processing_time_delivers_each_committed_record_once_across_stop_and_restart(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str, tmp_path: Path
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"sp_{uid}"
    c.client.create_topic(topic, 2)
    opts = _opts(c, kafka, topic, startingOffsets="earliest")
    writer = _Writer(c, topic, rounds=15)
    writer.start()
    results: Delivered = {}
    trigger = {"processingTime": "300 milliseconds"}
    q = _stream(spark, opts, tmp_path / "ckpt", trigger, results)
    try:
        wait_until(lambda: len(_flatten(results)) >= 10, timeout=90, what="first records")
    finally:
        q.stop()
    q = _stream(spark, opts, tmp_path / "ckpt", trigger, results)
    try:
        expected = writer.finish()
        wait_until(lambda: len(_flatten(results)) >= len(expected), timeout=90, what="all records")
        time.sleep(1)  # a few more (empty) batches: nothing extra may arrive
    finally:
        q.stop()
    _assert_exactly_once_in_order(results, expected)


def test_stream_is_held_at_an_open_transaction_and_continues_after_it_ends(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str, tmp_path: Path
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"so_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    opts = _opts(c, kafka, topic, startingOffsets="earliest")
    results: Delivered = {}

    def run_once() -> list[str]:
        q = _stream(spark, opts, tmp_path / "ckpt", {"availableNow": True}, results)
        assert q.awaitTermination(120)
        return [v for _, _, v in _flatten(results)]

    for i in range(3):
        producer.send(f"a{i}")
    held = c.client.transaction(60)
    for i in range(3):
        producer.send(f"t{i}", txn=held)
    for i in range(3):
        producer.send(f"b{i}")
    assert run_once() == ["a0", "a1", "a2"]
    assert run_once() == ["a0", "a1", "a2"]  # still held: nothing past the open txn's first message
    held.commit()
    aborted = c.client.transaction(60)
    producer.send("x", txn=aborted)
    producer.send("c0")
    aborted.abort()
    assert run_once() == ["a0", "a1", "a2", "t0", "t1", "t2", "b0", "b1", "b2", "c0"]


def test_batch_report_reads_the_partitions_it_planned_when_one_appears_meanwhile(
    spark: Any, cluster: ClusterFactory, kafka: KafkaConfig, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report reads the planned ranges as offsets JSON, which must name every partition read: a
    partition added between planning and reading failed it with a ConfigError about a JSON the job
    made itself (review). It now reads the planned partitions by name."""
    import spark.jobs.batch_report as batch_report
    from kafka_store import TopicAdmin

    c = cluster(tb_service_enabled=False)
    topic = f"brgrow_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send("a")
    planned = batch_report.planned_ranges

    def planned_then_grown(options: dict[str, str]) -> dict[tuple[str, int], tuple[int, int]]:
        ranges = planned(options)
        TopicAdmin(kafka).add_partitions(topic, 2)
        return ranges

    monkeypatch.setattr(batch_report, "planned_ranges", planned_then_grown)
    rows = batch_report.report(spark, _opts(c, kafka, topic))
    assert [(r["topic"], r["partition"], r["records"]) for r in rows] == [(topic, 0, 1), ("total", None, 1)]
