"""Transactional Spark writes (issue 6) on a real local Spark against the real broker: one transaction
per write, exactly once per (query id, batch id) across failed and killed batches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_store import KafkaConfig, read_range
from pulsar_txn.buffer.marker import CTL_HEADER, TXN_HEADER
from pulsar_txn.buffer.reader import load_state
from pulsar_txn.errors import IncompatibleSchema, TopicNotFound, TransactionHasOperationFailed
from pulsar_txn.txnid import TxnID
from spark._write_progress import SPARK_BATCH_COMMIT, encode_batch_commit, progress_partition
from spark.writer import close_clients, transactional_foreach_batch, write_transactional
from tests.conftest import REPO, Cluster, read_all

pytestmark = [
    pytest.mark.integration,
    # PySpark 4 warns on pandas 3 when a Python UDF is planned; the UDFs here use no pandas.
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

ClusterFactory = Callable[..., Cluster]


@pytest.fixture
def c(cluster: ClusterFactory) -> Iterator[Cluster]:
    yield cluster()
    close_clients()  # the driver's cached client of this test's coordinator


def settings(c: Cluster, uid: str) -> dict[str, Any]:
    assert c.coordinator.url is not None
    return {
        "service_url": c.coordinator.url,
        "bootstrap_servers": c.client.kafka.bootstrap_servers,
        "num_tcs": c.config.num_tcs,
        "progress_topic": f"progress_{uid}",
        "txn_timeout_seconds": 60,
    }


def committed(c: Cluster, topic: str) -> list[Any]:
    reader = c.client.create_reader(topic)
    try:
        return read_all(reader, 1500)
    finally:
        reader.close()


def raw_txn_records(kafka: KafkaConfig, topic: str, partitions: int) -> list[TxnID]:
    """TxnIDs of every transactional data record stored, visible or not (markers excluded)."""
    out = []
    for p in range(partitions):
        for rec in read_range(kafka, topic, p):
            raw = rec.header(TXN_HEADER)
            if raw is not None and rec.header(CTL_HEADER) is None:
                out.append(TxnID.from_bytes(raw))
    return out


def rows_df(spark: Any, n: int, partitions: int | None = 2, pad: int = 0) -> Any:
    data = [(f"k{i % 5}", f"v{i}" + ":" * bool(pad) + "x" * pad, [("n", str(i).encode())]) for i in range(n)]
    df = spark.createDataFrame(
        data, "key string, value string, headers array<struct<key:string,value:binary>>"
    )
    return df if partitions is None else df.repartition(partitions)


# ---------------------------------------------------------------------------------------- batch
def test_a_dataframe_is_written_in_one_committed_transaction(
    c: Cluster, spark_session: Any, uid: str
) -> None:
    topic = f"sw_batch_{uid}"
    c.client.create_topic(topic, 3)
    result = write_transactional(rows_df(spark_session, 200, 4), topic=topic, **settings(c, uid))
    msgs = committed(c, topic)
    assert sorted(m.data.decode() for m in msgs) == sorted(f"v{i}" for i in range(200))
    assert {m.txn_id for m in msgs} == {result.txn_id} and not result.skipped
    by_value = {m.data.decode(): m for m in msgs}
    assert by_value["v7"].partition_key == "k2" and by_value["v7"].properties == {"n": "7"}
    # Same key, same partition: the key chooses the partition when no partition column is given.
    assert len({(m.partition_key, m.message_id.partition) for m in msgs}) == 5


def test_topic_and_partition_columns_route_each_row(c: Cluster, spark_session: Any, uid: str) -> None:
    a, b = f"sw_route_a_{uid}", f"sw_route_b_{uid}"
    c.client.create_topic(a, 2)
    c.client.create_topic(b, 1)
    df = spark_session.createDataFrame(
        [(a, 1, "x"), (b, None, "y"), (a, 0, "z")], "topic string, partition int, value string"
    )
    write_transactional(df, **settings(c, uid))
    assert sorted((m.message_id.partition, m.data) for m in committed(c, a)) == [(0, b"z"), (1, b"x")]
    assert [m.data for m in committed(c, b)] == [b"y"]


def test_bad_input_is_a_typed_error_and_leaves_nothing_visible(
    c: Cluster, spark_session: Any, uid: str
) -> None:
    topic = f"sw_bad_{uid}"
    c.client.create_topic(topic, 1)
    with pytest.raises(IncompatibleSchema, match="'value' column"):
        write_transactional(spark_session.range(3), topic=topic, **settings(c, uid))
    with pytest.raises(TopicNotFound):
        write_transactional(rows_df(spark_session, 3), topic=f"missing_{uid}", **settings(c, uid))
    # A bad row is only seen by a task: the transaction is aborted and the task's error type kept.
    df = spark_session.createDataFrame([("a",), (None,)], "value string").coalesce(1)
    with pytest.raises(IncompatibleSchema, match="null value"):
        write_transactional(df, topic=topic, **settings(c, uid))
    assert committed(c, topic) == []


# ---------------------------------------------------------------------------------- idempotency
def test_a_replayed_batch_of_a_query_is_skipped_and_later_batches_are_written(
    c: Cluster, spark_session: Any, uid: str
) -> None:
    topic = f"sw_idem_{uid}"
    c.client.create_topic(topic, 2)
    s = settings(c, uid)
    first = write_transactional(rows_df(spark_session, 50), topic=topic, query_id="q", batch_id=0, **s)
    again = write_transactional(rows_df(spark_session, 50), topic=topic, query_id="q", batch_id=0, **s)
    other_query = write_transactional(rows_df(spark_session, 1), topic=topic, query_id="q2", batch_id=0, **s)
    nxt = write_transactional(rows_df(spark_session, 10), topic=topic, query_id="q", batch_id=1, **s)
    assert not first.skipped and again.skipped and again.txn_id is None
    assert not other_query.skipped and not nxt.skipped
    counts = Counter(m.txn_id for m in committed(c, topic))
    assert counts == {first.txn_id: 50, other_query.txn_id: 1, nxt.txn_id: 10}


def test_a_replay_that_spells_the_topic_otherwise_is_still_skipped(
    c: Cluster, spark_session: Any, uid: str
) -> None:
    """The sink was the topic as typed: a job restarted with ``persistent://public/default/<t>`` for
    ``<t>`` wrote its replayed batch again (review, session 33). A batch recorded under the name as
    typed (writers before then) is found too."""
    topic = f"sw_spell_{uid}"
    c.client.create_topic(topic, 1)
    s = settings(c, uid)
    first = write_transactional(rows_df(spark_session, 5), topic=topic, query_id="q", batch_id=0, **s)
    full = f"persistent://public/default/{topic}"
    again = write_transactional(rows_df(spark_session, 5), topic=full, query_id="q", batch_id=0, **s)
    legacy = write_transactional(
        rows_df(spark_session, 5), topic=topic, query_id="q", batch_id=1, sink_id=topic, **s
    )  # recorded as a writer before session 33 did
    replayed = write_transactional(rows_df(spark_session, 5), topic=topic, query_id="q", batch_id=1, **s)
    assert not first.skipped and again.skipped and not legacy.skipped and replayed.skipped
    assert len(committed(c, topic)) == 10


def test_writers_of_one_micro_batch_to_two_topics_each_write_it_once(
    c: Cluster, spark_session: Any, uid: str
) -> None:
    # The usual foreachBatch fan-out: one (query, batch), two sinks. Before, the second writer found
    # the batch committed (by the first) and skipped it: topic b never got it.
    a, b = f"sw_fan_a_{uid}", f"sw_fan_b_{uid}"
    c.client.create_topic(a, 1)
    c.client.create_topic(b, 1)
    s = settings(c, uid)
    df = rows_df(spark_session, 5)
    results = [write_transactional(df, topic=t, query_id="fan", batch_id=0, **s) for t in (a, b)]
    assert [r.skipped for r in results] == [False, False]
    replays = [write_transactional(df, topic=t, query_id="fan", batch_id=0, **s) for t in (a, b)]
    assert [r.skipped for r in replays] == [True, True]
    assert (len(committed(c, a)), len(committed(c, b))) == (5, 5)


def test_a_batch_committed_by_a_writer_of_the_previous_record_version_is_skipped_by_every_sink(
    c: Cluster, spark_session: Any, uid: str
) -> None:
    topic = f"sw_v1_{uid}"
    c.client.create_topic(topic, 1)
    progress = f"progress_{uid}"
    c.client.create_topic(progress, 1)
    with c.client.transaction(60) as txn:  # a v1 record: no sink
        record = SPARK_BATCH_COMMIT.encode(
            {"query_id": "old", "batch_id": 3, "txn": txn.txn_id.to_bytes(), "written_at_ms": 0}, version=1
        )
        c.client.create_producer(f"{progress}-partition-0").send(record, txn=txn, partition_key="old")
    s = settings(c, uid)
    assert write_transactional(
        rows_df(spark_session, 2), topic=topic, query_id="old", batch_id=3, **s
    ).skipped
    assert not write_transactional(
        rows_df(spark_session, 2), topic=topic, query_id="old", batch_id=4, **s
    ).skipped


@pytest.mark.parametrize("how", ["where_false", "empty_rdd"])
def test_an_empty_dataframe_is_written_and_committed(
    c: Cluster, spark_session: Any, uid: str, how: str
) -> None:
    # Spark runs a job over no partitions as SUCCEEDED with no stages: the driver's re-run check
    # must not take that for "unknown" (every retry of such a batch failed the same way).
    topic = f"sw_empty_{uid}"
    c.client.create_topic(topic, 1)
    if how == "empty_rdd":
        schema = "key string, value string, headers array<struct<key:string,value:binary>>"
        df = spark_session.createDataFrame(spark_session.sparkContext.emptyRDD(), schema)
    else:  # a filter the optimizer proves empty
        df = spark_session.range(10).selectExpr("cast(id as string) as value").where("1 = 0")
    result = write_transactional(df, topic=topic, query_id=f"e-{how}", batch_id=0, **settings(c, uid))
    assert not result.skipped and result.txn_id is not None
    assert committed(c, topic) == []


def _left_over_attempt(c: Cluster, uid: str, topic: str, query_id: str, batch_id: int) -> TxnID:
    """What a driver killed mid-batch leaves: its batch record and part of the output, in a txn that
    is still open."""
    txn = c.client.transaction(120)
    progress = f"progress_{uid}"
    c.client.create_topic(progress, 1)
    part = progress_partition(query_id, 1)
    c.client.create_producer(f"{progress}-partition-{part}").send(
        encode_batch_commit(query_id, batch_id, txn.txn_id, sink=topic), txn=txn, partition_key=query_id
    )
    out = c.client.create_producer(topic)
    for i in range(7):
        out.send(f"partial-{i}", txn=txn)
    return txn.txn_id


def test_an_open_attempt_left_by_a_killed_driver_is_aborted_and_the_batch_written_once(
    c: Cluster, spark_session: Any, uid: str
) -> None:
    topic = f"sw_open_{uid}"
    c.client.create_topic(topic, 1)
    left_over = _left_over_attempt(c, uid, topic, "q", 0)
    assert committed(c, topic) == []  # the open txn pins the partition
    result = write_transactional(
        rows_df(spark_session, 20), topic=topic, query_id="q", batch_id=0, **settings(c, uid)
    )
    msgs = committed(c, topic)
    assert Counter(m.txn_id for m in msgs) == {result.txn_id: 20}
    state, _ = load_state(c.client.kafka, topic, 0)
    assert left_over in state.aborted


def test_an_attempt_that_committed_before_the_driver_died_makes_the_replay_a_no_op(
    c: Cluster, spark_session: Any, uid: str
) -> None:
    topic = f"sw_done_{uid}"
    c.client.create_topic(topic, 1)
    left_over = _left_over_attempt(c, uid, topic, "q", 3)
    c.client.resume_transaction(left_over).commit()
    result = write_transactional(
        rows_df(spark_session, 20), topic=topic, query_id="q", batch_id=3, **settings(c, uid)
    )
    assert result.skipped
    assert [m.data.decode() for m in committed(c, topic)] == [f"partial-{i}" for i in range(7)]


# ------------------------------------------------------------------------- killed batches (Spark)
def _failing_once(flag: Path, bad: str, kafka: KafkaConfig, topic: str, stored_over: int) -> Any:
    """A UDF that, while ``flag`` exists, raises on row ``bad`` once ``topic`` (2 partitions) holds
    more than ``stored_over`` records: the batch dies after part of its output was stored. (Rows are
    padded in the tests: Spark sends rows to the writer's Python worker in 64 KB buffers, so small
    rows would all still be in flight.)"""
    from pyspark.sql.functions import udf

    path, servers = str(flag), kafka.bootstrap_servers

    def check(value: str) -> str:
        if value.split(":")[0] == bad and os.path.exists(path):
            from kafka_store import KafkaConfig, end_offsets

            conf = KafkaConfig(bootstrap_servers=servers)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if sum(end_offsets(conf, [(topic, 0), (topic, 1)]).values()) > stored_over:
                    break
                time.sleep(0.1)
            raise RuntimeError("injected failure mid-batch")
        return value

    return udf(check, "string", useArrow=False)


def test_a_batch_failing_midway_is_aborted_and_its_replay_writes_each_row_once(
    c: Cluster, spark_session: Any, uid: str, tmp_path: Path
) -> None:
    topic = f"sw_fail_{uid}"
    c.client.create_topic(topic, 2)
    flag = tmp_path / "fail"
    flag.touch()
    # One partition in row order; the UDF fails on the last row, after the writer got most rows.
    check = _failing_once(flag, "v2999", c.client.kafka, topic, 0)
    df = rows_df(spark_session, 3000, None, pad=200).coalesce(1).select("key", check("value").alias("value"))
    with pytest.raises(TransactionHasOperationFailed, match="injected failure"):
        write_transactional(df, topic=topic, query_id="q", batch_id=0, **settings(c, uid))
    assert raw_txn_records(c.client.kafka, topic, 2)  # part of the batch was produced ...
    assert committed(c, topic) == []  # ... and is never visible
    flag.unlink()
    result = write_transactional(df, topic=topic, query_id="q", batch_id=0, **settings(c, uid))
    values = [m.data.decode().split(":")[0] for m in committed(c, topic)]
    assert sorted(values) == sorted(f"v{i}" for i in range(3000))
    assert {m.txn_id for m in committed(c, topic)} == {result.txn_id}


def test_foreach_batch_that_raises_midway_then_restarts_from_checkpoint_writes_each_row_once(
    c: Cluster, spark_session: Any, uid: str, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException
    from pyspark.sql.functions import col, concat, lit

    topic = f"sw_stream_{uid}"
    c.client.create_topic(topic, 2)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in range(3):
        path = inputs / f"{f}.json"
        path.write_text("".join(f'{{"n": {f * 300 + i}}}\n' for i in range(300)))
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # the file source goes by mtime
    flag = tmp_path / "fail"
    flag.touch()
    # Batch 0 (file 0) commits: 300 records + 2 markers; batch 1 dies on its last row after more.
    check = _failing_once(flag, "599", c.client.kafka, topic, 302)
    write = transactional_foreach_batch(topic=topic, **settings(c, uid))

    def run() -> Any:
        stream = (
            spark_session.readStream.schema("n long")
            .option("maxFilesPerTrigger", 1)
            .json(str(inputs))
            .select(check(concat(col("n").cast("string"), lit(":" + "x" * 1000))).alias("value"))
        )
        return (
            stream.writeStream.foreachBatch(write)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )

    with pytest.raises(StreamingQueryException, match="injected failure"):
        run().awaitTermination(120)
    assert len(raw_txn_records(c.client.kafka, topic, 2)) > 300  # batch 1 was partly stored
    assert len(committed(c, topic)) == 300  # but only batch 0 is visible
    flag.unlink()
    assert run().awaitTermination(120) is not False
    values = Counter(m.data.decode().split(":")[0] for m in committed(c, topic))
    assert values == Counter(str(i) for i in range(900))


# ---------------------------------------------------------------- SIGKILLed driver (subprocess)
def _run_job(args: list[str], log: Path, kill_at: str | None, timeout: float = 420) -> int:
    """Run the example job (optionally killing its own driver at ``kill_at``) in its own process
    group; whatever of the group outlives the driver (the JVM, Python workers) is killed with it."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    module = "spark.jobs.stream_aggregate"
    if kill_at is not None:
        env["PULSAR_TXN_KILL_AT"] = kill_at
        module = "tests.integration._stream_aggregate_killed"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        return proc.wait(timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(1500)  # three Spark driver starts: ~1 min on an idle machine, minutes on a busy one
def test_sigkilled_streaming_driver_restarted_from_checkpoint_writes_each_result_exactly_once(
    c: Cluster, uid: str, tmp_path: Path
) -> None:
    src, out = f"sw_agg_in_{uid}", f"sw_agg_out_{uid}"
    c.client.create_topic(src, 2)
    c.client.create_topic(out, 2)
    producer = c.client.create_producer(src)
    for t in range(6):
        with c.client.transaction(60) as txn:
            for i in range(100):
                producer.send_async(f"{t}-{i}", txn=txn, partition_key=f"k{i % 20}")
    aborted = c.client.transaction(60)
    for _ in range(50):
        producer.send_async("no", txn=aborted, partition_key="aborted")
    producer.flush()
    aborted.abort()
    s = settings(c, uid)
    args = [
        *("--service-url", s["service_url"], "--bootstrap-servers", s["bootstrap_servers"]),
        *("--input", src, "--output", out, "--checkpoint", str(tmp_path / "ckpt")),
        *("--num-tcs", str(c.config.num_tcs), "--snapshot-topic", c.config.snapshot_topic),
        *("--progress-topic", s["progress_topic"], "--max-offsets-per-trigger", "200", "--available-now"),
    ]
    log = tmp_path / "job.log"
    # 1: killed after every task produced batch 1 into its transaction, before the commit.
    assert _run_job(args, log, "tasks:1") == -signal.SIGKILL, log.read_text()[-3000:]
    state, _ = load_state(c.client.kafka, out, 0)
    state1, _ = load_state(c.client.kafka, out, 1)
    assert state.ongoing or state1.ongoing  # the killed batch's output is stored, in an open txn
    # 2: killed after batch 2 committed, before Spark recorded it: the replay must not write it again.
    assert _run_job(args, log, "commit:2") == -signal.SIGKILL, log.read_text()[-3000:]
    # 3: runs to the end.
    assert _run_job(args, log, None) == 0, log.read_text()[-3000:]

    results = [json.loads(m.data) for m in committed(c, out)]
    pairs = Counter((r["key"], r["batch"]) for r in results)
    assert max(pairs.values()) == 1, "a batch's result was written twice"
    final: dict[str, int] = {}
    for r in sorted(results, key=lambda r: r["batch"]):
        assert r["count"] > final.get(r["key"], 0)
        final[r["key"]] = r["count"]
    assert final == {f"k{k}": 30 for k in range(20)}
    assert {r["batch"] for r in results} >= {1, 2, 3}


def test_the_stream_job_takes_the_token_and_marker_secret_from_the_environment(
    spark_session: Any, kafka: KafkaConfig, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docker-compose hands the Spark service PULSAR_TXN_AUTH_TOKEN and PULSAR_TXN_MARKER_SECRET,
    but the bundled streaming job read neither: with token auth on it could not write, and with
    marker authentication its reader did not check markers."""
    from spark.jobs import stream_aggregate

    seen: dict[str, Any] = {}

    def capture(**kwargs: Any) -> Callable[[Any, int], None]:
        seen.update(kwargs)
        return lambda _df, _batch: None

    monkeypatch.setattr("spark.writer.transactional_foreach_batch", capture)
    loaded: dict[str, str] = {}
    real_options = type(spark_session.readStream).options

    def options(self: Any, **opts: str) -> Any:
        loaded.update(opts)
        return real_options(self, **opts)

    monkeypatch.setattr(type(spark_session.readStream), "options", options)
    monkeypatch.setenv("PULSAR_TXN_AUTH_TOKEN", "tok-123")
    monkeypatch.setenv("PULSAR_TXN_MARKER_SECRET", "mac-456")
    topic = f"envjob_{uid}"
    argv = ["--service-url", "pulsar://127.0.0.1:1", "--bootstrap-servers", kafka.bootstrap_servers]
    argv += ["--input", topic, "--output", f"{topic}_out", "--checkpoint", "/tmp/unused-ckpt"]
    args = stream_aggregate.parse_args(argv)
    stream_aggregate.build(spark_session, args)
    assert seen["authentication"] == "tok-123" and seen["marker_secret"] == "mac-456"
    assert loaded["markerSecret"] == "mac-456"
