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


def test_an_end_cancelled_while_its_ack_log_markers_are_written_leaves_no_unretrieved_failure() -> None:
    """A TC losing its ownership cancels its end tasks; one waiting for pending-ack marker writes
    left them running unawaited, and a write failing then (a stalled broker) was logged by asyncio
    as "exception was never retrieved", with a traceback (review of session 44)."""
    from typing import Any

    from kafka_store import BrokerUnavailableError

    seen: list[dict[str, Any]] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: seen.append(ctx))
        endpoints = KafkaTxnEndpoints(appender=None, admin=None)  # type: ignore[arg-type]
        endpoints._partition_counts["t-sub__transaction_pending_ack"] = 1

        async def failing_write(topic: str, partition: int, marker: object) -> None:
            await asyncio.sleep(0.3)  # the broker is stalled
            raise BrokerUnavailableError(f"append to {topic}[{partition}]: Local: Message timed out")

        endpoints._write_marker = failing_write  # type: ignore[method-assign]
        task = asyncio.create_task(
            endpoints.end_on_subscription("t", "sub", TxnID(0, 1), TxnAction.COMMIT, 0)
        )
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.5)

    asyncio.run(run())
    import gc

    gc.collect()
    assert not seen, [ctx.get("message") for ctx in seen]
