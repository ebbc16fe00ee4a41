"""Ending a transaction writes its marker to every pending-ack log partition that may hold its acks:
for a subscription registered on the whole topic, also to partitions added to the log since."""

from __future__ import annotations

import asyncio

from pulsar_txn.coordinator.endpoints import KafkaTxnEndpoints
from pulsar_txn.txnid import TxnAction, TxnID


class FakeAdmin:
    def __init__(self) -> None:
        self.counts = {"t-sub__transaction_pending_ack": 1}

    def partition_count(self, topic: str) -> int:
        return self.counts[topic]


class FakeAppender:
    def __init__(self) -> None:
        self.written: list[tuple[str, int]] = []

    def append_cb(self, topic, partition, value, *, key=None, headers=None, callback):
        self.written.append((topic, partition))
        callback(len(self.written), None)


def test_whole_topic_subscription_markers_reach_partitions_added_to_the_pending_ack_log() -> None:
    admin, app = FakeAdmin(), FakeAppender()
    ep = KafkaTxnEndpoints(app, admin)  # type: ignore[arg-type]

    async def run() -> None:
        await ep.end_on_subscription(
            "persistent://public/default/t", "sub", TxnID(0, 1), TxnAction.COMMIT, -1
        )
        # The data topic grew; the consumer grew the pending-ack log with it (consumer._ensure_pa_topic)
        admin.counts["t-sub__transaction_pending_ack"] = 3
        app.written.clear()
        await ep.end_on_subscription(
            "persistent://public/default/t", "sub", TxnID(0, 2), TxnAction.COMMIT, -1
        )

    asyncio.run(run())
    # Observed: only partition 0 (the count cached at the first end is never refreshed for a
    # subscription registered on the whole topic); acks in partitions 1, 2 never end.
    assert sorted(p for _t, p in app.written) == [0, 1, 2]
