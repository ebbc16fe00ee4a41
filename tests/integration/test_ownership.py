"""Ownership of TC ids through consumer-group assignment, and fencing of deposed owners."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_store import KafkaConfig, TopicAdmin
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.errors import CoordinatorFencedError, Timeout, TransactionCoordinatorNotFoundError
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


def test_a_stray_claim_does_not_leave_a_tc_the_group_assigns_without_owner(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig
) -> None:
    """A claim landing late (written by an acquisition whose TC a rebalance revoked meanwhile)
    fences the TC's owner. The group still assigns the TC to that owner and the late writer no
    longer wants it, so nobody else would claim it until the next rebalance: the owner claims it
    again, and serves it."""
    from kafka_store import Appender
    from pulsar_txn.coordinator.records import claim_key, encode_claim

    cfg = coord_config(ownership="group", static_tc_ids=(), group_session_timeout_ms=6000)
    b = embedded(cfg)
    wait_until(lambda: b.owned_tcs() == [0, 1, 2, 3], 30, what="B owns every TC")
    app = Appender(kafka)

    def stray_claim() -> float:
        stray = encode_claim(2, "revoked-acquisition", "pulsar://gone:6650", int(time.time() * 1000))
        app.append(cfg.log_topic, 2, stray, key=claim_key(2, "revoked-acquisition")).result(10)
        wait_until(lambda: 2 not in b.owned_tcs(), 10, what="the stray claim fences TC 2")
        fenced = time.monotonic()
        wait_until(lambda: b.owned_tcs() == [0, 1, 2, 3], 20, what="B claims TC 2 again")
        return time.monotonic() - fenced

    try:
        assert stray_claim() >= 4.9  # time for a real claimant's recovery to publish its ownership
    finally:
        app.close()
    txn = b.run(b.service.new_txn(2, 60_000))
    b.run(b.service.end_txn(txn, TxnAction.COMMIT))
    assert b.service.coordinator(2).get(txn).status is TxnStatus.COMMITTED  # type: ignore[union-attr]


def test_a_tc_released_while_it_recovers_never_becomes_ready(
    embedded: Factory, coord_config: ConfigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Revoked (or the service stopping) during its recovery, a TC stops recovering: it does not
    become READY detached from the service, running timeouts whose records nobody confirms."""
    import asyncio

    from pulsar_txn.coordinator import tc as tc_module
    from pulsar_txn.coordinator.tc import TcState

    cfg = coord_config(static_tc_ids=(0,))
    a = embedded(cfg)
    a.run(a.service.new_txn(0, 60_000))
    a.stop()
    seen: dict[str, object] = {}
    adopt = tc_module.TransactionCoordinator._adopt

    async def held_adopt(self: tc_module.TransactionCoordinator, stale: list[bytes]) -> None:
        seen["tc"] = self
        gate = seen.setdefault("gate", asyncio.Event())
        assert isinstance(gate, asyncio.Event)
        await gate.wait()
        await adopt(self, stale)

    monkeypatch.setattr(tc_module.TransactionCoordinator, "_adopt", held_adopt)
    b = embedded(cfg, wait=False)
    wait_until(lambda: "tc" in seen, 20, what="B's recovery reaches the adoption step")
    recovering = seen["tc"]
    assert isinstance(recovering, tc_module.TransactionCoordinator)

    async def release_then_resume() -> None:
        await b.service.release(0)  # what a revocation does
        gate = seen["gate"]
        assert isinstance(gate, asyncio.Event)
        gate.set()
        await asyncio.sleep(1.0)

    b.run(release_then_resume())
    assert recovering.state is TcState.CLOSED
    assert b.owned_tcs() == []
    assert not recovering._tasks  # no timeout or retire loop runs for it


def test_a_deposed_owner_does_not_say_not_found_for_a_txn_the_new_owner_committed(
    embedded: Factory, coord_config: ConfigFactory
) -> None:
    """A deposed owner whose tail has not read the newer claim yet knows nothing of a transaction
    the new owner created and committed. It answered a client's retry of END_TXN with
    TransactionNotFound (not retriable: the client would redo committed work). A refusal is now
    given only after a read-back proves the TC still ours; here that read-back finds the newer claim,
    and the answer is CoordinatorFencedError (retriable: the client looks the owner up again)."""
    cfg = coord_config(static_tc_ids=(0,))
    a = embedded(cfg)
    a.run(a.service.new_txn(0, 60_000))
    tc_a = a.service.coordinator(0)
    held: list[Any] = []
    deliver = tc_a.on_records
    tc_a.on_records = held.extend  # type: ignore[method-assign]  # A's tail lags (idle, slow, cut off)
    b = embedded(cfg)
    txn = b.run(b.service.new_txn(0, 60_000))
    b.run(b.service.end_txn(txn, TxnAction.COMMIT))
    assert a.service.owned_tcs() == [0]  # A still believes it owns TC 0
    answer = a.submit(a.service.end_txn(txn, TxnAction.COMMIT))  # a client's retry that reached A
    time.sleep(0.5)
    assert not answer.done()  # no answer from stale memory
    tc_a.on_records = deliver  # type: ignore[method-assign]
    assert a._loop is not None
    a._loop.loop.call_soon_threadsafe(deliver, list(held))
    with pytest.raises(CoordinatorFencedError) as fenced:
        answer.result(10)
    assert fenced.value.retriable
    wait_until(lambda: a.owned_tcs() == [], 10, what="A gives TC 0 up")


