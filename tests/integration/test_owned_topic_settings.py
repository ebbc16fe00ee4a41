"""Topics a component owns but finds made beforehand (by Kafka's auto-creation, an operator or an
earlier build) with time retention are made as it would have made them (review of session 44): a
pending-ack log deleted an open transaction's ack (its message came back; the commit was undone),
and a schema registry lost its schemas (older messages could no longer be read)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import pytest

from kafka_store import TopicAdmin
from pulsar_txn import AvroSchema, Client
from tests.conftest import Cluster, read_all, receive_all, wait_until

pytestmark = pytest.mark.integration


def test_a_pending_ack_log_made_with_retention_loses_no_open_transactions_ack(
    cluster: Callable[..., Cluster], admin: TopicAdmin, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"par{uid}"
    c.client.create_topic(topic, 1)
    pa_log = f"{topic}-s__transaction_pending_ack"
    admin.ensure_topic(pa_log, 1, {"retention.ms": "2000"})
    producer = c.client.create_producer(topic)
    for i in range(3):
        producer.send(b"m%d" % i)
    consumer = c.client.subscribe(topic, "s", initial_position="Earliest")
    msgs = receive_all(consumer)
    assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert admin.topic_config(pa_log)["retention.ms"] == "-1"
    assert any("had retention.ms=2000" in r.getMessage() for r in caplog.records)
    txn = c.client.transaction(120)
    consumer.acknowledge(msgs[1].message_id, txn=txn)
    consumer.acknowledge(msgs[0].message_id)
    time.sleep(4)  # two of the old retention periods
    consumer.close()
    again = c.client.subscribe(topic, "s", initial_position="Earliest")
    assert [m.data() for m in receive_all(again, 2000)] == [b"m2"]  # m1 held by the open txn
    txn.commit()
    again.close()
    third = c.client.subscribe(topic, "s", initial_position="Earliest")
    assert [m.data() for m in receive_all(third, 2000)] == [b"m2"]
    third.close()


@dataclasses.dataclass
class Order:
    order_id: str
    amount: float


@dataclasses.dataclass
class OrderV0:
    order_id: str


def test_a_schema_registry_made_with_retention_keeps_its_schemas(
    cluster: Callable[..., Cluster], admin: TopicAdmin, uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    schemas = f"__schemas_{uid}"
    admin.ensure_topic(schemas, 1, {"retention.ms": "2000"})
    topic = f"avro{uid}"
    options = {
        "kafka": c.kafka,
        "num_tcs": c.config.num_tcs,
        "snapshot_topic": c.config.snapshot_topic,
        "log_topic": c.config.log_topic,
        "schema_topic": schemas,
    }
    with Client(c.coordinator.url or "", **options) as writer:
        writer.create_topic(topic, 1)
        writer.create_producer(topic, schema=AvroSchema(Order)).send(Order("o1", 2.0))
    assert admin.topic_config(schemas)["cleanup.policy"] == "compact"
    time.sleep(4)  # two of the old retention periods
    with Client(c.coordinator.url or "", **options) as reader_client:
        (msg,) = read_all(reader_client.create_reader(topic, schema=AvroSchema(OrderV0)))
        assert msg.value() == OrderV0("o1")


def test_a_topic_with_transactions_switched_to_compaction_is_reported(
    cluster: Callable[..., Cluster],
    admin: TopicAdmin,
    uid: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Producers refuse transactional sends to a compacted topic when they begin, but a policy
    switched later went unnoticed while the broker's cleaner could delete committed records (a later
    aborted record of the same key shadows them) and markers. The TB service reports it."""
    import pulsar_txn.buffer.service as service_module

    monkeypatch.setattr(service_module, "_PRUNE_EVERY_S", 0.3)
    c = cluster(tb_service_enabled=True, tb_topic_refresh_ms=200)
    topic = f"cmp{uid}"
    plain = f"plaincmp{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_topic(plain, 1)
    with c.client.transaction() as txn:
        c.client.create_producer(topic).send(b"v", txn=txn, partition_key="k")
    c.client.create_producer(plain).send(b"v", partition_key="k")
    admin.align_configs(topic, {"cleanup.policy": "compact"})
    admin.align_configs(plain, {"cleanup.policy": "compact"})  # no transactions: nothing to report

    def reported() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.ERROR and "cleanup.policy" in r.getMessage()
        ]

    wait_until(lambda: any(topic in m for m in reported()), 20, what="the compacted topic reported")
    assert not any(plain in m for m in reported())
