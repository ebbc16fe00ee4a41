"""Client-side transaction states and their rules: scenarios E1, E2, E3, E5, E6, E8."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from pulsar_txn.client import Client
from pulsar_txn.errors import (
    ConfigError,
    InvalidTxnStatusError,
    NotAllowedError,
    Timeout,
    TransactionHasOperationFailed,
)
from pulsar_txn.transaction import Transaction, TransactionState
from pulsar_txn.txnid import TxnAction
from tests.conftest import Cluster, read_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def test_e1_send_ack_and_commit_on_a_committed_transaction_raise_invalid_txn_status(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"e1_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send("m")
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = c.client.transaction(60)
    txn.commit()
    with pytest.raises(InvalidTxnStatusError):
        producer.send("late", txn=txn)
    with pytest.raises(InvalidTxnStatusError):
        consumer.acknowledge(msg, txn=txn)
    with pytest.raises(InvalidTxnStatusError):
        txn.commit()


def test_e2_client_side_timeout_gives_time_out_and_refuses_send_and_ack(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"e2_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send("m")
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = c.client.transaction(1)
    time.sleep(1.1)
    assert txn.state is TransactionState.TIME_OUT
    with pytest.raises(InvalidTxnStatusError, match="TIME_OUT"):
        producer.send("x", txn=txn)
    with pytest.raises(InvalidTxnStatusError, match="TIME_OUT"):
        consumer.acknowledge(msg, txn=txn)


def test_e3_coordinator_timeout_aborts_and_a_later_commit_fails_with_client_state_error(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    txn = c.client.transaction(1)
    # A second handle on the same TxnID whose client-side timeout has not passed: the TC decides.
    handle = c.client.resume_transaction(txn.txn_id, timeout_ms=60_000)
    tc = c.coordinator.service.coordinator(txn.txn_id.most_bits)  # type: ignore[union-attr]
    before = tc.stats()["timeout_count"]
    wait_until(lambda: tc.stats()["timeout_count"] == before + 1, 10, what="TC timeout abort")
    with pytest.raises(InvalidTxnStatusError, match="timed out"):
        handle.commit()
    assert handle.state is TransactionState.ERROR


def test_e5_commit_waits_for_every_in_flight_send_and_ack_from_30_threads_and_empty_txn_commits(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    src, dst = f"e5in_{uid}", f"e5out_{uid}"
    c.client.create_topic(src, 1)
    c.client.create_topic(dst, 3)
    producer_src = c.client.create_producer(src)
    for i in range(30):
        producer_src.send(f"in{i}")
    consumer = c.client.subscribe(src, f"sub_{uid}", initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(30)]
    producer = c.client.create_producer(dst)
    txn = c.client.transaction(60)

    def work(n: int) -> None:
        for i in range(10):
            producer.send_async(f"{n}-{i}", txn=txn, partition_key=str(n))
        consumer.acknowledge(msgs[n], txn=txn)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    txn.commit()  # returns only after every send and ack of the transaction is durable
    assert len(read_all(c.client.create_reader(dst))) == 300
    wait_until(lambda: sum(p["pending_ack_count"] for p in consumer.stats()["partitions"].values()) == 0, 10)
    with pytest.raises(Timeout):
        consumer.receive(800)  # every input acked in the committed txn: nothing is redelivered
    empty = c.client.transaction(60)
    empty.commit()
    assert empty.state is TransactionState.COMMITTED


def test_e6_a_failed_send_makes_commit_abort_and_raise_transaction_has_operation_failed(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"e6_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send_async("fine", txn=txn)
    failed = producer.send_async(b"x" * 3_000_000, txn=txn)  # larger than any broker accepts
    with pytest.raises(TransactionHasOperationFailed):
        txn.commit()
    assert failed.exception() is not None
    assert txn.state is TransactionState.ABORTED
    assert read_all(c.client.create_reader(topic), 800) == []


def test_e8_client_states_observed(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = cluster()
    seen: list[TransactionState] = []
    tc_client = c.client._tc()
    real_end = tc_client.end_txn_async

    def observing_end(txn_id: object, action: TxnAction, token: bytes | None = None) -> Future[None]:
        seen.append(current.state)  # the state while END_TXN is in flight
        return real_end(txn_id, action, token)  # type: ignore[arg-type]

    monkeypatch.setattr(tc_client, "end_txn_async", observing_end)
    current: Transaction = c.client.transaction(60)
    seen.append(current.state)
    current.commit()
    seen.append(current.state)
    current = c.client.transaction(60)
    current.abort()
    seen.append(current.state)
    timed_out = c.client.transaction(1)
    time.sleep(1.1)
    seen.append(timed_out.state)
    current = c.client.resume_transaction(timed_out.txn_id)
    wait_until(lambda: _tc_aborted(c, current), 10)
    with pytest.raises(InvalidTxnStatusError):
        current.commit()
    seen.append(current.state)
    assert seen == [
        TransactionState.OPEN,
        TransactionState.COMMITTING,
        TransactionState.COMMITTED,
        TransactionState.ABORTING,
        TransactionState.ABORTED,
        TransactionState.TIME_OUT,
        TransactionState.COMMITTING,
        TransactionState.ERROR,
    ]


def _tc_aborted(c: Cluster, txn: Transaction) -> bool:
    tc = c.coordinator.service.coordinator(txn.txn_id.most_bits)  # type: ignore[union-attr]
    meta = tc.get(txn.txn_id)
    return meta is not None and meta.status.value == "ABORTED"


def _answer_lost_once(c: Cluster, monkeypatch: pytest.MonkeyPatch) -> list[TxnAction]:
    """The first END_TXN reaches the coordinator (which ends the transaction) but its answer is
    lost: the caller gets a retriable Timeout. Later END_TXNs go through untouched."""
    tc = c.client._tc()
    real = tc.end_txn_async
    calls: list[TxnAction] = []

    def end_txn(txn_id: Any, action: TxnAction, token: bytes | None = None) -> Future[None]:
        calls.append(action)
        sent = real(txn_id, action, token)
        if len(calls) > 1:
            return sent
        lost: Future[None] = Future()
        sent.add_done_callback(lambda _f: lost.set_exception(Timeout("injected: END_TXN answer lost")))
        return lost

    monkeypatch.setattr(tc, "end_txn_async", end_txn)
    return calls


def test_a_commit_whose_answer_was_lost_stays_committing_and_can_be_repeated(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timeout is retriable: as in Pulsar's TransactionImpl, the handle stays COMMITTING and a
    repeated commit asks the coordinator again (its end is idempotent) instead of being refused."""
    c = cluster()
    topic = f"recommit_{uid}"
    c.client.create_topic(topic, 1)
    txn = c.client.transaction(60)
    c.client.create_producer(topic).send(b"payment-1", txn=txn)
    calls = _answer_lost_once(c, monkeypatch)
    with pytest.raises(Timeout) as lost:
        txn.commit()
    assert lost.value.retriable
    assert txn.state is TransactionState.COMMITTING
    txn.commit()
    assert txn.state is TransactionState.COMMITTED
    assert calls == [TxnAction.COMMIT, TxnAction.COMMIT]
    assert [m.data for m in read_all(c.client.create_reader(topic), 800)] == [b"payment-1"]
    with pytest.raises(InvalidTxnStatusError):
        txn.commit()


