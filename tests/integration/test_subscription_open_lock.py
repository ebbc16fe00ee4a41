"""A partition being opened (its reader may load a snapshot and ask for watermarks: network round
trips) holds the subscription's read lock, not the lock that acks and stats take: the asyncio
consumer calls ``stats()`` and ``pending_transactions()`` on its event loop, which a slow open
blocked for as long as it took (session 38)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

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
