"""Transaction buffer against the real broker: Pulsar scenarios P1-P8 and R2, plus bad input."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from kafka_store import (
    Appender,
    KafkaConfig,
    PartitionReader,
    StoredRecord,
    TopicAdmin,
    end_offsets,
    read_range,
)
from pulsar_txn.buffer import reader as buffer_reader
from pulsar_txn.buffer.marker import (
    CTL_HEADER,
    MARKER_CTL,
    TXN_HEADER,
    TXN_MAC_HEADER,
    TxnMarker,
    decode_marker,
    encode_marker,
)
from pulsar_txn.buffer.reader import BufferOptions, CommittedReader, load_state
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.buffer.state import UNSIGNED_TXN_HISTORY_ENV, TxnBufferState
from pulsar_txn.errors import Timeout
from pulsar_txn.message import LATEST, MessageId
from pulsar_txn.producer import Producer
from pulsar_txn.transaction import Transaction
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import Cluster, read_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def _markers(kafka: KafkaConfig, topic: str, partition: int) -> list[tuple[TxnID, TxnAction]]:
    out = []
    for rec in read_range(kafka, topic, partition):
        if rec.header(CTL_HEADER) == MARKER_CTL:
            m = decode_marker(rec.value)
            out.append((m.txn_id, m.action))
    return out


def _values(messages: list) -> list[str]:  # type: ignore[type-arg]
    return [m.data.decode() for m in messages]


def test_p1_interleaved_transactions_invisible_until_both_commit_then_all_in_order(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"p1_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    reader = c.client.create_reader(topic)
    t1, t2 = c.client.transaction(60), c.client.transaction(60)
    sent = []
    for i in range(1000):
        txn = t1 if i % 2 == 0 else t2
        producer.send_async(f"m{i}", txn=txn)
        sent.append(f"m{i}")
    producer.flush()
    assert read_all(reader, 1000) == []
    t1.commit()
    # Only m0 is below t2's first message (offset 1), which pins the partition until t2 ends.
    assert _values(read_all(reader, 500)) == ["m0"]
    t2.commit()
    assert ["m0", *_values(read_all(reader))] == sent


def test_p2_aborted_messages_are_never_delivered_and_reading_moves_past_them(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"p2_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with pytest.raises(RuntimeError), c.client.transaction(60) as txn:
        for i in range(10):
            producer.send(f"aborted-{i}", txn=txn)
        raise RuntimeError("abort by exception")
    producer.send("after")
    assert _values(read_all(c.client.create_reader(topic))) == ["after"]


def test_p3_open_txn_holds_back_later_plain_messages_until_commit(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"p3_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    reader = c.client.create_reader(topic)
    for i in range(10):
        producer.send(f"a{i}")
    txn = c.client.transaction(60)
    for i in range(10):
        producer.send(f"t{i}", txn=txn)
    for i in range(10):
        producer.send(f"b{i}")
    assert _values(read_all(reader)) == [f"a{i}" for i in range(10)]
    txn.commit()
    assert _values(read_all(reader)) == [f"t{i}" for i in range(10)] + [f"b{i}" for i in range(10)]


def test_p4_max_read_position_follows_plain_publishes_is_pinned_by_open_txn_and_moves_past_marker(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster()
    topic = f"p4_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)

    def mrp() -> int:
        return load_state(kafka, topic, 0)[0].max_read_position

    for i in range(3):
        producer.send(f"plain{i}")
    assert mrp() == 3
    txn = c.client.transaction(60)
    first = producer.send("txn", txn=txn)
    producer.send("plain-after")
    assert mrp() == first.offset == 3
    txn.commit()
    assert mrp() == 6  # past the commit marker at offset 5


def test_p5_each_partition_gets_exactly_one_marker_of_the_outcome_and_markers_are_never_delivered(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster()
    topic = f"p5_{uid}"
    c.client.create_topic(topic, 3)
    producer = c.client.create_producer(topic)
    with c.client.transaction(60) as committed:
        for i in range(9):
            producer.send(f"c{i}", txn=committed, partition_key=f"k{i}")
    aborted = c.client.transaction(60)
    for i in range(9):
        producer.send(f"a{i}", txn=aborted, partition_key=f"k{i}")
    aborted.abort()
    for p in range(3):
        markers = _markers(kafka, topic, p)
        assert markers.count((committed.txn_id, TxnAction.COMMIT)) == 1
        assert markers.count((aborted.txn_id, TxnAction.ABORT)) == 1
        assert len(markers) == 2
    got = read_all(c.client.create_reader(topic))
    assert sorted(_values(got)) == sorted(f"c{i}" for i in range(9))


def test_p6_ten_transactions_of_1000_messages_keep_publish_order(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"p6_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txns = [c.client.transaction(120) for _ in range(10)]
    order: list[str] = []
    for i in range(1000):
        for t, txn in enumerate(txns):
            producer.send_async(f"{t}-{i}", txn=txn)
            order.append(f"{t}-{i}")
    for txn in txns:
        txn.commit()
    assert _values(read_all(c.client.create_reader(topic))) == order


def test_p7_a_transaction_over_three_topics_is_visible_together_or_not_at_all(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topics = [f"p7_{uid}_{n}" for n in range(3)]
    for t in topics:
        c.client.create_topic(t, 1)
    producers = [c.client.create_producer(t) for t in topics]
    readers = [c.client.create_reader(t) for t in topics]
    aborted = c.client.transaction(60)
    committed = c.client.transaction(60)
    for p in producers:
        p.send("no", txn=aborted)
        p.send("yes", txn=committed)
    assert all(read_all(r, 300) == [] for r in readers)
    aborted.abort()
    assert all(read_all(r, 300) == [] for r in readers)  # the committed txn is still open
    committed.commit()
    assert [_values(read_all(r)) for r in readers] == [["yes"], ["yes"], ["yes"]]


def test_p8_transactional_messages_carry_their_txn_id_and_metadata(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"p8_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic, producer_name="p8-producer")
    with c.client.transaction(60) as txn:
        producer.send("x", txn=txn, properties={"a": "1"}, partition_key="key-1", event_timestamp=1234)
    producer.send("plain")
    msgs = read_all(c.client.create_reader(topic))
    assert msgs[0].txn_id == txn.txn_id and msgs[1].txn_id is None
    assert (msgs[0].properties, msgs[0].partition_key, msgs[0].event_timestamp) == ({"a": "1"}, "key-1", 1234)
    assert msgs[0].producer_name == "p8-producer" and msgs[0].sequence_id == 0
    assert msgs[0].message_id == MessageId(topic, 0, 0) and msgs[0].publish_timestamp > 0


def test_metadata_travels_in_one_meta_header_and_records_of_earlier_versions_still_read(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster()
    topic = f"meta_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic, producer_name="meta-producer")
    producer.send("new", event_timestamp=77)
    app = Appender(kafka)  # a record as versions before the pulsar.meta header wrote it
    legacy = [("pulsar.producer", b"old-producer"), ("pulsar.seq", b"5"), ("pulsar.event_time", b"66")]
    app.append(topic, 0, b"old", headers=legacy).result(10)
    app.append(topic, 0, b"damaged", headers=[("pulsar.meta", b"\x09junk")]).result(10)
    app.close()
    stored = [[name for name, _ in rec.headers] for rec in read_range(kafka, topic, 0)]
    assert stored[0] == ["pulsar.meta"]
    msgs = read_all(c.client.create_reader(topic))
    got = [(m.data, m.producer_name, m.sequence_id, m.event_timestamp) for m in msgs]
    assert got == [
        (b"new", "meta-producer", 0, 77),
        (b"old", "old-producer", 5, 66),
        (b"damaged", None, None, None),  # delivered; its unreadable metadata is logged and left out
    ]


def test_r2_recovery_starts_from_the_latest_snapshot_with_the_same_state(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster(tb_snapshot_max_changes=5)
    topic = f"r2_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(20):
        with pytest.raises(ValueError), c.client.transaction(60) as txn:
            producer.send(f"a{i}", txn=txn)
            raise ValueError
    producer.send("plain")
    c.client.transaction(600).txn_id  # noqa: B018 - an open txn with no messages does not pin
    open_txn = c.client.transaction(600)
    producer.send("open", txn=open_txn)
    full, _ = load_state(kafka, topic, 0)  # from the beginning, no snapshot
    store = SnapshotStore(kafka, topic=c.config.snapshot_topic)

    def snapshot_is_current() -> bool:
        loaded = store.load(topic, 0)
        return loaded is not None and loaded[0].scanned_to == full.scanned_to

    wait_until(snapshot_is_current, 20, what="TB service snapshot at the end")
    c.coordinator.stop()  # the snapshotting service is gone; readers recover from the snapshot
    recovered, from_snapshot = load_state(kafka, topic, 0, store=store)
    assert from_snapshot == full.scanned_to  # started at the snapshot, not at offset 0
    assert recovered.max_read_position == full.max_read_position
    assert recovered.aborted == full.aborted and len(full.aborted) == 20
    assert recovered.ongoing == full.ongoing == {open_txn.txn_id: full.max_read_position}


def _write_interleaved(c: Cluster, producer: Producer[Any], n: int) -> list[MessageId]:
    """``n`` rounds of: ``v{i}`` in a transaction, ``plain{i}`` outside it, then the transaction
    aborted (every third round, from the first) or committed. Returns the ``v{i}`` message ids."""
    ids = []
    for i in range(n):
        txn = c.client.transaction(60)
        ids.append(producer.send(f"v{i}", txn=txn))
        producer.send(f"plain{i}")
        if i % 3 == 0:
            txn.abort()
        else:
            txn.commit()
    return ids


def test_reader_started_mid_stream_agrees_with_one_started_at_the_beginning(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster(tb_snapshot_max_changes=3)
    topic = f"mid_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    ids = _write_interleaved(c, producer, 30)
    everything = _values(read_all(c.client.create_reader(topic)))
    for k in (7, 16, 25):  # committed rounds: v{k} is delivered
        after = _values(read_all(c.client.create_reader(topic, ids[k])))
        assert after == everything[everything.index(f"v{k}") + 1 :]  # Pulsar's reader starts after it
        at = _values(read_all(c.client.create_reader(topic, ids[k], start_message_id_inclusive=True)))
        assert at == everything[everything.index(f"v{k}") :]


def _committed_values(reader: CommittedReader, want: int) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        got += [(r.value or b"").decode() for r in reader.poll(0.5)]
    return got


def _overflowing_reader(c: Cluster, kafka: KafkaConfig, topic: str) -> tuple[Transaction, CommittedReader]:
    """An open txn's message, then 12 plain ones (p0-p11), and a reader whose 4-record window
    overflows while the txn pins max_read_position: those records are left to a gap reader."""
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send("open", txn=txn)  # pins max_read_position while the rest is scanned
    for i in range(12):
        producer.send(f"p{i}")
    options = BufferOptions(num_tcs=c.config.num_tcs, window_max_records=4, fetch_batch=3)
    return txn, CommittedReader(kafka, {(topic, 0): 0}, options=options)


def _stall_gap_readers(
    monkeypatch: pytest.MonkeyPatch, reader: CommittedReader, seconds: float
) -> list[float]:
    """Gap readers (not ``reader``'s scanner) get nothing for ``seconds`` from their first poll (a
    broker that does not answer), then their records; one stall period is 0.2 s. Returns [the stall's
    end] once it has begun."""
    monkeypatch.setattr(buffer_reader, "_GAP_STALL_S", 0.2)
    real_poll_batch = PartitionReader.poll_batch
    stalled_until: list[float] = []

    def poll_batch(
        self: PartitionReader, max_records: int = 1000, timeout: float = 0.1
    ) -> list[StoredRecord]:
        if self is not reader._scanner:
            if not stalled_until:
                stalled_until.append(time.monotonic() + seconds)
            if time.monotonic() < stalled_until[0]:
                time.sleep(timeout)
                return []
        return real_poll_batch(self, max_records, timeout)

    monkeypatch.setattr(PartitionReader, "poll_batch", poll_batch)
    return stalled_until


def test_reader_behind_a_snapshot_reads_to_it_with_its_one_scanner_and_delivers_as_a_full_scan(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster(tb_snapshot_max_changes=3)
    topic = f"behind_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    _write_interleaved(c, producer, 24)
    expected = [f"{k}{i}" for i in range(24) for k in ("v", "plain") if k == "plain" or i % 3]
    store = SnapshotStore(kafka, topic=c.config.snapshot_topic)
    end = load_state(kafka, topic, 0)[0].scanned_to
    wait_until(
        lambda: (s := store.load(topic, 0)) is not None and s[0].scanned_to == end,
        20,
        what="a snapshot at the end",
    )
    options = BufferOptions(num_tcs=c.config.num_tcs)
    reader = CommittedReader(kafka, {(topic, 0): 0}, store=store, options=options)
    try:
        assert _committed_values(reader, len(expected)) == expected
        assert reader.snapshot_offsets[(topic, 0)] == end  # the state came from the snapshot
        assert reader.refetched == 0  # no second consumer read the records below it
    finally:
        reader.close()


def test_an_overflowing_window_is_dropped_and_its_records_fetched_again_in_order(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster()
    txn, reader = _overflowing_reader(c, kafka, f"overflow_{uid}")
    try:
        assert reader.poll(1.0) == []  # scanned past the window's bound while nothing was readable
        txn.commit()
        assert _committed_values(reader, 13) == ["open"] + [f"p{i}" for i in range(12)]
        assert reader.refetched > 0
    finally:
        reader.close()


def test_seek_back_into_records_delivered_from_the_window_delivers_them_again_in_order(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster()
    topic = f"seekback_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(10):
        producer.send(f"p{i}")
    txn = c.client.transaction(60)
    producer.send("t10", txn=txn)  # pins max_read_position: p11 and p12 wait in the window
    producer.send("p11")
    producer.send("p12")
    committed = CommittedReader(kafka, {(topic, 0): 0}, options=BufferOptions(num_tcs=c.config.num_tcs))
    reader = c.client.create_reader(topic)
    try:
        first = [f"p{i}" for i in range(10)]
        assert _committed_values(committed, 10) == first
        messages = read_all(reader)
        assert _values(messages) == first
        committed.seek(topic, 0, 5)
        reader.seek(messages[4].message_id)  # an exclusive reader resumes after the id (Pulsar)
        txn.commit()
        expected = [f"p{i}" for i in range(5, 10)] + ["t10", "p11", "p12"]
        assert _committed_values(committed, len(expected)) == expected
        assert committed.poll(0.5) == []
        assert _values(read_all(reader)) == expected
    finally:
        committed.close()
        reader.close()


def test_a_stalled_gap_reader_skips_nothing_and_polls_keep_their_timeout(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = cluster()
    txn, reader = _overflowing_reader(c, kafka, f"gapstall_{uid}")
    stalled_until = _stall_gap_readers(monkeypatch, reader, 2.0)  # 10 stall periods
    try:
        assert reader.poll(1.0) == []
        txn.commit()
        got: list[str] = []
        deadline = time.monotonic() + 30
        while len(got) < 13 and time.monotonic() < deadline:
            started = time.monotonic()
            got += [(r.value or b"").decode() for r in reader.poll(0.3)]
            assert time.monotonic() - started < 1.0  # the gap reader's wait is bounded by the poll's
        assert stalled_until and time.monotonic() > stalled_until[0]
        assert got == ["open"] + [f"p{i}" for i in range(12)]
        assert reader.poll(0.5) == []
        assert reader.refetched > 0
    finally:
        reader.close()


def test_a_gap_reader_skips_only_what_retention_deleted(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    c = cluster()
    topic = f"gapgone_{uid}"
    txn, reader = _overflowing_reader(c, kafka, topic)
    _stall_gap_readers(monkeypatch, reader, 1.0)  # until the gap reader has asked for the log start
    real_watermarks = PartitionReader.watermarks
    asked: list[int] = []

    def watermarks(self: PartitionReader, topic: str, partition: int) -> tuple[int, int]:
        low, high = real_watermarks(self, topic, partition)
        if self is not reader._scanner:
            asked.append(low)
        return low, high

    monkeypatch.setattr(PartitionReader, "watermarks", watermarks)
    try:
        assert reader.poll(1.0) == []  # the window overflowed: offsets 0-12 are left to a gap reader
        txn.commit()
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
            future.result(15)  # retention deleted offsets 0-4 ("open" and p0-p3)
        assert _committed_values(reader, 8) == [f"p{i}" for i in range(4, 12)]
        assert 5 in asked  # the stalled gap reader moved on to the log start it asked for
        assert reader.poll(0.5) == []
    finally:
        reader.close()


def test_latest_reader_starts_at_max_read_position_and_reads_only_later_messages(
    cluster: ClusterFactory, uid: str
) -> None:
    c = cluster()
    topic = f"latest_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(5):
        producer.send(f"old{i}")
    reader = c.client.create_reader(topic, LATEST)
    producer.send("new")
    assert _values(read_all(reader)) == ["new"]


def test_latest_reader_created_while_a_txn_is_open_reads_its_messages_once_it_commits(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    # LATEST is maxReadPosition (as for a consumer's Latest and get_last_message_ids), not the end
    # offset: the open transaction's messages, and what waits behind them, are read after its commit.
    c = cluster()
    topic = f"latest_open_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    producer.send("old")
    txn = c.client.transaction(60)
    producer.send("t0", txn=txn)
    producer.send("t1", txn=txn)
    producer.send("held")  # plain, behind the open transaction
    assert load_state(kafka, topic, 0)[0].max_read_position == 1
    reader = c.client.create_reader(topic, LATEST)
    producer.send("new")
    assert read_all(reader) == []
    txn.commit()
    assert _values(read_all(reader)) == ["t0", "t1", "held", "new"]


def test_corrupt_headers_forged_and_unknown_version_markers_are_skipped_never_delivered(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster(num_tcs=4)
    topic = f"bad_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    app = Appender(kafka)
    app.append(topic, 0, b"corrupt txn header", headers=[(TXN_HEADER, b"\x01\x02")]).result(10)
    app.append(topic, 0, b"unknown TC", headers=[(TXN_HEADER, TxnID(99, 1).to_bytes())]).result(10)
    app.append(topic, 0, b"PT\x0a\x09zz", headers=[(CTL_HEADER, MARKER_CTL)]).result(10)  # unknown version
    app.append(topic, 0, b"truncated", headers=[(CTL_HEADER, MARKER_CTL)]).result(10)
    app.append(topic, 0, b"unknown control", headers=[(CTL_HEADER, b"whatever")]).result(10)
    producer.send("good")
    app.close()
    assert _values(read_all(c.client.create_reader(topic))) == ["good"]
    state, _ = load_state(kafka, topic, 0, options=BufferOptions(num_tcs=4))
    counters = state.counters
    assert (counters.corrupt_txn_headers, counters.unknown_tc_records, counters.corrupt_markers) == (1, 1, 2)


def test_forged_marker_cannot_reveal_uncommitted_data_when_marker_authentication_is_on(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster(marker_secret="correct horse battery staple")
    topic = f"forge_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send("secret", txn=txn)
    # A plain Kafka producer writes a COMMIT marker without the secret.
    value, headers = encode_marker(TxnMarker(txn.txn_id, TxnAction.COMMIT, 0, 1, mac=b"\x00" * 32))
    app = Appender(kafka)
    app.append(topic, 0, value, headers=headers).result(10)
    app.close()
    producer.send("plain-after")
    assert read_all(c.client.create_reader(topic), 800) == []
    state, _ = load_state(kafka, topic, 0, options=c.client._buffer_options())
    assert state.counters.forged_markers == 1
    txn.abort()
    assert _values(read_all(c.client.create_reader(topic))) == ["plain-after"]


def test_a_forged_txn_message_cannot_hold_readers_back_when_marker_authentication_is_on(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """A plain Kafka producer writes a message of a TxnID its TC never allocated: without the
    secret's ``ptxn.txn.mac`` it opens nothing, so it neither pins maxReadPosition (no marker would
    ever end it) nor is delivered; signed transactions around it work as before."""
    c = cluster(marker_secret="correct horse battery staple")
    topic = f"forge_open_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with c.client.transaction(60) as txn:
        producer.send("committed-before", txn=txn)
    app = Appender(kafka)
    app.append(topic, 0, b"forged", headers=[(TXN_HEADER, TxnID(0, 10**12).to_bytes())]).result(10)
    app.close()
    open_txn = c.client.transaction(60)
    producer.send("open", txn=open_txn)  # signed: it pins as before
    producer.send("plain-held")
    assert _values(read_all(c.client.create_reader(topic), 800)) == ["committed-before"]
    open_txn.commit()
    producer.send("plain-after")
    assert _values(read_all(c.client.create_reader(topic))) == [
        "committed-before",
        "open",
        "plain-held",
        "plain-after",
    ]
    state, _ = load_state(kafka, topic, 0, options=c.client._buffer_options())
    assert state.counters.forged_txn_messages == 1 and not state.ongoing


def test_transactions_written_before_message_signing_stay_readable(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Producers before session 38 wrote no ``ptxn.txn.mac``: with a secret and
    ``PULSAR_TXN_UNSIGNED_TXN_HISTORY=1``, their committed transactions must stay readable when the
    partition is folded again from its start (a new reader, a Spark job's progress topic), up to the
    partition's first signed opening."""
    from pulsar_txn import producer as producer_module

    monkeypatch.setenv(UNSIGNED_TXN_HISTORY_ENV, "1")
    c = cluster(marker_secret="correct horse battery staple")
    topic = f"presign_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    monkeypatch.setattr(producer_module, "TXN_MAC_HEADER", "ptxn.not-signed-by-this-build")
    with c.client.transaction(60) as old:
        producer.send("old", txn=old)
    monkeypatch.setattr(producer_module, "TXN_MAC_HEADER", TXN_MAC_HEADER)
    with c.client.transaction(60) as new:
        producer.send("new", txn=new)
    assert _values(read_all(c.client.create_reader(topic))) == ["old", "new"]
    state, _ = load_state(kafka, topic, 0, options=c.client._buffer_options())
    assert state.txn_auth_from == 2 and state.counters.forged_txn_messages == 0  # old, its marker, new