def test_a_replay_longer_than_the_recovery_timeout_completes_while_it_progresses(
    embedded: Factory, coord_config: ConfigFactory, kafka: KafkaConfig
) -> None:
    """``recovery_timeout_ms`` bounded the whole replay: a TC whose log took longer to replay was
    never recovered (each attempt wrote a new claim and replayed from the start again). It now
    bounds a replay that makes no progress."""
    from kafka_store import Appender
    from pulsar_txn.coordinator.records import TxnMeta, txn_key

    cfg = coord_config(static_tc_ids=(0,), recovery_timeout_ms=300)
    first = embedded(cfg)  # creates the log
    first.stop()
    app = Appender(kafka, linger_ms=20)
    now = int(time.time() * 1000)
    futures = []
    for seq in range(150_000):  # a busy TC's log head, not compacted yet
        meta = TxnMeta(TxnID(0, seq), TxnStatus.COMMITTED, 60_000, 1, 2, 3, ended_at_ms=now)
        futures.append(app.append(cfg.log_topic, 0, meta.encode(0), key=txn_key(meta.txn_id, 0)))
    futures[-1].result(60)
    app.close()
    started = time.monotonic()
    b = embedded(cfg, wait=False)

    def recovered() -> bool:
        try:
            return b.owned_tcs() == [0]
        except Timeout:  # the replay keeps the coordinator's loop busy (a loaded machine: > 10 s)
            return False

    wait_until(recovered, 90, what="TC 0 recovered")
    assert time.monotonic() - started > 0.3  # the replay took longer than the timeout


def test_two_instances_that_both_believe_the_group_assigns_them_a_tc_do_not_fence_each_other_for_ever(
    embedded: Factory, coord_config: ConfigFactory, uid: str
) -> None:
    """Two instances with one group_instance_id (a restarted instance while the old process still
    lives): the group fences the old member, whose own view of its assignment may lag. Claiming a TC
    back whenever fenced while "assigned" made them take TC 0 from each other about once a second.
    A claim that makes an owner (its TcOwner record) is left alone."""
    cfg = coord_config(
        ownership="group",
        static_tc_ids=(),
        group_session_timeout_ms=6000,
        num_tcs=1,
        group_instance_id=f"inst_{uid}",
    )
    a = embedded(cfg)
    wait_until(lambda: a.owned_tcs() == [0], 30, what="A owns TC 0")
    b = embedded(cfg, wait=False)
    wait_until(lambda: b.owned_tcs() == [0], 30, what="B owns TC 0")
    changes, last = 0, (a.owned_tcs(), b.owned_tcs())
    end = time.monotonic() + 8
    while time.monotonic() < end:
        now = (a.owned_tcs(), b.owned_tcs())
        changes += now != last
        last = now
        time.sleep(0.05)
    assert changes <= 1 and last == ([], [0]), (changes, last)


def test_an_instance_recovering_a_tc_does_not_send_clients_to_the_owner_it_deposed(
    embedded: Factory, coord_config: ConfigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While B recovers TC 0 (its claim has deposed A), LOOKUP at B redirected clients to A, the
    owner the directory still named (dead, or about to answer "not owned"); it is ServiceNotReady
    (retriable) until B is ready."""
    import asyncio

    from pulsar_txn.coordinator import tc as tc_module

    cfg = coord_config(static_tc_ids=(0,))
    a = embedded(cfg, serve=True)  # serving: its ownership record names its URL
    a.stop()
    gate: dict[str, asyncio.Event] = {}
    adopt = tc_module.TransactionCoordinator._adopt

    async def held_adopt(self: tc_module.TransactionCoordinator, stale: list[bytes]) -> None:
        await gate.setdefault("open", asyncio.Event()).wait()
        await adopt(self, stale)

    monkeypatch.setattr(tc_module.TransactionCoordinator, "_adopt", held_adopt)
    b = embedded(cfg, wait=False)
    wait_until(lambda: "open" in gate, 20, what="B's recovery reaches the adoption step")
    wait_until(lambda: bool((b.service._owners.get(0) or (0, ""))[1]), 10, what="B knows A's record")
    assert b.service.owner_url(0) is None  # not A's URL
    b.run(_set(gate["open"]))
    wait_until(lambda: b.owned_tcs() == [0], 20, what="B ready")
    assert b.service.owner_url(0) == b.service.advertised_url


async def _set(event: Any) -> None:
    event.set()
