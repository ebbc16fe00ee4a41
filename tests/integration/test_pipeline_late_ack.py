"""A replaced pipeline instance, paused mid-batch, can store its batch's ack record after its
successor's start-up fencing scan (and then die without committing: its ownership check fails).
Those inputs are pending in a transaction nobody will commit, so the successor's consumer skips them
and delivers later ones; before session 38 the successor processed the later ones and the skipped
inputs came back only at the transaction's timeout, after them: each input was in the output once,
but out of order. The fault is placed deterministically: the record is written right after the
successor's scan, and the successor's consumer is seen holding it before it receives anything."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_store import Appender
from pulsar_txn.naming import TopicName, pending_ack_topic
from pulsar_txn.pendingack.log import encode_pending_ack
from pulsar_txn.pendingack.state import AckKind
from pulsar_txn.pipeline import ExactlyOncePipeline, PipelineSettings, verify_exactly_once
from pulsar_txn.pipeline import app as pipeline_app
from pulsar_txn.pipeline.app import upper
from tests.conftest import Cluster, wait_until

pytestmark = pytest.mark.integration


def test_a_late_ack_record_of_a_replaced_instance_does_not_reorder_the_output(
    cluster: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c: Cluster = cluster()
    source, sink, sub = f"in_{uid}", f"out_{uid}", f"pipe_{uid}"
    c.client.create_topic(source, 1)
    c.client.create_topic(sink, 1)
    producer = c.client.create_producer(source)

    def fill(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            producer.send_async(f"msg-{i:05d}")
        producer.flush()

    settings = PipelineSettings(
        source, sink, subscription=sub, instance_id=f"p-{uid}", batch_size=50, idle_exit_s=1.5
    )
    # The predecessor's earlier work (its transactions made the subscription's pending-ack log).
    fill(0, 100)
    first = ExactlyOncePipeline(c.client, settings)
    assert first.run().processed == 100
    first.close()
    fill(100, 300)
    topic = TopicName.parse(source)
    # The predecessor's last transaction: its subscription registered with the TC (so an abort
    # writes the outcome to the pending-ack log), never committed.
    zombie = c.client.transaction(120)
    zombie.begin_ack(str(topic), sub).result(10)
    zombie.op_finished(None)
    real_scan = pipeline_app.leftover_transactions
    injected: list[bool] = []

    def scan_then_late_record(client: Any, consumer: Any, *args: Any) -> Any:
        found = real_scan(client, consumer, *args)
        if not injected:
            injected.append(True)
            offsets = list(range(100, 150))  # the batch it had received when it was paused
            value, headers = encode_pending_ack(zombie.txn_id, AckKind.INDIVIDUAL, offsets)
            app = Appender(c.client.kafka)
            try:
                app.append(pending_ack_topic(topic, sub), 0, value, headers=headers).result(10)
            finally:
                app.close()
            wait_until(
                lambda: zombie.txn_id in consumer.pending_transactions(),
                15,
                what="the successor's consumer holding the late ack record",
            )
        return found

    monkeypatch.setattr(pipeline_app, "leftover_transactions", scan_then_late_record)
    successor = ExactlyOncePipeline(c.client, settings)
    progress = successor.run()
    successor.close()
    assert injected
    verdict = verify_exactly_once(c.client, source, sink, upper)
    assert verdict.ok, str(verdict)
    assert progress.processed == 200, progress
    # The successor restarted its session on finding the foreign transaction, and its fencing
    # aborted it: the inputs came back at once, in order (not at the transaction's timeout).
    assert progress.sessions == 2 and progress.fenced >= 1, progress
