"""A transaction committed by another client (``resume_transaction``) while this handle still sends:
the late send lands after the commit marker and is not part of it, so this handle's commit must not
report success (the coordinator took any repeated COMMIT for a retry and answered OK: a message
the application believed committed was dropped; found by a review of session 33, the test failed
before the fix). Its own retries of a commit stay idempotent."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_txn import InvalidTxnStatusError, TransactionState
from tests.conftest import Cluster, read_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def test_a_commit_made_by_another_handle_is_not_reported_as_this_handles(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"commit_elsewhere_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send(b"m1", txn=txn)
    with c.other_client() as other:
        theirs = other.resume_transaction(str(txn.txn_id))
        theirs.commit()
        theirs_again = other.resume_transaction(str(txn.txn_id))
        with pytest.raises(InvalidTxnStatusError, match="committed by another"):
            theirs_again.commit()  # a second handle is not the first one's retry either
    producer.send(b"m2-late", txn=txn)  # this handle does not know: no coordinator call per send
    with pytest.raises(InvalidTxnStatusError, match="committed by another"):
        txn.commit()
    assert txn.state is TransactionState.ERROR
    assert [m.data() for m in read_all(c.client.create_reader(topic))] == [b"m1"]
