"""A transaction cannot write to a topic Kafka compacts (its commit/abort markers have no key, which a
compacted topic refuses). Found by the interop review (session 42): the send was taken, the marker
write was retried for ever, commit() timed out and the partition's readers were held back for good.
Now the transactional send is refused before anything is written."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafka_store import TopicAdmin
from pulsar_txn import NotAllowedError
from pulsar_txn.message import EARLIEST
from tests.conftest import Cluster, read_all

pytestmark = pytest.mark.integration


def test_a_transactional_send_to_a_compacted_topic_is_refused_and_holds_nothing_back(
    cluster: Callable[..., Cluster], admin: TopicAdmin, uid: str
) -> None:
    c = cluster(tb_service_enabled=False)
    topic = f"compacted_{uid}"
    admin.ensure_topic(topic, 1, {"cleanup.policy": "compact"})  # as Kafka tooling makes one
    producer = c.client.create_producer(topic)
    producer.send(b"before", partition_key="k")
    with c.client.transaction(60) as txn, pytest.raises(NotAllowedError, match="compacted"):
        producer.send(b"in a txn", partition_key="k", txn=txn)
    producer.send(b"after", partition_key="k2")
    reader = c.client.create_reader(topic, EARLIEST)
    try:
        assert [m.data for m in read_all(reader)] == [b"before", b"after"]
    finally:
        reader.close()
