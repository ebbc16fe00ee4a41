"""The Pulsar-shaped client API against the real broker: schemas end to end, the send_async
callback, and ending a transaction by its id from another client."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from kafka_store import Appender
from pulsar_txn import (
    AvroSchema,
    BytesSchema,
    Client,
    ConnectError,
    IncompatibleSchema,
    InvalidTxnStatusError,
    JsonSchema,
    MessageId,
    MessageTooBig,
    PersistenceError,
    Result,
    StringSchema,
    Timeout,
    TransactionHasOperationFailed,
    TransactionState,
)
from pulsar_txn.asyncio import AsyncClient
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.coordinator.endpoints import KafkaTxnEndpoints
from tests.conftest import Cluster, read_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


@dataclasses.dataclass
class Order:
    order_id: str
    amount: float
    tags: list[str]
    note: str | None = None


@dataclasses.dataclass
class OtherOrder:
    order_id: str


@dataclasses.dataclass
class NumberedOrder:
    order_id: int


def test_avro_records_sent_in_a_transaction_come_back_as_records_and_raw_bytes_stay_available(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"avro_{uid}"
    c.client.create_topic(topic, 2)
    schema = AvroSchema(Order)
    producer = c.client.create_producer(topic, schema=schema)
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest", schema=schema)
    orders = [Order(f"o{i}", i * 1.5, [str(i)], None if i % 2 else "n") for i in range(6)]
    with c.client.transaction(timeout=30) as txn:
        for o in orders:
            producer.send(o, txn=txn, partition_key=o.order_id)
    got = [consumer.receive(5000) for _ in orders]
    assert sorted((m.value() for m in got), key=lambda o: o.order_id) == orders
    for m in got:
        assert m.data() == schema.encode(m.value()) and m.data == m.data()
        assert m.txn_id == txn.txn_id
        consumer.acknowledge(m)


def test_readers_with_another_schema_resolve_it_or_get_incompatible_schema_and_bytes_readers_the_payload(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"mismatch_{uid}"
    c.client.create_topic(topic, 1)
    writer = AvroSchema(Order)
    c.client.create_producer(topic, schema=writer).send(Order("o1", 2.0, []))
    # Another Avro record reads it by Avro resolution through the schema registry, as Pulsar's
    # client does (the writer takes the reader's record name): the fields it lacks are dropped.
    (other,) = read_all(c.client.create_reader(topic, schema=AvroSchema(OtherOrder)))
    assert other.value() == OtherOrder("o1")
    (clash,) = read_all(c.client.create_reader(topic, schema=AvroSchema(NumberedOrder)))
    with pytest.raises(IncompatibleSchema):  # order_id: a string written, a long wanted
        clash.value()
    (as_json,) = read_all(c.client.create_reader(topic, schema=JsonSchema(Order)))
    with pytest.raises(IncompatibleSchema):
        as_json.value()
    (raw,) = read_all(c.client.create_reader(topic, schema=BytesSchema()))
    assert raw.value() == writer.encode(Order("o1", 2.0, [])) == raw.data()
    assert raw.schema_header == writer.header()


def test_string_and_json_schemas_through_a_consumer(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    text_topic, json_topic = f"str_{uid}", f"json_{uid}"
    c.client.create_topic(text_topic, 1)
    c.client.create_topic(json_topic, 1)
    c.client.create_producer(text_topic, schema=StringSchema()).send("héllo")
    c.client.create_producer(json_topic, schema=JsonSchema(dict)).send({"a": [1, 2], "b": None})
    text = c.client.subscribe(text_topic, f"s_{uid}", initial_position="Earliest", schema=StringSchema())
    assert text.receive(5000).value() == "héllo"
    (doc,) = read_all(c.client.create_reader(json_topic, schema=JsonSchema(dict)))
    assert doc.value() == {"a": [1, 2], "b": None}
    assert doc.data() == b'{"a":[1,2],"b":null}'


def test_send_async_callback_gets_result_ok_and_message_id_or_the_typed_error(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"cb_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    calls: list[tuple[Any, Any]] = []
    done = threading.Event()

    def callback(result: Any, msg_id: Any) -> None:
        calls.append((result, msg_id))
        if len(calls) == 2:
            done.set()

    ok = producer.send_async(b"fine", callback)
    producer.send_async(b"x" * 3_000_000, callback)  # larger than the broker accepts
    assert done.wait(30)
    by_kind = {r is Result.Ok: (r, mid) for r, mid in calls}
    assert by_kind[True] == (Result.Ok, ok.result(5))
    assert isinstance(by_kind[True][1], MessageId)
    failure, no_id = by_kind[False]
    assert isinstance(failure, MessageTooBig) and not failure.retriable and no_id is None
    with pytest.raises(MessageTooBig):  # the same through send(), which waits
        producer.send(b"x" * 3_000_000)


def test_a_transaction_is_committed_by_its_id_from_another_client(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"byid_{uid}"
    c.client.create_topic(topic, 1)
    txn = c.client.transaction(timeout=60)
    c.client.create_producer(topic).send(b"m", txn=txn)
    assert read_all(c.client.create_reader(topic), 500) == []
    with c.other_client() as other:
        handle = other.resume_transaction(str(txn.txn_id))
        handle.commit()
        assert handle.state is TransactionState.COMMITTED
    assert [m.data() for m in read_all(c.client.create_reader(topic))] == [b"m"]


def test_commit_async_commits_in_the_background_and_closes_the_transaction_at_once(
    cluster: ClusterFactory, uid: str
) -> None:
    from pulsar_txn import InvalidTxnStatusError

    c = cluster()
    topic = f"casync_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    begun = c.client.new_transaction().with_transaction_timeout(30).build_async()
    txn = begun.result(30)
    assert txn.state is TransactionState.OPEN
    for i in range(20):
        producer.send_async(f"m{i}".encode(), txn=txn)
    done = txn.commit_async()
    with pytest.raises(InvalidTxnStatusError):  # no send can slip in after the commit began
        producer.send(b"late", txn=txn)
    assert done.result(30) is None
    assert txn.state is TransactionState.COMMITTED
    got = [m.data() for m in read_all(c.client.create_reader(topic))]
    assert got == [f"m{i}".encode() for i in range(20)]


def test_an_operation_that_never_ends_makes_commit_async_abort_after_the_operation_timeout(
    cluster: ClusterFactory, uid: str
) -> None:
    """No thread waits for an asynchronous commit: its deadline comes from the client's deadline
    watch. An operation that never ends is a failed one: the transaction aborts, as ``commit`` does."""

    c = cluster()
    topic = f"cstuck_{uid}"
    c.client.create_topic(topic, 1)
    txn = c.client.transaction(60)
    c.client.create_producer(topic).send(b"hidden", txn=txn)
    c.client.operation_timeout_seconds = 1.0  # after the first send, which may take a while
    txn.track(Future())  # never completes
    started = time.monotonic()
    done = txn.commit_async()
    with pytest.raises(TransactionHasOperationFailed) as raised:
        done.result(30)
    assert isinstance(raised.value.__cause__, Timeout)
    assert 0.9 <= time.monotonic() - started < 10
    assert txn.state is TransactionState.ABORTED
    assert read_all(c.client.create_reader(topic), 800) == []


def test_abort_async_releases_acks_and_hides_sends(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    src, out = f"aasync_in_{uid}", f"aasync_out_{uid}"
    c.client.create_topic(src, 1)
    c.client.create_topic(out, 1)
    c.client.create_producer(src).send(b"x")
    consumer = c.client.subscribe(src, f"sub_{uid}", initial_position="Earliest")
    msg = consumer.receive(5000)
    txn = c.client.transaction(timeout=30)
    consumer.acknowledge([msg], txn=txn)  # the list form
    c.client.create_producer(out).send(b"y", txn=txn)
    txn.abort_async().result(30)
    assert txn.state is TransactionState.ABORTED
    again = consumer.receive(5000)  # the aborted ack is released: redelivered
    assert again.message_id == msg.message_id and again.redelivery_count >= 1
    assert read_all(c.client.create_reader(out), 500) == []


def test_acknowledging_a_list_in_a_transaction_checks_every_id_for_conflicts(
    cluster: ClusterFactory, uid: str
) -> None:
    from pulsar_txn import TransactionConflict

    c = cluster()
    topic = f"acklist_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode(), partition_key=str(i))
    consumer = c.client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
    msgs = consumer.batch_receive(10, 5000)
    while len(msgs) < 10:
        msgs += consumer.batch_receive(10 - len(msgs), 5000)
    first = c.client.transaction(timeout=30)
    consumer.acknowledge(msgs[:3], txn=first)  # one call, ids of both partitions
    second = c.client.transaction(timeout=30)
    with pytest.raises(TransactionConflict):
        consumer.acknowledge([msgs[5], msgs[2]], txn=second)  # msgs[2] is pending in `first`
    second.abort()
    first.commit()
    third = c.client.transaction(timeout=30)
    with pytest.raises(TransactionConflict):  # committed now: acked
        consumer.acknowledge(msgs[:1], txn=third)
    third.abort()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_dead_broker_is_a_retriable_connect_error_from_every_kind_of_call_not_a_storage_error() -> None:
    port = _closed_port()
    kafka = {"bootstrap_servers": f"127.0.0.1:{port}", "request_timeout_ms": 500}
    with Client(f"pulsar://127.0.0.1:{port}", kafka=kafka, operation_timeout_seconds=1) as client:
        calls: list[Callable[[], object]] = [
            lambda: client.create_producer("t"),
            lambda: client.subscribe("t", "s"),
            lambda: client.create_reader("t"),
            lambda: client.create_topic("t2", 1),
            lambda: client.get_last_message_ids("t"),
        ]
        for call in calls:
            started = time.monotonic()
            with pytest.raises(ConnectError) as info:
                call()
            assert info.value.retriable
            assert time.monotonic() - started < 10  # bounded by the Kafka request timeout, no hang

    async def via_asyncio() -> None:
        async with AsyncClient(f"pulsar://127.0.0.1:{port}", kafka=kafka) as aclient:
            await aclient.create_producer("t")

    with pytest.raises(ConnectError):
        asyncio.run(via_asyncio())


def test_a_send_racing_with_commit_is_either_committed_or_refused_never_lost(
    cluster: ClusterFactory, uid: str
) -> None:
    """Senders on other threads while the transaction commits: each send either returns a MessageId
    that is visible after the commit, or is refused with InvalidTxnStatusError. Never a MessageId for a
    message the commit left out (it would sit after the marker, discarded by every reader)."""
    c = cluster()
    topic = f"race_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    accepted: list[MessageId] = []
    lock = threading.Lock()
    for trial in range(8):
        txn = c.client.new_transaction().with_transaction_timeout(30).build()
        producer.send(f"{trial}-first".encode(), txn=txn)
        start = threading.Barrier(4)

        def sender(name: str, txn: Any = txn, start: threading.Barrier = start) -> None:
            start.wait(10)
            for i in range(300):
                try:
                    fut = producer.send_async(f"{name}-{i}".encode(), txn=txn)
                except InvalidTxnStatusError:
                    return
                with lock:
                    accepted.append(fut.result(30))

        threads = [threading.Thread(target=sender, args=(f"{trial}-{k}",)) for k in range(3)]
        for t in threads:
            t.start()
        start.wait(10)
        time.sleep(0.002 * (trial + 1))  # commit at different points of the senders' loops
        txn.commit()
        for t in threads:
            t.join(30)
    reader = c.client.create_reader(topic)
    visible = {m.message_id for m in read_all(reader, 2000)}
    reader.close()
    assert set(accepted) <= visible  # every accepted send committed
    assert len(visible) == len(accepted) + 8  # nothing else either (the 8 first sends)


def test_a_send_callback_may_send_again_on_the_same_producer(cluster: ClusterFactory, uid: str) -> None:
    """A send that fails at once (too large) runs its callback on the sending thread; a callback that
    reports the failure with another send on the same producer must not deadlock it."""
    c = cluster()
    topic = f"cbsend_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    reported: list[Future[MessageId]] = []

    def report(result: Any, _msg_id: Any) -> None:
        if result is not Result.Ok:
            reported.append(producer.send_async(f"failed: {type(result).__name__}".encode()))

    outcome: dict[str, Any] = {}

    def send_oversize() -> None:
        producer.send_async(b"x" * 3_000_000, report)
        outcome["later"] = producer.send(b"after")

    t = threading.Thread(target=send_oversize, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the producer deadlocked in a callback"
    assert isinstance(outcome["later"], MessageId)
    assert len(reported) == 1 and isinstance(reported[0].result(10), MessageId)


def test_client_close_waits_for_the_answer_to_an_asynchronous_commit(
    coord_config: Callable[..., Any], kafka: Any, admin: Any, uid: str
) -> None:
    """``close`` lets a ``commit_async`` in flight finish: its END_TXN is answered (markers written
    late here), the future succeeds and the state is COMMITTED, not a ConnectionClosed error."""
    cfg = coord_config()
    appender = Appender(kafka)
    ec = EmbeddedCoordinator(
        kafka, cfg, serve=True, endpoints=_SlowEndpoints(KafkaTxnEndpoints(appender, admin, num_tcs=4))
    )
    ec.start(wait_ready=30)
    try:
        client = Client(ec.url or "", kafka=kafka, num_tcs=4, snapshot_topic=cfg.snapshot_topic)
        topic = f"close_{uid}"
        client.create_topic(topic, 1)
        producer = client.create_producer(topic)
        txn = client.new_transaction().with_transaction_timeout(30).build()
        producer.send(b"x", txn=txn)
        fut = txn.commit_async()
        client.close()
        assert fut.done() and fut.exception() is None
        assert txn.state is TransactionState.COMMITTED
    finally:
        ec.stop()
        appender.close()


class _SlowEndpoints:
    """Real marker writes, each 1.5 s late (a slow participant)."""

    def __init__(self, inner: KafkaTxnEndpoints) -> None:
        self.inner = inner

    async def end_on_partition(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(1.5)
        await self.inner.end_on_partition(*args, **kwargs)

    async def end_on_subscription(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(1.5)
        await self.inner.end_on_subscription(*args, **kwargs)


def test_a_commit_that_became_an_abort_raises_the_operations_failure_even_if_the_abort_fails(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller of ``commit`` learns that an operation failed (TransactionHasOperationFailed), not the
    abort's own error; nothing of the transaction becomes visible (the coordinator's timeout ends it)."""
    c = cluster()
    topic = f"abortfail_{uid}"
    c.client.create_topic(topic, 1)
    txn = c.client.transaction(60)
    c.client.create_producer(topic).send(b"hidden", txn=txn)
    failed: Future[None] = Future()
    failed.set_exception(PersistenceError("injected send failure"))
    txn.track(failed)
    tc = c.client._tc()

    def end_fails(_txn_id: Any, _action: Any, _token: Any = None) -> Future[None]:
        answer: Future[None] = Future()
        answer.set_exception(Timeout("injected: END_TXN not answered"))
        return answer

    monkeypatch.setattr(tc, "end_txn_async", end_fails)
    with pytest.raises(TransactionHasOperationFailed, match="injected send failure"):
        txn.commit()
    assert txn.state is TransactionState.ERROR
    assert read_all(c.client.create_reader(topic), 800) == []


