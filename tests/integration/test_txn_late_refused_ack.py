"""An ack refused by its own checks after the transaction's end has begun does not change that end.
Found by the concurrency review (session 42): a late ack (another thread's cumulative ack of two ids)
was counted as a failed operation of the transaction, so the commit that had begun aborted, with
every send made before it (TransactionHasOperationFailed). As in Pulsar, an operation arriving after
commit began is refused with InvalidTxnStatusError and cannot change the outcome."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_txn.errors import InvalidTxnStatusError
from pulsar_txn.message import EARLIEST
from pulsar_txn.transaction import TransactionState
from tests.conftest import Cluster, read_all

pytestmark = pytest.mark.integration


def test_a_bad_ack_after_commit_began_is_refused_and_the_commit_goes_through(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    client = c.client
    source, sink = f"late_in_{uid}", f"late_out_{uid}"
    client.create_topic(source, 1)
    client.create_topic(sink, 1)
    for value in (b"a", b"b"):
        client.create_producer(source).send(value)
    consumer = client.subscribe(source, "sub", initial_position="Earliest")
    first, second = consumer.receive(5000), consumer.receive(5000)
    out = client.create_producer(sink)

    txn = client.transaction(60)
    for i in range(200):  # in flight when the commit begins: the commit waits for them
        out.send_async(b"x%d" % i, txn=txn)
    ended = txn.commit_async()
    with pytest.raises(InvalidTxnStatusError):
        consumer.acknowledge_cumulative([first.message_id, second.message_id], txn=txn)
    ended.result(60)
    assert txn.state is TransactionState.COMMITTED
    reader = client.create_reader(sink, EARLIEST)
    try:
        assert len(read_all(reader)) == 200
    finally:
        reader.close()