def test_an_abort_after_a_commit_whose_answer_was_lost_gets_the_coordinators_verdict(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a lost commit answer the outcome is unknown to the client: an abort may be asked; the
    coordinator, which did commit, refuses it, and the data stays committed."""
    c = cluster()
    topic = f"abortafter_{uid}"
    c.client.create_topic(topic, 1)
    txn = c.client.transaction(60)
    c.client.create_producer(topic).send(b"kept", txn=txn)
    _answer_lost_once(c, monkeypatch)
    with pytest.raises(Timeout):
        txn.commit()
    with pytest.raises(InvalidTxnStatusError):
        txn.abort()
    assert txn.state is TransactionState.ERROR
    assert [m.data for m in read_all(c.client.create_reader(topic), 800)] == [b"kept"]


def test_a_transaction_built_without_a_timeout_has_the_same_60_s_at_client_and_coordinator(
    cluster: ClusterFactory,
) -> None:
    """Pulsar's builder sends its 60 s default; so do we. Before, ttl 0 made the coordinator use its
    own default (here 600 s) while the handle assumed 60 s and refused a commit the TC would take."""
    c = cluster(default_txn_timeout_ms=600_000, max_txn_timeout_ms=900_000)
    txn = c.client.new_transaction().build()
    meta = c.coordinator.service.coordinator(txn.txn_id.most_bits).get(txn.txn_id)  # type: ignore[union-attr]
    assert meta is not None and meta.timeout_ms == txn.timeout_ms == 60_000
    txn.abort()


def test_a_with_block_that_ended_its_transaction_itself_exits_cleanly(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"cm_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with c.client.transaction(60) as committed:
        producer.send(b"kept", txn=committed)
        committed.commit()
    with c.client.transaction(60) as aborted:
        producer.send(b"dropped", txn=aborted)
        aborted.abort()
    assert (committed.state, aborted.state) == (TransactionState.COMMITTED, TransactionState.ABORTED)
    assert [m.data for m in read_all(c.client.create_reader(topic), 800)] == [b"kept"]


def test_a_commit_future_cannot_be_cancelled_and_still_tells_the_outcome(
    cluster: ClusterFactory, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster()
    txn = c.client.transaction(60)
    ending = txn.commit_async()
    assert not ending.cancel()
    assert ending.result(30) is None and txn.state is TransactionState.COMMITTED
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_send_arguments_of_the_wrong_type_raise_config_error(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"args_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with pytest.raises(ConfigError, match="partition_key"):
        producer.send(b"x", partition_key=42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="event_timestamp"):
        producer.send(b"x", event_timestamp="soon")  # type: ignore[arg-type]
    assert producer.send(b"ok", partition_key="k", event_timestamp=1_700_000_000_000).offset == 0


def test_a_closed_client_producer_or_reader_refuses_work_instead_of_reconnecting(
    cluster: ClusterFactory, uid: str
) -> None:
    """Pulsar raises AlreadyClosedException; we raise NotAllowedError, as a closed Consumer does.
    Before, a closed Client made its connections (and threads) again on the next call."""
    c = cluster()
    topic = f"closed_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send(b"m0")
    reader = c.client.create_reader(topic)
    producer.close()
    producer.close()  # again: nothing
    with pytest.raises(NotAllowedError, match="closed"):
        producer.send(b"late")
    reader.close()
    with pytest.raises(NotAllowedError, match="closed"):
        reader.read_next(100)
    other = Client(c.client.service_url, kafka=c.client.kafka, num_tcs=c.config.num_tcs)
    late = other.create_producer(topic)
    other.close()
    for call in (
        lambda: late.send(b"late"),
        lambda: other.transaction(60),
        lambda: other.create_producer(topic),
        lambda: other.create_reader(topic),
        lambda: other.subscribe(topic, f"sub_{uid}"),
    ):
        with pytest.raises(NotAllowedError, match="closed"):
            call()
    assert other._appender_ is None and other._tc_client is None


def test_a_handle_whose_transaction_another_handle_ended_refuses_sends_and_a_second_commit(
    cluster: ClusterFactory, uid: str
) -> None:
    # Committed through resume_transaction, the original handle still said OPEN: a send on it was
    # stored after the commit marker (so discarded) and its own commit reported success.
    c = cluster()
    topic = f"late_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send(b"in", txn=txn)
    c.client.resume_transaction(txn.txn_id).commit()
    assert txn.state is TransactionState.COMMITTED
    with pytest.raises(InvalidTxnStatusError):
        producer.send(b"late", txn=txn)
    with pytest.raises(InvalidTxnStatusError):
        txn.commit()
    assert [m.data for m in read_all(c.client.create_reader(topic), 1000)] == [b"in"]
    aborted = c.client.transaction(60)
    c.client.resume_transaction(str(aborted.txn_id)).abort()
    assert aborted.state is TransactionState.ABORTED
    with pytest.raises(InvalidTxnStatusError):  # as Pulsar's handle: abort() needs OPEN or ABORTING
        aborted.abort()
