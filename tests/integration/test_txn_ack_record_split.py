"""One call acknowledging many ids in a transaction is written as pending-ack records of at most
``ACK_BATCH_MAX`` offsets each. Found by review (session 42): the whole list went into one record,
which from ~330,000 offsets passed Kafka's record-size limit, so the ack failed with MessageTooBig
whatever the retry and the transaction could only abort."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafka_store import REGISTRY, read_range
from pulsar_txn.buffer.marker import CTL_HEADER
from pulsar_txn.naming import TopicName, pending_ack_topic
from pulsar_txn.pendingack.log import PENDING_ACK, PENDING_ACK_CTL, encode_pending_ack
from pulsar_txn.pendingack.state import AckKind
from pulsar_txn.subscription import _txn_acks
from pulsar_txn.subscription._base import ACK_BATCH_MAX
from pulsar_txn.txnid import TxnID
from tests.conftest import Cluster, receive_all, wait_until

pytestmark = pytest.mark.integration

SPLIT_AT = 40


def test_a_record_of_ack_batch_max_offsets_fits_well_under_kafkas_record_limit() -> None:
    value, _headers = encode_pending_ack(
        TxnID(2**63 - 1, 2**63 - 1), AckKind.INDIVIDUAL, [2**62] * ACK_BATCH_MAX
    )
    assert len(value) < 100_000


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_a_large_ack_list_in_one_call_is_stored_in_records_of_bounded_size(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    monkeypatch.setattr(_txn_acks, "ACK_BATCH_MAX", SPLIT_AT)  # the split, at a size a test can reach
    c = cluster()
    topic = f"acksplit_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(10 * SPLIT_AT + 7):
        producer.send_async(f"m{i}".encode())
    producer.flush()
    consumer = c.client.subscribe(topic, "s", initial_position="Earliest")
    msgs = receive_all(consumer)
    assert len(msgs) == 10 * SPLIT_AT + 7
    txn = c.client.transaction(60)
    consumer.acknowledge([m.message_id for m in msgs], txn=txn)  # one call, one partition

    # Read while the transaction is open: once it has ended, the consumer may trim the records away.
    log = pending_ack_topic(TopicName.parse(topic), "s")

    def sizes() -> list[int]:
        return [
            len(REGISTRY.decode_as(PENDING_ACK, r.value)["offsets"])
            for r in read_range(c.kafka, log, 0, 0, None)
            if r.header(CTL_HEADER) == PENDING_ACK_CTL
        ]

    wait_until(lambda: sum(sizes()) == len(msgs), 20, what="the pending acks stored")
    assert max(sizes()) <= SPLIT_AT
    txn.commit() if outcome == "commit" else txn.abort()
    redelivered = receive_all(consumer)
    consumer.close()
    again = c.client.subscribe(topic, "s", initial_position="Earliest")
    try:
        after_restart = receive_all(again)
    finally:
        again.close()
    if outcome == "commit":
        assert redelivered == [] and after_restart == []
    else:  # every acked message comes back once (to the live consumer, then from the cursor)
        assert sorted(m.data for m in redelivered) == sorted(m.data for m in msgs)
        assert len(after_restart) == len(msgs)
