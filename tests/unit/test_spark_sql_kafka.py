"""What the spark-sql-kafka helper generates (pure)."""

from __future__ import annotations

import json

from pulsar_txn.txnid import TxnID
from spark._options import parse_options
from spark._plan import RangePartition
from spark.sql_kafka import filter_sql, plan_from_ranges

OPTS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False)


def _range(topic: str, partition: int, start: int, end: int, aborted=(), discarded=()) -> RangePartition:  # type: ignore[no-untyped-def]
    return RangePartition(OPTS, topic, partition, start, end, list(aborted), [list(d) for d in discarded])


def test_offsets_end_at_max_read_position_and_every_partition_is_assigned() -> None:
    plan = plan_from_ranges([_range("t", 0, 3, 10), _range("t", 1, 0, 0), _range("u", 0, 5, 6)])
    assert json.loads(plan.assign) == {"t": [0, 1], "u": [0]}
    assert json.loads(plan.starting_offsets) == {"t": {"0": 3, "1": 0}, "u": {"0": 5}}
    assert json.loads(plan.ending_offsets) == {"t": {"0": 10, "1": 0}, "u": {"0": 6}}
    assert plan.kafka_options()["includeHeaders"] == "true"
    # Kafka's own aborted transactions are dropped by Kafka (interop review, session 42: the Java
    # client's default read_uncommitted passed them through, and they carry no header of ours).
    assert plan.kafka_options()["kafka.isolation.level"] == "read_committed"


def test_filter_always_drops_control_records_and_corrupt_txn_headers() -> None:
    sql = filter_sql([_range("t", 0, 0, 10)])
    assert sql == (
        "NOT coalesce(exists(headers, h -> h.key = 'ptxn.ctl'), false) AND "
        "NOT coalesce(exists(headers, h -> h.key = 'ptxn.txn' AND "
        "(h.value IS NULL OR length(h.value) <> 16)), false)"
    )


def test_filter_drops_aborted_txns_and_discarded_ranges_per_partition() -> None:
    aborted = TxnID(1, 7).to_bytes()
    sql = filter_sql([_range("t", 0, 0, 10, [aborted], [(3, 4)]), _range("it's", 2, 0, 10)])
    hexed = aborted.hex()
    assert hexed == "0000000000000001" + "0000000000000007"
    assert (
        "NOT ((topic = 't' AND partition = 0 AND ("
        f"coalesce(exists(headers, h -> h.key = 'ptxn.txn' AND h.value IN (X'{hexed}')), false) OR "
        "(offset BETWEEN 3 AND 4))))"
    ) in sql
    assert "it\\'s" not in sql  # partitions with nothing to drop add no clause
