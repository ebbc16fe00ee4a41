"""Planning reads at the edges: a partition added while a stream runs, topics or partitions named
twice, and storage errors of an ``assign`` read as the same typed errors as a ``subscribe`` one."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_store import Appender, KafkaConfig, PartitionReader, StoreError, TopicAdmin
from pulsar_txn.errors import ConfigError, ConnectError
from tests.conftest import Cluster, create_again_behind_an_open_txn, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _opts(c: Cluster, kafka: KafkaConfig, **extra: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "snapshotTopic": c.config.snapshot_topic,
        "numTcs": str(c.config.num_tcs),
        "logTopic": c.config.log_topic,
        **extra,
    }


def test_watermarks_of_a_partition_added_after_the_readers_metadata(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"grown_{uid}"
    admin.ensure_topic(topic, 1)
    reader = PartitionReader(kafka)
    try:
        assert reader.watermarks(topic, 0) == (0, 0)  # the reader's metadata knows one partition
        admin.add_partitions(topic, 2)
        app = Appender(kafka)
        try:
            app.append(topic, 1, b"b").result(10)
        finally:
            app.close()
        assert reader.watermarks(topic, 1) == (0, 1)
    finally:
        reader.close()


def test_a_stream_plans_a_partition_added_while_it_runs(
    cluster: ClusterFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark._options import parse_options
    from spark.source import PulsarTxnStreamReader

    c = cluster(tb_service_enabled=False)
    topic = f"grows_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send("a")
    opts = parse_options(_opts(c, kafka, subscribe=topic, startingOffsets="earliest"), streaming=True)
    reader = PulsarTxnStreamReader(opts)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {topic: {"0": 1}}
        admin.add_partitions(topic, 2)
        app = Appender(kafka)
        try:
            app.append(topic, 1, b"b").result(10)
        finally:
            app.close()
        later = reader.latestOffset(end, ReadAllAvailable())
        assert later == {topic: {"0": 1, "1": 1}}
        parts: list[Any] = list(reader.partitions(end, later))
        assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [(topic, 1, 0, 1)]
    finally:
        reader.stop()


@pytest.mark.parametrize("how", ["subscribe", "assign"])
def test_a_topic_or_partition_named_twice_is_read_once(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, how: str
) -> None:
    from spark._options import parse_options
    from spark.source import PulsarTxnBatchReader

    c = cluster(tb_service_enabled=False)
    topic = f"twice_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(4):  # round robin: two records in each partition
        producer.send(f"m{i}")
    named = {"subscribe": f"{topic}, {topic}"} if how == "subscribe" else {"assign": f'{{"{topic}":[1,0,1]}}'}
    opts = parse_options(_opts(c, kafka, **named), streaming=False)
    parts: list[Any] = list(PulsarTxnBatchReader(opts).partitions())
    ranges = sorted((p.topic, p.partition, p.start, p.end) for p in parts)
    assert ranges == [(topic, 0, 0, 2), (topic, 1, 0, 2)]


def test_an_assign_read_with_a_bad_kafka_option_or_a_dead_broker_raises_typed_errors(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    from spark._options import parse_options
    from spark.source import PulsarTxnBatchReader

    c = cluster(tb_service_enabled=False)
    topic = f"assign_err_{uid}"
    c.client.create_topic(topic, 1)
    assign = f'{{"{topic}":[0]}}'
    bad_option = {"kafka.security.protocol": "SASL_SSLX"}
    bad = parse_options(_opts(c, kafka, assign=assign, **bad_option), streaming=False)
    with pytest.raises(ConfigError, match="kafka"):
        PulsarTxnBatchReader(bad).partitions()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    dead_options = {"kafka.bootstrap.servers": dead, "kafka.socket.timeout.ms": "2000"}
    gone = parse_options({**_opts(c, kafka, assign=assign), **dead_options}, streaming=False)
    with pytest.raises(ConnectError):
        PulsarTxnBatchReader(gone).partitions()


def test_an_ending_offset_below_the_starting_offset_is_a_config_error(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """As Spark's Kafka source ("beginning offset is after the ending offset"): an explicit range
    that runs backwards is a mistake to report, not an empty read. An end capped below the start
    by an open transaction (maxReadPosition) still reads nothing, without an error."""
    from spark._options import parse_options
    from spark.source import PulsarTxnBatchReader
    from spark.sql_kafka import committed_read

    c = cluster(tb_service_enabled=False)
    topic = f"backwards_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(6):
        producer.send(f"m{i}")
    backwards = _opts(
        c,
        kafka,
        subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":4}}}}',
        endingOffsets=f'{{"{topic}":{{"0":2}}}}',
    )
    with pytest.raises(ConfigError, match="below the starting offset 4"):
        PulsarTxnBatchReader(parse_options(backwards, streaming=False)).partitions()
    with pytest.raises(ConfigError, match="below the starting offset 4"):
        committed_read(backwards)

    txn = c.client.transaction(60)
    producer.send("open", txn=txn)  # pins maxReadPosition at 6
    producer.send("after")
    producer.flush()
    past_limit = {**backwards, "startingOffsets": f'{{"{topic}":{{"0":7}}}}', "endingOffsets": "latest"}
    assert json.loads(committed_read(past_limit).ending_offsets) == {topic: {"0": 6}}
    parts = PulsarTxnBatchReader(parse_options(past_limit, streaming=False)).partitions()
    assert [p.end - p.start for p in parts] == [0]  # type: ignore[attr-defined]
    txn.abort()


def test_a_planner_learns_the_tc_count_once_the_transaction_log_exists(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """A stream started before the coordinator made its log folds with an unknown TC count (every
    TxnID real). Once the log exists, the planner folds as the TB service does: a record naming a TC
    beyond the count is discarded, and no longer holds maxReadPosition back for good."""
    from pulsar_txn.buffer.marker import TXN_HEADER
    from pulsar_txn.txnid import TxnID
    from spark._options import parse_options
    from spark._plan import Planner

    topic, log_topic = f"early_{uid}", f"txnlog_{uid}"
    admin.ensure_topic(topic, 1)
    app = Appender(kafka)
    try:
        app.append(topic, 0, b"stray", headers=[(TXN_HEADER, TxnID(7, 1).to_bytes())]).result(10)
        app.append(topic, 0, b"plain").result(10)
    finally:
        app.close()
    opts = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic, "logTopic": log_topic}
    planner = Planner(parse_options(opts, streaming=True))
    try:
        tps = planner.partitions()
        assert planner.bounds(tps)[(topic, 0)].limit == 0  # TC 7 might exist: its txn is open
        admin.ensure_topic(log_topic, 2)  # the coordinator starts: two TCs
        assert planner.bounds(tps)[(topic, 0)].limit == 2
    finally:
        planner.close()


def test_subscribe_pattern_leaves_out_pending_ack_logs(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """A pattern matching a topic also matched its subscriptions' pending-ack logs
    (``<topic>-<sub>__transaction_pending_ack``): a job read ack records as rows (review, session
    32). As the client's pattern subscribe, they are never data."""
    from spark._options import parse_options
    from spark._plan import resolve_partitions

    c = cluster(tb_service_enabled=False)
    topic = f"pat_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    consumer = c.client.subscribe(topic, "sub", initial_position="Earliest")
    producer.send(b"x")
    txn = c.client.transaction(30)
    consumer.acknowledge(consumer.receive(10_000), txn=txn)  # creates the pending-ack log
    txn.commit()
    consumer.close()
    assert any(
        t.endswith("__transaction_pending_ack") and t.startswith(topic)
        for t in TopicAdmin(kafka).list_topics()
    )
    opts = parse_options(_opts(c, kafka, subscribePattern=f"pat_{uid}.*"), streaming=False)
    assert resolve_partitions(opts, c.client.kafka) == [(topic, 0), (topic, 1)]


