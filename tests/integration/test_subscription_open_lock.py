"""A partition being opened (its reader may load a snapshot and ask for watermarks: network round
trips) holds the subscription's read lock, not the lock that acks and stats take: the asyncio
consumer calls ``stats()`` and ``pending_transactions()`` on its event loop, which a slow open
blocked for as long as it took (session 38)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

from kafka_store import StoreError
from pulsar_txn.errors import NotAllowedError
from tests.conftest import Cluster, fill_topic, receive_all, wait_until

pytestmark = pytest.mark.integration


def test_a_slow_partition_opening_does_not_block_stats(
    cluster: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c: Cluster = cluster()
    topic, sub = f"slowopen_{uid}", f"fo_{uid}"
    fill_topic(c, topic, 8, partitions=2, keyed=True)
    f1 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    f2 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    wait_until(
        lambda: len(f1.assigned_partitions()) == 1 and len(f2.assigned_partitions()) == 1,
        30,
        what="split",
    )
    mine = receive_all(f1, 800)
    entered, release = threading.Event(), threading.Event()
    real_add = f1._reader.add_partition

    def slow_add(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(10)  # a snapshot load or a watermark request on a slow broker
        return real_add(*args, **kwargs)

    monkeypatch.setattr(f1._reader, "add_partition", slow_add)
    f2.close()  # f1 is given f2's partition and opens it
    assert entered.wait(30), "f1 never opened the partition"
    try:
        t0 = time.monotonic()
        stats = f1.stats()
        pending = f1.pending_transactions()
        took = time.monotonic() - t0
    finally:
        release.set()
    assert took < 3.0, f"stats() and pending_transactions() waited {took:.1f} s for the opening partition"
    assert pending == {} and len(stats["partitions"]) <= 1  # the rebalance revoked what f1 held
    wait_until(lambda: len(f1.assigned_partitions()) == 2, 30, what="f1 holds both partitions")
    # Nothing was acknowledged: after the rebalance f1 gets all 8 (its own 4 again, unacked).
    assert mine and sorted(m.data for m in receive_all(f1)) == [f"m{i:04d}".encode() for i in range(8)]
    f1.close()


def _split(c: Cluster, uid: str, prefix: str) -> tuple[Any, Any]:
    topic, sub = f"{prefix}_{uid}", f"fo_{uid}"
    fill_topic(c, topic, 8, partitions=2, keyed=True)
    f1 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    f2 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    wait_until(
        lambda: len(f1.assigned_partitions()) == 1 and len(f2.assigned_partitions()) == 1,
        30,
        what="split",
    )
    return f1, f2


def _all_eight(f1: Any, n: int = 8) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(set(got)) < n and time.monotonic() < deadline:
        got += [m.data for m in receive_all(f1, 300)]
    return sorted(set(got))


def test_an_ack_while_a_partition_opens_does_not_open_it_a_second_time(
    cluster: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review of the change above: acks read the reader's state under the consumer lock
    only, and the reader opened a partition whose start was published but not open yet from there,
    on the application's thread, racing the group thread's open: the loser's assignment failed and
    the partition stayed unread for good."""
    c: Cluster = cluster()
    f1, f2 = _split(c, uid, "ackopen")
    held = f1.assigned_partitions()[0]
    first = receive_all(f1, 800)[0]
    real_open = f1._reader._open
    opened_by: list[str] = []
    slow = threading.Event()

    def slow_open(tp: Any, start: int) -> Any:
        opened_by.append(threading.current_thread().name)
        if tp != held:
            slow.set()
            time.sleep(2)
        return real_open(tp, start)

    monkeypatch.setattr(f1._reader, "_open", slow_open)
    f2.close()
    assert slow.wait(30), "f1 never opened the second partition"
    acked = []
    with contextlib.suppress(NotAllowedError):  # its partition may be between revoke and assign
        f1.acknowledge(first)
        acked.append(first.data)
    wait_until(lambda: len(f1.assigned_partitions()) == 2, 30, what="f1 holds both partitions")
    assert threading.current_thread().name not in opened_by
    expected = [f"m{i:04d}".encode() for i in range(8)]
    assert _all_eight(f1, 8 - len(acked)) == [v for v in expected if v not in acked]
    f1.close()


def test_a_partition_whose_open_failed_once_is_opened_by_the_retry(
    cluster: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed open (a snapshot or watermark read timing out) must leave nothing half-published:
    found in review, the reader opened it itself at the next poll, and every retry of the
    subscription then failed (already assigned), leaving it out of the subscription for good."""
    c: Cluster = cluster()
    f1, f2 = _split(c, uid, "failopen")
    held = f1.assigned_partitions()[0]
    receive_all(f1, 800)
    real_open = f1._reader._open
    failed: list[Any] = []

    def fail_once(tp: Any, start: int) -> Any:
        if tp != held and not failed:
            failed.append(tp)
            raise StoreError("watermarks: timed out (injected)")
        return real_open(tp, start)

    monkeypatch.setattr(f1._reader, "_open", fail_once)
    f2.close()
    wait_until(lambda: bool(failed), 30, what="the injected failure")
    assert _all_eight(f1) == [f"m{i:04d}".encode() for i in range(8)]
    assert len(f1.assigned_partitions()) == 2
    f1.close()