def test_a_forged_opening_before_any_signed_one_does_not_hold_readers_back(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """Jepsen seed 3902 (session 39): the forger's unsigned message came before the partition's first
    signed opening, which armed the check too late: every reader stopped at it for good. Without
    ``PULSAR_TXN_UNSIGNED_TXN_HISTORY`` the check holds from the partition's start."""
    c = cluster(marker_secret="correct horse battery staple")
    topic = f"forge_first_{uid}"
    c.client.create_topic(topic, 1)
    app = Appender(kafka)
    app.append(topic, 0, b"forged", headers=[(TXN_HEADER, TxnID(0, 1 << 40).to_bytes())]).result(10)
    app.close()
    producer = c.client.create_producer(topic)
    with c.client.transaction(60) as txn:
        producer.send("committed", txn=txn)
    producer.send("plain")
    assert _values(read_all(c.client.create_reader(topic))) == ["committed", "plain"]
    state, _ = load_state(kafka, topic, 0, options=c.client._buffer_options())
    assert state.counters.forged_txn_messages == 1 and not state.ongoing


def test_a_snapshot_folded_with_unsigned_history_is_not_trusted_by_a_strict_reader(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot folded accepting unsigned openings (an earlier build, or the history setting) may
    hold a forged one among its open transactions: a reader checking from the start folds anew."""
    secret = "correct horse battery staple"
    c = cluster(marker_secret=secret, tb_service_enabled=False)
    topic = f"histsnap_{uid}"
    c.client.create_topic(topic, 1)
    app = Appender(kafka)
    app.append(topic, 0, b"forged", headers=[(TXN_HEADER, TxnID(0, 1 << 40).to_bytes())]).result(10)
    app.close()
    c.client.create_producer(topic).send("plain")
    options = c.client._buffer_options()
    monkeypatch.setenv(UNSIGNED_TXN_HISTORY_ENV, "1")
    lenient, _ = load_state(kafka, topic, 0, options=options)
    monkeypatch.delenv(UNSIGNED_TXN_HISTORY_ENV)
    assert lenient.txn_auth_from is None and lenient.ongoing  # the forged opening is open there
    store = SnapshotStore(kafka, topic=c.config.snapshot_topic)
    try:
        store.write(lenient).result(10)
        state, snapshot_at = load_state(kafka, topic, 0, store=store, options=options)
        assert snapshot_at is None  # folded from the start (before: the snapshot's forged txn held it)
        assert not state.ongoing and state.counters.forged_txn_messages == 1
    finally:
        store.close()
    assert _values(read_all(c.client.create_reader(topic))) == ["plain"]


def test_the_txn_message_check_armed_in_a_partition_is_carried_by_its_snapshot(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """The check is armed by the partition's first signed opening (unsigned ones before it are
    history from earlier producers). A reader starting from a snapshot taken after that point must
    refuse an unsigned opening too, as a full scan does: the snapshot carries ``txn_auth_from``."""
    secret = "correct horse battery staple"
    c = cluster(marker_secret=secret, tb_service_enabled=False)
    topic = f"armsnap_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with c.client.transaction(60) as txn:
        producer.send("signed", txn=txn)
    options = c.client._buffer_options()
    armed, _ = load_state(kafka, topic, 0, options=options)
    assert armed.txn_auth_from == 0
    store = SnapshotStore(kafka, topic=c.config.snapshot_topic)
    try:
        store.write(armed).result(10)
        app = Appender(kafka)
        app.append(topic, 0, b"forged", headers=[(TXN_HEADER, TxnID(0, 10**12).to_bytes())]).result(10)
        app.close()
        producer.send("plain-after")
        state, snapshot_at = load_state(kafka, topic, 0, store=store, options=options)
        assert snapshot_at == armed.scanned_to  # folded on from the snapshot, not from the start
        assert state.txn_auth_from == 0 and not state.ongoing
        assert state.counters.forged_txn_messages == 1
    finally:
        store.close()
    assert _values(read_all(c.client.create_reader(topic))) == ["signed", "plain-after"]


def test_a_forged_snapshot_cannot_reveal_uncommitted_data_when_marker_authentication_is_on(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    secret = "correct horse battery staple"
    c = cluster(marker_secret=secret, tb_service_enabled=False)
    topic = f"forgesnap_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send("secret", txn=txn)
    producer.send("plain-after")
    end = end_offsets(kafka, [(topic, 0)])[(topic, 0)]
    # A plain Kafka client (no secret) writes a snapshot: everything below the end scanned, nothing
    # open. Snapshots were trusted as they are: the reader delivered the open transaction's message.
    forged = TxnBufferState(topic, 0)
    forged.scanned_to = end
    store = SnapshotStore(kafka, topic=c.config.snapshot_topic)
    store.write(forged).result(10)
    key = secret.encode()
    assert store.load(topic, 0, marker_secret=key) is None  # ignored
    assert _values(read_all(c.client.create_reader(topic), 800)) == []
    # One written with the secret (as the TB service writes them) is used.
    genuine, _ = load_state(kafka, topic, 0, options=c.client._buffer_options())
    store.write(genuine).result(10)
    loaded = store.load(topic, 0, marker_secret=key)
    assert loaded is not None and loaded[0].ongoing == genuine.ongoing
    store.close()
    txn.abort()
    assert _values(read_all(c.client.create_reader(topic))) == ["plain-after"]


def test_hanging_transaction_in_an_unregistered_partition_is_resolved_by_an_abort_marker(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster(tb_hanging_check_after_ms=300)
    topic = f"hang_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    # Written with the TxnID but never registered with the TC (a client bypassing ADD_PARTITION).
    app = Appender(kafka)
    app.append(topic, 0, b"unregistered", headers=[(TXN_HEADER, txn.txn_id.to_bytes())]).result(10)
    app.close()
    producer.send("plain")
    txn.commit()  # the TC knows nothing of this partition: no marker there
    wait_until(
        lambda: (txn.txn_id, TxnAction.ABORT) in _markers(kafka, topic, 0), 20, what="resolving marker"
    )
    assert _values(read_all(c.client.create_reader(topic))) == ["plain"]
    # Resolved once: later checks, made before the service's fold read its marker back, skip it
    # (before, each check wrote another marker: six for one hanging transaction in a review run).
    time.sleep(1.5)
    assert _markers(kafka, topic, 0).count((txn.txn_id, TxnAction.ABORT)) == 1


def test_last_message_id_is_the_last_readable_message(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"last_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    assert c.client.get_last_message_ids(topic) == {0: None}
    first = producer.send("a")
    txn = c.client.transaction(60)
    producer.send("t", txn=txn)
    producer.send("b")
    assert c.client.get_last_message_ids(topic) == {0: first}
    txn.abort()
    assert c.client.get_last_message_ids(topic) == {0: MessageId(topic, 0, 2)}


def test_concurrent_sends_from_threads_all_commit_together(cluster: ClusterFactory, uid: str) -> None:
    c = cluster()
    topic = f"threads_{uid}"
    c.client.create_topic(topic, 4)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)

    def send(n: int) -> None:
        for i in range(20):
            producer.send_async(f"{n}-{i}", txn=txn, partition_key=str(n))

    threads = [threading.Thread(target=send, args=(n,)) for n in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    txn.commit()  # waits for every in-flight send
    assert len(read_all(c.client.create_reader(topic))) == 600


def test_e9_buffer_stats_after_one_committed_one_aborted_one_open_transaction(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    c = cluster()
    topic = f"e9_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for action in ("commit", "abort", None):
        txn = c.client.transaction(60)
        producer.send("x", txn=txn)
        if action == "commit":
            txn.commit()
        elif action == "abort":
            txn.abort()
    cmd = [
        sys.executable,
        "-m",
        "pulsar_txn.cli",
        "transaction-buffer-stats",
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--topic",
        topic,
    ]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"coordinator": {"snapshot_topic": c.config.snapshot_topic}}))
    out = subprocess.run(
        [*cmd, "--config", str(cfg)], capture_output=True, text=True, cwd=REPO, timeout=60, check=True
    )
    stats = json.loads(out.stdout)[f"persistent://public/default/{topic}-partition-0"]
    assert (stats["committed_txns"], stats["aborted_txns"], stats["ongoing_txn_size"]) == (1, 1, 1)
    assert stats["aborted_txn_size"] == 1 and stats["max_read_position"] == 4
    # After a snapshot, the stats say where recovery starts and when that snapshot was taken.
    before_ms = int(time.time() * 1000)
    with closing(SnapshotStore(kafka, topic=c.config.snapshot_topic)) as store:
        store.write(load_state(kafka, topic, 0)[0]).result(15)
    out = subprocess.run(
        [*cmd, "--config", str(cfg)], capture_output=True, text=True, cwd=REPO, timeout=60, check=True
    )
    stats = json.loads(out.stdout)[f"persistent://public/default/{topic}-partition-0"]
    assert stats["last_snapshot_offset"] == 5 and stats["max_read_position"] == 4
    assert before_ms - 1000 <= stats["last_snapshot_time"] <= int(time.time() * 1000)


def test_snapshot_of_a_deleted_topic_is_not_trusted_for_a_topic_recreated_under_its_name(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str, request: pytest.FixtureRequest
) -> None:
    c = cluster(tb_snapshot_max_changes=1)
    topic = f"recreated_{uid}"
    c.client.create_topic(topic, 1)
    # The old incarnation is written by a producer of its own: an idempotent producer that wrote the
    # old partition cannot write the new one (its sequence numbers would be out of order).
    old_writer = Appender(kafka)
    for i in range(30):
        old_writer.append(topic, 0, f"old{i}".encode())
    old_writer.flush()
    old_writer.close()
    store = SnapshotStore(kafka, topic=c.config.snapshot_topic)
    request.addfinalizer(store.close)  # its producer would outlive the test (and the broker)
    old, _ = load_state(kafka, topic, 0)
    store.write(old).result(15)
    assert (loaded := store.load(topic, 0)) is not None and loaded[0].scanned_to == 30
    admin = TopicAdmin(kafka)
    admin.delete_topics([topic])
    wait_until(lambda: not admin.topic_exists(topic) or topic not in admin.list_topics(), 15, what="deleted")
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    for i in range(5):
        producer.send(f"open{i}", txn=txn)
    producer.send("plain-after")
    # The old incarnation's snapshot claims offsets 0-29 were scanned with no open transaction; the
    # new incarnation's open transaction sits at offsets 0-4 and must not be delivered.
    assert store.load(topic, 0) is None
    state, from_snapshot = load_state(kafka, topic, 0, store=store)
    assert from_snapshot is None and state.max_read_position == 0
    reader = c.client.create_reader(topic)
    assert read_all(reader) == []
    txn.commit()
    assert _values(read_all(reader)) == [f"open{i}" for i in range(5)] + ["plain-after"]


def test_a_snapshot_whose_anchor_offset_holds_no_record_is_not_trusted(
    kafka: KafkaConfig, uid: str, request: pytest.FixtureRequest
) -> None:
    """The re-created topic holds a Kafka transaction's control record (never delivered to
    consumers) at the old snapshot's anchor offset: "no record there" was taken for compaction and
    the snapshot trusted, so an open transaction at offset 0 of the new topic was delivered (review,
    session 33). Data topics are not compacted: no record at the anchor means another partition."""
    from confluent_kafka import Producer

    topic, snapshots = f"anchorless_{uid}", f"__snap_anchorless_{uid}"
    admin = TopicAdmin(kafka)
    admin.ensure_topic(topic, 1)
    old_writer = Appender(kafka)
    for i in range(5):
        old_writer.append(topic, 0, f"old{i}".encode())
    old_writer.flush()
    old_writer.close()
    store = SnapshotStore(kafka, topic=snapshots, partitions=1)
    request.addfinalizer(store.close)
    old, _ = load_state(kafka, topic, 0)
    store.write(old).result(15)  # anchored at offset 4
    admin.delete_topics([topic])
    wait_until(lambda: topic not in admin.list_topics(), 15, what="deleted")
    time.sleep(1)
    admin.ensure_topic(topic, 1)
    writer = Appender(kafka)
    writer.append(topic, 0, b"UNCOMMITTED", headers=[(TXN_HEADER, TxnID(0, 7).to_bytes())]).result(15)
    writer.close()
    kafka_txn = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"tx-{uid}"})
    kafka_txn.init_transactions(20)
    kafka_txn.begin_transaction()
    for i in range(3):  # offsets 1-3; the commit's control record is offset 4
        kafka_txn.produce(topic, f"k{i}".encode(), partition=0)
    kafka_txn.commit_transaction(20)
    kafka_txn.begin_transaction()
    kafka_txn.produce(topic, b"k3", partition=0)
    kafka_txn.commit_transaction(20)
    kafka_txn.flush(10)
    del kafka_txn  # destroyed now, not left connecting to a broker that the session stops
    state, from_snapshot = load_state(kafka, topic, 0, store=store, options=BufferOptions(num_tcs=4))
    assert from_snapshot is None and state.max_read_position == 0


def test_commit_completes_when_a_partition_of_the_transaction_was_deleted_meanwhile(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    c = cluster(end_missing_topic_grace_ms=1_000)
    kept, deleted = f"kept_{uid}", f"gone_{uid}"
    c.client.create_topic(kept, 1)
    c.client.create_topic(deleted, 1)
    producer_kept = c.client.create_producer(kept)
    producer_gone = c.client.create_producer(deleted)
    txn = c.client.transaction(60)
    producer_kept.send("stays", txn=txn)
    producer_gone.send("goes", txn=txn)
    admin = TopicAdmin(kafka)
    admin.delete_topics([deleted])
    wait_until(lambda: deleted not in admin.list_topics(), 15, what="topic deleted")
    started = time.monotonic()
    txn.commit()  # the marker for the deleted partition is not needed: its records went with it
    assert time.monotonic() - started >= 1.0  # ... once the topic has been missing for the grace period
    assert _values(read_all(c.client.create_reader(kept))) == ["stays"]
    assert _markers(kafka, kept, 0) == [(txn.txn_id, TxnAction.COMMIT)]


def test_a_partition_whose_opening_failed_is_opened_by_the_next_read_not_left_unread(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One storage error while a reader opens its partitions (here, loading one partition's
    snapshot) is the caller's error for that read; the next read opens what is not open yet, so
    every message is delivered."""
    from kafka_store import BrokerUnavailableError
    from pulsar_txn.errors import PulsarTxnError

    c = cluster()
    topic = f"reopen_{uid}"
    c.client.create_topic(topic, 2)
    producer = c.client.create_producer(topic)
    for i in range(6):
        producer.send(f"v{i}", partition_key=str(i))
    real = SnapshotStore.load
    calls = [0]

    def flaky(self: SnapshotStore, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:  # the second partition's
            raise BrokerUnavailableError("injected: the snapshot topic did not answer")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SnapshotStore, "load", flaky)
    reader = c.client.create_reader(topic)
    with pytest.raises(PulsarTxnError):
        reader.read_next(2000)
    assert sorted(_values(read_all(reader))) == [f"v{i}" for i in range(6)]
    reader.close()


