"""Ownership of TC ids through consumer-group assignment, and fencing of deposed owners."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kafka_store import KafkaConfig, TopicAdmin
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.errors import CoordinatorFencedError, TransactionCoordinatorNotFoundError
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import wait_until
from tests.integration.test_coordinator import _markers

pytestmark = pytest.mark.integration

Factory = Callable[..., EmbeddedCoordinator]
ConfigFactory = Callable[..., CoordinatorConfig]


def test_two_instances_share_tcs_and_survivor_takes_over_and_recovers(
    embedded: Factory, coord_config: ConfigFactory
) -> None:
    cfg = coord_config(ownership="group", static_tc_ids=(), group_session_timeout_ms=6000)
    a = embedded(cfg)
    wait_until(lambda: len(a.owned_tcs()) == 4, 30, what="A owns all TCs")
    b = embedded(cfg, wait=False)
    wait_until(
        lambda: a.owned_tcs() and b.owned_tcs() and len(a.owned_tcs()) + len(b.owned_tcs()) == 4,
        45,
        what="TCs split between A and B",
    )
    assert set(a.owned_tcs()).isdisjoint(b.owned_tcs())
    tc_b = b.owned_tcs()[0]
    txn = b.run(b.service.new_txn(tc_b, 60_000))
    with pytest.raises(TransactionCoordinatorNotFoundError):
        a.run(a.service.new_txn(tc_b, 0))
    kept = a.owned_tcs()
    b.stop()
    wait_until(lambda: len(a.owned_tcs()) == 4, 45, what="A takes B's TCs over")
    time.sleep(2)  # the rebalance revokes and reassigns everything: A must keep its own TCs too
    assert a.owned_tcs() == [0, 1, 2, 3]
    assert set(kept) <= set(a.owned_tcs())
    meta = a.service.coordinator(tc_b).get(txn)
    assert meta is not None and meta.status is TxnStatus.OPEN
    a.run(a.service.end_txn(txn, TxnAction.COMMIT))
    assert a.service.coordinator(tc_b).get(txn).status is TxnStatus.COMMITTED  # type: ignore[union-attr]


def test_deposed_owner_cannot_decide_an_outcome_when_two_instances_both_own_tc0(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"fence_{uid}"
    admin.ensure_topic(topic, 1)
    cfg = coord_config(static_tc_ids=(0,))
    a = embedded(cfg)
    txn = a.run(a.service.new_txn(0, 60_000))
    a.run(a.service.add_partitions(txn, [topic]))
    holder: dict[str, EmbeddedCoordinator] = {}

    async def b_claims_then_a_commits() -> None:
        # Runs on A's loop and blocks it while B starts: A cannot see B's claim and still believes it
        # owns TC 0 when it tries to commit. Read-back of its COMMITTING record must expose the claim.
        holder["b"] = embedded(cfg)
        assert a.service.owned_tcs() == [0]
        await a.service.end_txn(txn, TxnAction.COMMIT)

    with pytest.raises((CoordinatorFencedError, TransactionCoordinatorNotFoundError)):
        a.run(b_claims_then_a_commits())
    b = holder["b"]
    wait_until(lambda: a.owned_tcs() == [], 10, what="A gives TC 0 up")
    # B replayed the log up to its claim: the zombie's COMMITTING came later and does not count.
    meta_b = b.service.coordinator(0).get(txn)
    assert meta_b is not None and meta_b.status is TxnStatus.OPEN
    b.run(b.service.end_txn(txn, TxnAction.ABORT))
    assert [(m[1], m[2]) for m in _markers(kafka, topic, 0)] == [(txn, TxnAction.ABORT)]
    # A fresh replay of the whole log agrees with B.
    b.stop()
    c = embedded(cfg)
    meta_c = c.service.coordinator(0).get(txn)
    assert meta_c is not None and meta_c.status is TxnStatus.ABORTED
    assert c.run(c.service.new_txn(0, 0)) == TxnID(0, 1)


def test_idle_owner_notices_a_newer_claim_through_its_refresh_read(
    embedded: Factory, coord_config: ConfigFactory
) -> None:
    cfg = coord_config(static_tc_ids=(0,))
    a = embedded(cfg)
    for _ in range(20):  # own writes the refresh skips over (it seeks past what A already knows)
        a.run(a.service.new_txn(0, 60_000))
    time.sleep(2.5)  # A's tail has gone idle: only its once-a-second refresh reads now
    b = embedded(cfg)
    assert b.owned_tcs() == [0]
    # A writes nothing more, so only the refresh can show it the newer claim.
    wait_until(lambda: a.owned_tcs() == [], 10, what="idle A gives TC 0 up")


def test_an_instance_whose_start_fails_leaves_the_coordinator_group(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose TB service cannot start stops its coordinator service too: otherwise that
    service stays in the group holding TCs that nobody serves (the process lives on in a library
    user's or EmbeddedCoordinator's hands)."""
    from kafka_store import StoreError
    from pulsar_txn.buffer.service import TransactionBufferService

    cfg = coord_config(ownership="group", static_tc_ids=(), group_session_timeout_ms=6000)

    def fail(_self: TransactionBufferService) -> None:
        time.sleep(3)  # the coordinator group has assigned the TCs meanwhile
        raise StoreError("snapshot topic: the broker timed out")

    monkeypatch.setattr(TransactionBufferService, "start", fail)
    failed = EmbeddedCoordinator(kafka, cfg.model_copy(update={"tb_service_enabled": True}))
    with pytest.raises(StoreError):
        failed.start(wait_ready=None)
    b = embedded(cfg)
    wait_until(lambda: b.owned_tcs() == [0, 1, 2, 3], 30, what="the next instance owns every TC")