@pytest.mark.parametrize("fail_on_data_loss", ["false", "true"])
def test_a_stream_goes_on_when_retention_deleted_an_unread_commit_marker(
    cluster: ClusterFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str, fail_on_data_loss: str
) -> None:
    """The stream planned while T was open (maxReadPosition 0); T then committed and retention
    deleted offsets 0..2, the marker among them, before the next plan. The planner's cached state
    kept T open and the stream stalled at 0 for ever (review, session 32). Now the next plan reads
    on from the log start (or, with failOnDataLoss=true, reports the deleted offsets)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.errors import DataLossError
    from spark._options import parse_options
    from spark.source import PulsarTxnStreamReader

    c = cluster(tb_service_enabled=False)
    topic = f"gone_marker_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(30)
    producer.send(b"t0", txn=txn)  # offset 0
    producer.send(b"p1")  # offset 1
    opts = parse_options(
        _opts(c, kafka, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail_on_data_loss),
        streaming=True,
    )
    reader = PulsarTxnStreamReader(opts)
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadAllAvailable())
        assert first == {topic: {"0": 0}}  # held at the open transaction
        txn.commit()  # marker at 2
        producer.send(b"p3")  # offset 3
        admin.delete_records_before(topic, 0, 3).result(10)
        if fail_on_data_loss == "true":
            with pytest.raises(DataLossError):
                later = reader.latestOffset(first, ReadAllAvailable())
                reader.partitions(first, later)
            return
        later = reader.latestOffset(first, ReadAllAvailable())
        assert later == {topic: {"0": 4}}
        parts: list[Any] = list(reader.partitions(first, later))
        assert [(p.start, p.end) for p in parts] == [(3, 4)]
    finally:
        reader.stop()


def test_a_stream_stays_held_by_an_open_transaction_whose_first_message_retention_deleted(
    cluster: ClusterFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """T is open with its first message at 0; plain 1..3 follow; retention deletes 0..1. T is still
    open at its TC, so the stream must not pass it: plain 2 and 3 wait for T's end, as for a reader
    that folded every record (review, session 33). Once T commits, the stream goes on."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark._options import parse_options
    from spark.source import PulsarTxnStreamReader

    c = cluster(tb_service_enabled=False)
    topic = f"open_below_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send(b"t0", txn=txn)
    for i in (1, 2, 3):
        producer.send(f"p{i}".encode())
    opts = parse_options(
        _opts(c, kafka, subscribe=topic, startingOffsets="earliest", failOnDataLoss="false"), streaming=True
    )
    reader = PulsarTxnStreamReader(opts)
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadAllAvailable())
        assert first == {topic: {"0": 0}}
        admin.delete_records_before(topic, 0, 2).result(10)
        assert reader.latestOffset(first, ReadAllAvailable()) == first  # the TC lookup: T is open
        producer.send(b"t4", txn=txn)
        txn.commit()  # marker at 5
        later = reader.latestOffset(first, ReadAllAvailable())
        assert later == {topic: {"0": 6}}
        parts: list[Any] = list(reader.partitions(first, later))
        assert [(p.start, p.end) for p in parts] == [(2, 6)]
    finally:
        reader.stop()