def test_a_client_without_num_tcs_folds_with_the_clusters_tc_count_as_the_service_does(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """Readers agree only if they fold with the same TC count. A client not told ``num_tcs`` learns
    it from the transaction log's partitions: a record naming TC 20 of a 4-TC cluster is discarded
    (no TC will ever end it), not an open transaction holding the partition back for good."""
    from pulsar_txn import Client

    c = cluster(num_tcs=4)
    topic = f"tccount_{uid}"
    c.client.create_topic(topic, 1)
    app = Appender(kafka)
    app.append(topic, 0, b"TC 20 of 4", headers=[(TXN_HEADER, TxnID(20, 1).to_bytes())]).result(10)
    app.close()
    c.client.create_producer(topic).send("after")
    plain = Client(
        "pulsar://unused:6650",
        kafka=kafka,
        log_topic=c.config.log_topic,
        snapshot_topic=c.config.snapshot_topic,
    )
    try:
        assert plain._buffer_options().num_tcs == 4
        assert _values(read_all(plain.create_reader(topic))) == ["after"]
        service_view = load_state(kafka, topic, 0, options=BufferOptions(num_tcs=4))[0]
        assert plain._buffer_state(topic, 0).max_read_position == service_view.max_read_position == 2
    finally:
        plain.close()


def test_read_next_with_no_wait_still_delivers_what_has_arrived(cluster: ClusterFactory, uid: str) -> None:
    """``read_next(0)`` in a loop (a non-blocking poll) must make progress: each call takes what the
    scanner has fetched by then. Before, a one-partition reader never scanned without time left."""
    from pulsar_txn.errors import Timeout

    c = cluster()
    topic = f"poll0_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send("hello")
    reader = c.client.create_reader(topic)
    got = None
    for _ in range(500):  # bounded: ~5 s
        try:
            got = reader.read_next(0)
            break
        except Timeout:
            time.sleep(0.01)
    reader.close()
    assert got is not None and got.data == b"hello"


def test_reading_never_creates_the_snapshot_topic(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """A reader may lack the right to create topics, or have the snapshot topic's name wrong (a
    Spark option typo created a topic, found in review): without the topic there is no snapshot,
    and the partition is scanned."""
    c = cluster()
    topic = f"nosnap_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic).send("x")
    store = SnapshotStore(kafka, topic=f"__typo_snapshots_{uid}")
    assert store.load(topic, 0) is None
    state, from_snapshot = load_state(kafka, topic, 0, store=store)
    assert from_snapshot is None and state.max_read_position == 1
    assert not TopicAdmin(kafka).topic_exists(f"__typo_snapshots_{uid}")


def test_the_window_behind_an_open_transaction_is_bounded_in_bytes_too(
    cluster: ClusterFactory, kafka: KafkaConfig, uid: str
) -> None:
    """Records scanned while an open transaction pins max_read_position wait in the window, which
    was bounded by count only: 50,000 records of any size (review, session 33: 600 x 500 KB held
    300 MB). Past window_max_bytes the window is dropped and read again once readable."""
    c = cluster()
    topic = f"window_bytes_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send(b"open", txn=txn)
    big = b"x" * 100_000
    for i in range(40):
        producer.send(big + str(i).encode())
    options = BufferOptions(num_tcs=c.config.num_tcs, window_max_bytes=1_000_000, fetch_batch=8)
    reader = CommittedReader(kafka, {(topic, 0): 0}, options=options)
    try:
        deadline = time.monotonic() + 10
        while reader.state(topic, 0).scanned_to < 41 and time.monotonic() < deadline:
            assert reader.poll(0.2) == []
            part = reader._parts[(topic, 0)]
            assert part.window_bytes <= 1_000_000
            assert sum(len(r.value or b"") for r in part.window) <= 1_000_000
        assert reader.state(topic, 0).scanned_to >= 41
        txn.commit()
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 41 and time.monotonic() < deadline:
            got += [r.value or b"" for r in reader.poll(0.5)]
        assert got == [b"open"] + [big + str(i).encode() for i in range(40)]
    finally:
        reader.close()


def test_a_reader_behind_a_snapshot_older_than_the_log_start_is_not_held_by_a_deleted_marker(
    cluster: ClusterFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot holds T open at offset 0; T then committed (marker at 2) and retention deleted
    offsets 0-2 before any reader folded the marker. A reader opening from that snapshot kept T open
    below the log start and delivered nothing, for good, while a full scan read on (review, session
    33). It now asks T's coordinator and ends T (at most every _DELETED_CHECK_S)."""
    monkeypatch.setattr(buffer_reader, "_DELETED_CHECK_S", 0.5)
    c = cluster(tb_service_enabled=False)
    topic = f"stale_snapshot_{uid}"
    _committed_behind_a_snapshot_then_deleted(c, kafka, admin, topic)
    options = BufferOptions(num_tcs=c.config.num_tcs, log_topic=c.config.log_topic)
    store = SnapshotStore(kafka, topic=c.config.snapshot_topic)
    try:
        reader = CommittedReader(kafka, {(topic, 0): 0}, store=store, options=options)
        try:
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < 2 and time.monotonic() < deadline:
                got += [r.value or b"" for r in reader.poll(0.3)]
            assert got == [b"p3", b"p4"]
            assert reader.snapshot_offsets[(topic, 0)] == 2  # it did start from the snapshot
        finally:
            reader.close()
    finally:
        store.close()


def _committed_behind_a_snapshot_then_deleted(
    c: Cluster, kafka: KafkaConfig, admin: TopicAdmin, topic: str
) -> Producer[bytes]:
    """A snapshot holds T open at 0, T commits (marker at 2), offsets 0-2 are deleted."""
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(60)
    producer.send(b"t0", txn=txn)
    producer.send(b"p1")
    options = BufferOptions(num_tcs=c.config.num_tcs, log_topic=c.config.log_topic)
    with closing(SnapshotStore(kafka, topic=c.config.snapshot_topic)) as store:
        held, _ = load_state(kafka, topic, 0, options=options)
        assert held.ongoing == {txn.txn_id: 0}
        store.write(held).result(15)
    txn.commit()
    producer.send(b"p3")
    producer.send(b"p4")
    admin.delete_records_before(topic, 0, 3).result(15)
    return producer


@pytest.mark.parametrize("kind", ["reader", "consumer"])
def test_a_latest_start_behind_a_snapshot_older_than_the_log_start_is_the_real_max_read_position(
    cluster: ClusterFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str, kind: str
) -> None:
    """The one-off state loads (a LATEST start, the last message id, the stats) kept T open below
    the log start: a LATEST reader or a new Latest subscription started at 0 and, once their own
    reader ended T, delivered p3 and p4, published before they existed (a retention review of
    session 43). Failed before."""
    c = cluster(tb_service_enabled=False)
    topic = f"stale_latest_{kind}_{uid}"
    producer = _committed_behind_a_snapshot_then_deleted(c, kafka, admin, topic)
    handle: Any = (
        c.client.create_reader(topic, LATEST) if kind == "reader" else c.client.subscribe(topic, f"s_{uid}")
    )
    producer.send(b"after")
    got: list[bytes] = []
    deadline = time.monotonic() + 8  # past the readers' own check for deleted markers (5 s)
    while time.monotonic() < deadline:
        try:
            got.append(bytes(handle.receive(300).data) if kind == "consumer" else handle.read_next(300).data)
        except Timeout:
            continue
    handle.close()
    assert got == [b"after"]


def test_the_last_message_id_and_stats_behind_a_snapshot_older_than_the_log_start(
    cluster: ClusterFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    from pulsar_txn.admin import TransactionsAdmin

    c = cluster(tb_service_enabled=False)
    topic = f"stale_last_{uid}"
    _committed_behind_a_snapshot_then_deleted(c, kafka, admin, topic)
    last = c.client.get_last_message_ids(topic)[0]
    assert last is not None and last.offset == 4
    (stats,) = TransactionsAdmin(c.client).transaction_buffer_stats(topic).values()
    assert stats["ongoing_txn_size"] == 0 and stats["max_read_position"] == 5
