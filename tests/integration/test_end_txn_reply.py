"""When END_TXN is answered: after the markers (Pulsar, the default) or after the durable decision
(``end_txn_reply=after_decision``, as Kafka's EndTxn). Real broker; the markers go to Kafka through
real endpoints behind a gate the test opens, so "answered before the markers" is observable."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from kafka_store import Appender, KafkaConfig, TopicAdmin
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.coordinator.endpoints import KafkaTxnEndpoints
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import wait_until
from tests.integration.test_coordinator import _markers

pytestmark = pytest.mark.integration

ConfigFactory = Callable[..., CoordinatorConfig]


class GatedEndpoints:
    """Real marker writes that wait for ``gate`` first (a slow or unreachable participant)."""

    def __init__(self, inner: KafkaTxnEndpoints) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.waiting = 0

    async def _pass(self) -> None:
        self.waiting += 1
        while not self.gate.is_set():  # polled, so that stopping the coordinator cancels it cleanly
            await asyncio.sleep(0.01)

    async def end_on_partition(
        self,
        partition: str,
        txn_id: TxnID,
        action: TxnAction,
        low_watermark: int,
        *,
        recovering: bool = False,
    ) -> None:
        await self._pass()
        await self.inner.end_on_partition(partition, txn_id, action, low_watermark, recovering=recovering)

    async def end_on_subscription(
        self, topic: str, subscription: str, txn_id: TxnID, action: TxnAction, low_watermark: int
    ) -> None:
        await self._pass()
        await self.inner.end_on_subscription(topic, subscription, txn_id, action, low_watermark)


@contextmanager
def gated_coordinator(
    kafka: KafkaConfig, admin: TopicAdmin, cfg: CoordinatorConfig
) -> Iterator[tuple[EmbeddedCoordinator, GatedEndpoints]]:
    appender = Appender(kafka)
    endpoints = GatedEndpoints(KafkaTxnEndpoints(appender, admin, num_tcs=cfg.num_tcs))
    ec = EmbeddedCoordinator(kafka, cfg, serve=False, endpoints=endpoints)
    try:
        ec.start(wait_ready=30)
        yield ec, endpoints
    finally:
        endpoints.gate.set()
        ec.stop()
        appender.close()


def _status(ec: EmbeddedCoordinator, txn: TxnID) -> TxnStatus | None:
    assert ec.service is not None
    meta = ec.service.coordinator(txn.tc_id).get(txn)
    return None if meta is None else meta.status


def test_by_default_end_txn_is_answered_only_after_the_markers(
    coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"data_{uid}"
    admin.ensure_topic(topic, 1)
    with gated_coordinator(kafka, admin, coord_config(static_tc_ids=(0,))) as (ec, endpoints):
        assert ec.service is not None
        s = ec.service
        txn = ec.run(s.new_txn(0, 0))
        ec.run(s.add_partitions(txn, [f"{topic}-partition-0"]))
        ending = ec.submit(s.end_txn(txn, TxnAction.COMMIT))
        wait_until(lambda: endpoints.waiting == 1, 10, what="the marker write reached the gate")
        assert not ending.done() and _status(ec, txn) is TxnStatus.COMMITTING
        endpoints.gate.set()
        ending.result(10)
        assert _status(ec, txn) is TxnStatus.COMMITTED
        assert [m[1:3] for m in _markers(kafka, topic, 0)] == [(txn, TxnAction.COMMIT)]


def test_after_decision_end_txn_is_answered_before_the_markers_which_follow(
    coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"data_{uid}"
    admin.ensure_topic(topic, 1)
    cfg = coord_config(static_tc_ids=(0,), end_txn_reply="after_decision")
    with gated_coordinator(kafka, admin, cfg) as (ec, endpoints):
        assert ec.service is not None
        s = ec.service
        txn = ec.run(s.new_txn(0, 0))
        ec.run(s.add_partitions(txn, [f"{topic}-partition-0"]))
        ec.run(s.end_txn(txn, TxnAction.COMMIT), timeout=10)  # answered with the gate closed
        assert _status(ec, txn) is TxnStatus.COMMITTING
        assert _markers(kafka, topic, 0) == []
        ec.run(s.end_txn(txn, TxnAction.COMMIT), timeout=10)  # a repeat is answered the same way
        endpoints.gate.set()
        wait_until(lambda: _status(ec, txn) is TxnStatus.COMMITTED, 10, what="the outcome logged")
        assert [m[1:3] for m in _markers(kafka, topic, 0)] == [(txn, TxnAction.COMMIT)]


def test_a_decision_answered_before_its_markers_is_carried_out_by_the_next_owner(
    coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"data_{uid}"
    admin.ensure_topic(topic, 2)
    cfg = coord_config(static_tc_ids=(0,), end_txn_reply="after_decision")
    with gated_coordinator(kafka, admin, cfg) as (ec, _endpoints):
        assert ec.service is not None
        s = ec.service
        committed, aborted = ec.run(s.new_txn(0, 0)), ec.run(s.new_txn(0, 0))
        ec.run(s.add_partitions(committed, [f"{topic}-partition-0", f"{topic}-partition-1"]))
        ec.run(s.add_partitions(aborted, [f"{topic}-partition-1"]))
        ec.run(s.end_txn(committed, TxnAction.COMMIT), timeout=10)
        ec.run(s.end_txn(aborted, TxnAction.ABORT), timeout=10)
        ec.stop()  # the owner goes away with both decisions logged and no marker written
    assert _markers(kafka, topic, 0) == [] and _markers(kafka, topic, 1) == []
    successor = EmbeddedCoordinator(kafka, cfg, serve=False).start(wait_ready=30)
    try:
        wait_until(
            lambda: _status(successor, committed) is TxnStatus.COMMITTED, 20, what="commit carried out"
        )
        wait_until(lambda: _status(successor, aborted) is TxnStatus.ABORTED, 20, what="abort carried out")
        assert [m[1:3] for m in _markers(kafka, topic, 0)] == [(committed, TxnAction.COMMIT)]
        assert sorted(m[2] for m in _markers(kafka, topic, 1)) == [TxnAction.COMMIT, TxnAction.ABORT]
    finally:
        successor.stop()
