"""The TB service forgets what its snapshot store keeps in memory about a topic once the topic is
deleted, also when the topic's partitions were revoked before the deletion was seen (deleting a
topic sets off a rebalance, which revokes them first). Before, the store kept an entry for most
deleted topics' partitions for the life of the process (soak review, session 41)."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_store import Appender, KafkaConfig, TopicAdmin
from pulsar_txn.buffer.marker import TXN_HEADER, TxnMarker, marker_record
from pulsar_txn.buffer.service import TransactionBufferService
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def test_the_snapshot_cache_of_deleted_topics_is_dropped(
    kafka: KafkaConfig, coord_config: Any, uid: str
) -> None:
    cfg = coord_config(
        tb_topic_refresh_ms=4000, tb_snapshot_interval_ms=200, tb_topic_pattern=f"tbdel_{uid}_.*"
    )
    topics = [f"tbdel_{uid}_{i}" for i in range(3)]
    admin = TopicAdmin(kafka)
    appender = Appender(kafka)
    service = TransactionBufferService(kafka, cfg)
    service.start()
    try:
        for topic in topics:
            admin.ensure_topic(topic, 2)
            for p in range(2):
                txn = TxnID(2, 100 + p)
                appender.append(topic, p, b"x", headers=[(TXN_HEADER, txn.to_bytes())]).result(30)
                value, headers = marker_record(
                    TxnMarker(txn, TxnAction.COMMIT, -1, 0), topic, p, cfg.marker_key
                )
                appender.append(topic, p, value, headers=headers).result(30)

        def cached() -> set[str]:
            store = service._store
            return {tp[0] for tp in (store._segments_written if store is not None else {})}

        wait_until(lambda: cached() >= set(topics), 60, interval=0.2, what="snapshots of every topic")
        admin.delete_topics(topics[:2])
        wait_until(
            lambda: not cached() & set(topics[:2]), 30, interval=0.2, what="the deleted topics forgotten"
        )
        assert topics[2] in cached()
    finally:
        service.stop()
        appender.close()
        admin.close()
