"""With a marker secret, the coordinator's own records (transaction log, owner directory) are
authenticated: a plain Kafka producer without the secret can no longer forge a decision the
coordinator would carry out with signed markers, fence a TC with a claim, or point clients (and
their auth tokens) at another host. Found by the session-34 security review; each test failed
before the fix."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from kafka_store import REGISTRY, Appender, KafkaConfig, read_range
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.coordinator.fold import read_tc_log
from pulsar_txn.coordinator.records import TXN_META, TxnMeta, claim_key, encode_claim, txn_key
from pulsar_txn.coordinator.service import OWNER
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.message import EARLIEST
from tests.conftest import Cluster, read_all, wait_until

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]
SECRET = "marker-s3cret"


def _forge(kafka: KafkaConfig, topic: str, partition: int, key: bytes, value: bytes) -> None:
    """What anyone able to write the topic can do: a plain produce, no secret."""
    appender = Appender(kafka)
    try:
        appender.append(topic, partition, value, key=key).result(10)
    finally:
        appender.close()


def test_a_forged_decision_and_claim_neither_fence_the_owner_nor_commit_after_a_failover(
    cluster: ClusterFactory, kafka: KafkaConfig, embedded: Callable[..., EmbeddedCoordinator], uid: str
) -> None:
    """The forger copies an open transaction's record as COMMITTING at the current epoch and adds a
    claim. Before, the claim fenced the owner and whoever recovered the TC next carried the forged
    decision out: a transaction its client never committed became visible."""
    c = cluster(marker_secret=SECRET, tb_service_enabled=False)
    log_topic = c.config.log_topic
    topic = f"forged_log_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(120)
    producer.send(b"uncommitted", txn=txn)
    producer.flush()
    tc = txn.txn_id.most_bits
    meta: TxnMeta | None = None
    epoch = -1
    for rec in read_range(kafka, log_topic, tc):
        if rec.key and rec.key.startswith(b"claim/"):
            epoch = rec.offset
        if rec.key and rec.key.startswith(f"txn/{tc}/{txn.txn_id.least_bits}@".encode()) and rec.value:
            meta = TxnMeta.from_fields(REGISTRY.decode_as(TXN_META, rec.value))
    assert meta is not None and meta.partitions
    meta.status = TxnStatus.COMMITTING
    _forge(kafka, log_topic, tc, txn_key(txn.txn_id, epoch), meta.encode(epoch))
    forged_claim = encode_claim(tc, "forger", "pulsar://127.0.0.1:1", int(time.time() * 1000))
    _forge(kafka, log_topic, tc, claim_key(tc, "forger"), forged_claim)
    time.sleep(2)  # the owner's tail reads both (a refresh read comes at least every second)
    assert tc in c.coordinator.owned_tcs(), "a forged claim fenced the owner"

    # A failover: the next owner replays the log, forged records included.
    c.coordinator.stop()
    successor = embedded(c.config)
    assert tc in successor.owned_tcs()
    fold = read_tc_log(kafka, log_topic, tc, SECRET.encode())
    assert fold.txns[txn.txn_id.least_bits].status is TxnStatus.OPEN
    assert fold.skipped_records >= 2
    time.sleep(1)
    assert read_all(c.client.create_reader(topic), 1000) == []


def test_a_forged_claim_does_not_take_a_static_tc_out_of_service(cluster: ClusterFactory) -> None:
    """Static ownership never claims a TC back: one forged claim used to unserve it for good."""
    c = cluster(marker_secret=SECRET, tb_service_enabled=False)
    assert 0 in c.coordinator.owned_tcs()
    forged = encode_claim(0, "forger", "pulsar://127.0.0.1:1", int(time.time() * 1000))
    _forge(c.kafka, c.config.log_topic, 0, claim_key(0, "forger"), forged)
    time.sleep(2)
    assert 0 in c.coordinator.owned_tcs()
    with c.client.transaction(30) as txn:  # TC 0..3 all still answer
        assert txn.txn_id is not None


def test_a_forged_owner_entry_does_not_redirect_lookups(
    cluster: ClusterFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A TcOwner record with a huge epoch used to win the directory for good, and LOOKUPs for that
    TC were redirected to the forger's host (a following client sends its token there)."""
    c = cluster(marker_secret=SECRET, static_tc_ids=(0, 1, 2), tb_service_enabled=False)
    evil = "pulsar://127.0.0.1:1"
    forged = OWNER.encode({"tc_id": 3, "epoch": 2**62, "owner_id": "evil", "owner_url": evil})
    with caplog.at_level(logging.WARNING, logger="pulsar_txn.coordinator.service"):
        _forge(c.kafka, c.config.owners_topic, 0, b"3", forged)
        wait_until(
            lambda: "owner directory offset" in caplog.text and "failed authentication" in caplog.text,
            20,
            what="the forged owner entry read and refused",
        )
    assert c.coordinator.service.owner_url(3) != evil


