"""Records anyone with write access to a topic can append by the thousand (forged or malformed
control records, data of unknown coordinators, junk in the coordinator's log, its owner directory or
a pending-ack log) are skipped and counted, and logged without flooding the log: the first of each
kind per partition, then at most one line a minute (a review of session 43: one WARNING per record,
again at every reader and every recovery). Each test failed before."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.buffer.marker import TXN_HEADER, TxnMarker, encode_marker
from pulsar_txn.message import EARLIEST
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import Cluster, fill_topic, read_all

pytestmark = pytest.mark.integration

N = 300
SECRET = "flood-secret-value"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_flood_of_forged_and_malformed_records_in_a_data_topic_logs_a_line_per_kind(
    cluster: Callable[..., Cluster], kafka: Any, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster(marker_secret=SECRET)
    topic = f"flood_{uid}"
    c.client.create_topic(topic, 1)
    raw = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for i in range(N):
        marker = TxnMarker(TxnID(0, 1000 + i), TxnAction.COMMIT, 0, int(time.time() * 1000), b"\x00" * 32)
        value, headers = encode_marker(marker)
        raw.produce(topic, value=value, headers=headers, partition=0)  # forged marker
        raw.produce(topic, value=b"x", headers=[(TXN_HEADER, TxnID(99, i).to_bytes())], partition=0)
        raw.produce(topic, value=b"x", headers=[(TXN_HEADER, b"\x01\x02\x03")], partition=0)
    raw.produce(topic, value=b"plain", partition=0)
    assert raw.flush(30) == 0
    caplog.set_level(logging.WARNING)
    for _ in range(2):  # a second reader (a restart) does not log them all again
        reader = c.client.create_reader(topic, EARLIEST)
        assert [m.data for m in read_all(reader)] == [b"plain"]
        reader.close()
    lines = _warnings(caplog)
    assert len(lines) <= 3 * 2, lines  # three kinds; the TB service's reader may log them too
    assert any("failed authentication" in line for line in lines)
    assert any("unknown TC" in line for line in lines)
    assert any("corrupt TxnID header" in line for line in lines)
    (state,) = TransactionsAdmin(c.client).transaction_buffer_stats(topic).values()  # counted in full
    assert state["forged_markers"] == N and state["unknown_tc_records"] == N
    assert state["corrupt_txn_headers"] == N


def test_a_flood_of_junk_in_a_pending_ack_log_logs_a_line(
    cluster: Callable[..., Cluster], kafka: Any, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster(marker_secret=SECRET)
    topic = f"flood_pa_{uid}"
    fill_topic(c, topic, 3)
    consumer = c.client.subscribe(topic, "sub", initial_position="Earliest")
    with c.client.transaction(60) as txn:
        consumer.acknowledge(consumer.receive(5000), txn=txn)
    consumer.close()
    raw = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    headers = [("ptxn.ctl", b"pending-ack"), (TXN_HEADER, b"\x00" * 16)]
    for _ in range(N):
        raw.produce(
            f"{topic}-sub__transaction_pending_ack", value=b"PT\x14\x02junk", headers=headers, partition=0
        )
    assert raw.flush(30) == 0
    caplog.set_level(logging.WARNING)
    consumer = c.client.subscribe(topic, "sub", initial_position="Earliest")
    assert consumer.receive(5000).data == b"m0001"
    consumer.close()
    lines = [line for line in _warnings(caplog) if "pending-ack record skipped" in line]
    assert 1 <= len(lines) <= 2, lines
