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
    tail = _batch(spark, {**opts, "startingOffsets": f'{{"{topic}":{{"0":{part0[2].offset}}}}}'})
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
    from spark._options import parse_options

    with pytest.raises(ConfigError, match="subscribe"):
        parse_options({"kafka.bootstrap.servers": kafka.bootstrap_servers}, streaming=False)
    # Through Spark, the typed error's message reaches the user.
    with pytest.raises(PySparkException, match="startingOffsets cannot be latest"):
        _batch(
            spark,
            {
                "kafka.bootstrap.servers": kafka.bootstrap_servers,
                "subscribe": f"nope_{uid}",
                "startingOffsets": "latest",
            },
        )
