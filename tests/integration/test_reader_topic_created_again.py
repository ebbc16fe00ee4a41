"""A Reader whose topic is deleted and created again under its name while it reads."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import pulsar_txn.buffer.reader as buffer_reader
from pulsar_txn import EARLIEST, PulsarTxnError
from tests.conftest import Cluster, create_again_behind_an_open_txn

pytestmark = pytest.mark.integration


def test_a_reader_of_a_topic_created_again_never_passes_its_open_transaction(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader's TB state was folded from the old partition, past offsets the new one holds: an
    open transaction's first message at offset 0 went unseen, and the plain messages behind it
    were delivered. The reader now finds the new partition and reads it from its start."""
    monkeypatch.setattr(buffer_reader, "_DELETED_CHECK_S", 0.3)
    c = cluster(tb_service_enabled=False)
    topic = f"again_rd_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(5):
        producer.send(b"old%d" % i)
    reader = c.client.create_reader(topic, EARLIEST)
    assert [reader.read_next(5000).data for _ in range(5)] == [b"old%d" % i for i in range(5)]
    txn = create_again_behind_an_open_txn(c, topic)

    def read_for(seconds: float) -> list[bytes]:
        got: list[bytes] = []
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            try:
                got.append(reader.read_next(200).data)
            except PulsarTxnError:  # Timeout, or the topic missing for a moment
                pass
        return got

    assert read_for(3.0) == []
    txn.commit()
    assert read_for(3.0) == [b"open", *(b"new%d" % i for i in range(7))]
    reader.close()