def test_an_operation_counted_before_the_commit_began_may_still_add_what_the_commit_waits_for(
    cluster: ClusterFactory, uid: str
) -> None:
    """An acknowledgement in flight on another thread when ``commit`` begins: the commit waits for it,
    its batched write is flushed at once and waited for, and later operations are refused."""
    c = cluster()
    txn = c.client.transaction(60)
    topic = f"late_{uid}"
    txn.begin_ack(topic, "sub").result(10)  # an ack on another thread, counted before the commit
    done = txn.commit_async()
    with pytest.raises(InvalidTxnStatusError):
        txn.begin_ack(topic, "sub")  # the commit began: refused, not left out
    time.sleep(0.2)
    assert not done.done()  # waits for the counted operation
    written: Future[None] = Future()
    flushed: list[bool] = []
    txn.track(written)
    txn.add_flush_hook(lambda: flushed.append(True))
    assert flushed == [True]  # the end's flush has passed: the late hook runs at once
    txn.op_finished(None)
    time.sleep(0.2)
    assert not done.done()  # still waits for the write the operation tracked late
    written.set_result(None)
    done.result(30)
    assert txn.state is TransactionState.COMMITTED


def test_a_reader_started_at_a_message_id_starts_after_it_unless_inclusive(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"start_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(3)]
    assert [m.data() for m in read_all(c.client.create_reader(topic, ids[0]))] == [b"m1", b"m2"]
    inclusive = c.client.create_reader(topic, ids[0], start_message_id_inclusive=True)
    assert [m.data() for m in read_all(inclusive)] == [b"m0", b"m1", b"m2"]
    assert read_all(c.client.create_reader(topic, ids[2])) == []


def test_a_partition_added_after_the_client_learnt_the_count_is_found(
    cluster: ClusterFactory, uid: str
) -> None:
    """The client caches a topic's partition count; a partition beyond it is looked up again rather
    than refused (a pipeline whose input topic grew retried its session for good, found in review)."""
    c = cluster()
    topic = f"grown_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send("first")
    c.client._admin.add_partitions(topic, 2)
    producer = c.client.create_producer(f"{topic}-partition-1")
    producer.send("in the new partition")
    assert sorted(m.data for m in read_all(c.client.create_reader(f"{topic}-partition-1"))) == [
        b"in the new partition"
    ]


def test_a_producer_picks_up_partitions_added_to_its_topic(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pulsar's autoUpdatePartitions: a producer looks for new partitions every 60 s (here at once)."""
    import pulsar_txn.producer as producer_module

    monkeypatch.setattr(producer_module, "PARTITIONS_REFRESH_S", 0.0)
    c = cluster(tb_service_enabled=False)
    topic = f"autogrow_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    assert {producer.send(b"a").partition for _ in range(4)} == {0}
    c.client._admin.add_partitions(topic, 3)
    assert {producer.send(b"b").partition for _ in range(6)} == {0, 1, 2}  # round robin over all