def test_a_rate_limited_stream_starts_a_new_partition_at_its_log_start(
    cluster: ClusterFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """A partition that appears while a stream runs, its head already deleted by retention: under
    maxOffsetsPerTrigger it begins at its log start. Counted from 0, the deleted offsets took its
    share and the next micro-batch began below the log start: a false DataLossError."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from spark._options import parse_options
    from spark.source import PulsarTxnStreamReader

    c = cluster(tb_service_enabled=False)
    topic = f"newhead_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send(b"a")
    opts = parse_options(
        _opts(c, kafka, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="10"),
        streaming=True,
    )
    reader = PulsarTxnStreamReader(opts)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(10))
        reader.partitions(start, end)
        admin.add_partitions(topic, 2)
        app = Appender(kafka)
        try:
            for fut in [app.append(topic, 1, b"b%d" % i) for i in range(100)]:
                fut.result(10)
        finally:
            app.close()
        fresh = TopicAdmin(kafka)  # its metadata knows the new partition's leader
        wait_until(lambda: _deleted_below(fresh, topic, 1, 95), timeout=20, what="DeleteRecords")
        read: list[tuple[int, int]] = []
        for _ in range(3):
            start, end = end, reader.latestOffset(end, ReadMaxRows(10))
            read += [(p.start, p.end) for p in reader.partitions(start, end) if p.partition == 1]
        assert read == [(95, 100)]
        assert json.loads(json.dumps(end))[topic]["1"] == 100
    finally:
        reader.stop()


def _deleted_below(admin: TopicAdmin, topic: str, partition: int, offset: int) -> bool:
    """One DeleteRecords try (a partition just added may not have a known leader yet)."""
    try:
        admin.delete_records_before(topic, partition, offset).result(10)
    except StoreError:
        return False
    return True


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_stream_over_a_topic_created_again_never_passes_its_open_transaction(
    cluster: ClusterFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str, fail_on_data_loss: str
) -> None:
    """The topic a stream reads is deleted and created again; the new partition opens with an open
    transaction's message, then plain ones. The stream's kept TB state (scanned past the new
    records) must not be scanned on as if nothing happened: it released the plain messages behind
    the open transaction. With failOnDataLoss the query fails; without, nothing past the open
    transaction is read."""

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.errors import DataLossError
    from spark._options import parse_options
    from spark._read import read_partition
    from spark.source import PulsarTxnStreamReader

    c = cluster(tb_service_enabled=False)
    topic = f"again_{fail_on_data_loss[0]}_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(5):
        producer.send(b"old%d" % i)
    producer.close()
    opts = parse_options(
        _opts(c, kafka, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail_on_data_loss),
        streaming=True,
    )
    reader = PulsarTxnStreamReader(opts)

    def rows(start: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
        return [
            v
            for p in reader.partitions(start, end)
            for b in read_partition(p)
            for v in b.column("value").to_pylist()
        ]

    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert rows(start, end) == [b"old%d" % i for i in range(5)]
        txn = create_again_behind_an_open_txn(c, topic)
        if fail_on_data_loss == "true":
            with pytest.raises(DataLossError):
                reader.latestOffset(end, ReadAllAvailable())
        else:
            later = reader.latestOffset(end, ReadAllAvailable())
            assert rows(end, later) == []
        txn.abort()
    finally:
        reader.stop()


def _stream_rows(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
    from spark._read import read_partition

    return [
        v
        for p in reader.partitions(start, end)
        for b in read_partition(p)
        for v in b.column("value").to_pylist()
    ]


def _stream_reader(c: Cluster, kafka: KafkaConfig, topic: str, fail_on_data_loss: str) -> Any:
    from spark._options import parse_options
    from spark.source import PulsarTxnStreamReader

    opts = _opts(c, kafka, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail_on_data_loss)
    return PulsarTxnStreamReader(parse_options(opts, streaming=True))


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_batch_planned_again_after_the_topic_was_created_again_never_passes_its_open_transaction(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, fail_on_data_loss: str
) -> None:
    """A micro-batch planned ([0,10)), then the query stops before committing it; the topic is
    created again, opening with an open transaction's message. Spark plans the batch again after the
    restart with the logged offsets: a planner with no kept state must check them against the
    partition's maxReadPosition now, not read the open transaction and what it holds back (review)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.errors import DataLossError

    c = cluster(tb_service_enabled=False)
    topic = f"replay_{fail_on_data_loss[0]}_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(10):
        producer.send(b"old%d" % i)
    producer.close()
    first = _stream_reader(c, kafka, topic, fail_on_data_loss)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadAllAvailable())
    first.stop()
    txn = create_again_behind_an_open_txn(c, topic)
    again = _stream_reader(c, kafka, topic, fail_on_data_loss)
    try:
        if fail_on_data_loss == "true":
            with pytest.raises(DataLossError, match="created again"):
                again.partitions(start, end)
        else:
            assert _stream_rows(again, start, end) == []
    finally:
        again.stop()
        txn.abort()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_restart_after_the_topic_came_back_shorter_reports_the_offsets_that_went_back(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, fail_on_data_loss: str
) -> None:
    """A query read to offset 10; the topic was created again with 3 records. As Spark's Kafka source
    ("offset was changed from 10 to 3"): a DataLossError, or without failOnDataLoss the stream goes on
    from the new partition's start, so all of its records are read (before: nothing was reported and
    the new partition's records below 10 were skipped)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pulsar_txn.errors import DataLossError

    c = cluster(tb_service_enabled=False)
    topic = f"shorter_{fail_on_data_loss[0]}_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(10):
        producer.send(b"old%d" % i)
    producer.close()
    first = _stream_reader(c, kafka, topic, fail_on_data_loss)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadAllAvailable())
    assert len(_stream_rows(first, start, end)) == 10
    first.stop()
    c.client.delete_topic(topic)
    time.sleep(1)
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(3):
        producer.send(b"new%d" % i)
    again = _stream_reader(c, kafka, topic, fail_on_data_loss)
    try:
        if fail_on_data_loss == "true":
            with pytest.raises(DataLossError, match="below the query's offset 10"):
                again.latestOffset(end, ReadAllAvailable())
            return
        back = again.latestOffset(end, ReadAllAvailable())
        assert _stream_rows(again, end, back) == []
        for i in range(3, 5):
            producer.send(b"new%d" % i)
        later = again.latestOffset(back, ReadAllAvailable())
        assert _stream_rows(again, back, later) == [b"new%d" % i for i in range(5)]
    finally:
        again.stop()


def _latest_reader(c: Cluster, kafka: KafkaConfig, topic: str) -> Any:
    from spark._options import parse_options
    from spark.source import PulsarTxnStreamReader

    return PulsarTxnStreamReader(parse_options(_opts(c, kafka, subscribe=topic), streaming=True))


@pytest.mark.parametrize("restart", [False, True])
def test_a_latest_streams_first_batch_loses_nothing_when_spark_asks_its_start_again(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, restart: bool
) -> None:
    """Spark keeps no start for batch 0: it asks initialOffset() when it plans batch 0, again when
    it runs it, and again after a restart before batch 0 was committed. ``latest`` resolved anew
    each time, so the messages written between the first ask and batch 0's end were never read
    (a Spark review of session 43). Planning calls as Spark makes them; failed before."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    c = cluster(tb_service_enabled=False)
    topic = f"latest0_{int(restart)}_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send(b"before")
    reader = _latest_reader(c, kafka, topic)
    try:
        first = reader.initialOffset()  # planning batch 0
        producer.send(b"a")
        end0 = reader.latestOffset(first, ReadAllAvailable())  # batch 0's end, in the offset log
        producer.send(b"b")
        if restart:  # the query stopped before committing batch 0: a new driver-side reader
            reader.stop()
            reader = _latest_reader(c, kafka, topic)
        rows = _stream_rows(reader, reader.initialOffset(), end0)  # running batch 0
        producer.send(b"c")
        end1 = reader.latestOffset(end0, ReadAllAvailable())
        rows += _stream_rows(reader, end0, end1)
    finally:
        reader.stop()
    assert rows == [b"a", b"b", b"c"]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_range_read_after_the_topic_was_created_again_since_planning_reads_none_of_the_new_one(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, fail_on_data_loss: str
) -> None:
    """The driver planned [0,10); the topic was then deleted and created again, an open
    transaction's message at its offset 0, before the task read the range: the task read the new
    partition with the old one's facts and returned the open transaction's message and what it
    holds back (Spark batch review of session 43). Failed before."""
    from pulsar_txn.errors import DataLossError
    from spark._options import parse_options
    from spark._read import read_partition
    from spark.source import PulsarTxnBatchReader

    c = cluster(tb_service_enabled=False)
    topic = f"replaced_{fail_on_data_loss[0]}_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(10):
        producer.send(b"old%d" % i)
    producer.close()
    opts = _opts(c, kafka, subscribe=topic, failOnDataLoss=fail_on_data_loss)
    (planned,) = PulsarTxnBatchReader(parse_options(opts, streaming=False)).partitions()
    txn = create_again_behind_an_open_txn(c, topic)
    try:
        if fail_on_data_loss == "true":
            with pytest.raises(DataLossError, match="created again"):
                list(read_partition(planned))
        else:
            assert [v for b in read_partition(planned) for v in b.column("value").to_pylist()] == []
    finally:
        txn.abort()
