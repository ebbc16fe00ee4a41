"""Ending a transaction writes its marker to the pending-ack log partition that holds its acks. Clients
register a whole topic only for acks in partition 0 (consumer._txn_ack_topic names any other
partition), so the coordinator looks the log's partition count up once, and again only when a
partition beyond it is named."""

from __future__ import annotations

import asyncio

from pulsar_txn.coordinator.endpoints import KafkaTxnEndpoints
from pulsar_txn.txnid import TxnAction, TxnID

LOG = "t-sub__transaction_pending_ack"


class FakeAdmin:
    def __init__(self) -> None:
        self.counts = {LOG: 1}
        self.lookups = 0

    def partition_count(self, topic: str) -> int:
        self.lookups += 1
        return self.counts[topic]


class FakeAppender:
    def __init__(self) -> None:
        self.written: list[tuple[str, int]] = []

    def append_cb(self, topic, partition, value, *, key=None, headers=None, callback):
        self.written.append((topic, partition))
        callback(len(self.written), None)


def test_whole_topic_ends_reuse_the_cached_count_and_a_partition_beyond_it_is_looked_up() -> None:
    admin, app = FakeAdmin(), FakeAppender()
    ep = KafkaTxnEndpoints(app, admin)  # type: ignore[arg-type]
    topic = "persistent://public/default/t"

    async def run() -> None:
        for seq in range(1, 4):
            await ep.end_on_subscription(topic, "sub", TxnID(0, seq), TxnAction.COMMIT, -1)
        assert admin.lookups == 1  # once, not once per END_TXN (that doubled END_TXN's latency)
        assert app.written == [(LOG, 0)] * 3
        # The data topic grew; the consumer grew the log with it and names the new partition.
        admin.counts[LOG] = 3
        app.written.clear()
        await ep.end_on_subscription(f"{topic}-partition-2", "sub", TxnID(0, 9), TxnAction.COMMIT, -1)
        assert admin.lookups == 2
        assert app.written == [(LOG, 2)]

    asyncio.run(run())