def test_a_copied_signed_claim_does_not_fence_the_owner(cluster: ClusterFactory) -> None:
    """The MAC cannot bind an offset, and a claim's epoch is its offset: a signed claim re-sent as it
    is (key, value, MAC header) was a newer, valid claim and fenced the owner (found by review). A
    claim is written once, so a second record with the same value is a copy and skipped."""
    c = cluster(marker_secret=SECRET, tb_service_enabled=False)
    log_topic = c.config.log_topic
    claim = next(r for r in read_range(c.kafka, log_topic, 0) if r.key and r.key.startswith(b"claim/"))
    assert claim.key is not None and claim.value is not None
    appender = Appender(c.kafka)
    try:
        appender.append(log_topic, 0, claim.value, key=claim.key, headers=list(claim.headers)).result(10)
    finally:
        appender.close()
    time.sleep(2)
    assert 0 in c.coordinator.owned_tcs()
    fold = read_tc_log(c.kafka, log_topic, 0, SECRET.encode())
    assert fold.epoch == claim.offset and fold.skipped_records == 1


def test_a_copied_open_record_does_not_make_a_failover_commit_skip_partitions(
    cluster: ClusterFactory, kafka: KafkaConfig, embedded: Callable[..., EmbeddedCoordinator], uid: str
) -> None:
    """Signing stops forged content, not copies: the transaction's first OPEN record (no partitions)
    written to the log again after its ADD_PARTITIONs made the next owner commit it with no markers
    (session 39's review: one partition's committed message held back, the other's aborted)."""
    from pulsar_txn.client import Client

    c = cluster(marker_secret=SECRET, tb_service_enabled=False)
    log_topic = c.config.log_topic
    ta, tb = f"cpA_{uid}", f"cpB_{uid}"
    c.client.create_topic(ta, 1)
    c.client.create_topic(tb, 1)
    pa, pb = c.client.create_producer(ta), c.client.create_producer(tb)
    txn = c.client.transaction(300)
    pa.send(b"a-committed", txn=txn)
    pb.send(b"b-committed", txn=txn)
    tc, seq = txn.txn_id.most_bits, txn.txn_id.least_bits
    first = next(
        r
        for r in read_range(kafka, log_topic, tc)
        if r.key and r.key.startswith(f"txn/{tc}/{seq}@".encode()) and r.value
    )
    appender = Appender(kafka)  # byte for byte, its signature included
    appender.append(log_topic, tc, first.value, key=first.key, headers=list(first.headers)).result(10)
    appender.close()
    assert len(read_tc_log(kafka, log_topic, tc, SECRET.encode()).txns[seq].partitions) == 2
    c.coordinator.stop()  # a failover: the next owner folds the log
    successor = embedded(c.config, serve=True)
    client = Client(
        successor.url or "",
        kafka=kafka,
        num_tcs=c.config.num_tcs,
        marker_secret=SECRET,
        snapshot_topic=c.config.snapshot_topic,
        log_topic=log_topic,
    )
    try:
        client.resume_transaction(txn.txn_id).commit()
        assert [m.data for m in read_all(client.create_reader(ta))] == [b"a-committed"]
        assert [m.data for m in read_all(client.create_reader(tb))] == [b"b-committed"]
    finally:
        client.close()


def test_a_log_written_without_the_secret_never_has_its_txn_ids_handed_out_again(
    cluster: ClusterFactory, uid: str
) -> None:
    """Found by the upgrade review (session 42): a cluster upgraded from a build that did not sign
    its transaction log (before session 34), or one whose secret is set for the first time, folds
    none of the earlier records, and its TCs handed out TxnIDs from 0 again. Where the old (0,0)'s
    marker counts (signed by the old build, or read with ``PULSAR_TXN_UNSIGNED_TXN_HISTORY=1``),
    the new (0,0) was taken for ended: commit() succeeded and its messages were never delivered."""
    topic = f"unsigned_history_{uid}"
    before = cluster(num_tcs=1, static_tc_ids=(0,))  # a log no record of which is signed
    before.client.create_topic(topic, 1)
    old_ids = []
    for i in range(3):
        with before.client.transaction(60) as txn:
            before.client.create_producer(topic).send(f"old{i}".encode(), txn=txn)
        old_ids.append(txn.txn_id)
    before.stop()

    after = cluster(num_tcs=1, static_tc_ids=(0,), marker_secret=SECRET)
    producer = after.client.create_producer(topic)
    with after.client.transaction(60) as txn:
        producer.send(b"new", txn=txn)
    assert txn.txn_id.least_bits > max(t.least_bits for t in old_ids)
    reader = after.client.create_reader(topic, EARLIEST)
    try:
        assert b"new" in [m.data for m in read_all(reader)]
    finally:
        reader.close()
