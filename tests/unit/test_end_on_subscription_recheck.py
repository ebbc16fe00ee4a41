"""The coordinator's re-check of a pending-ack log during a slow marker write (is the log still
there?) only cuts the end short when the log is known to be gone: a lookup that fails leaves the
outcome to the writes in flight. Before, its error failed the END_TXN step while the writes went on
unawaited. Stubs stand in for Kafka here: the logic under test is the coordinator's own."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka_store import BrokerUnavailableError, TopicNotFoundError
from pulsar_txn.coordinator.endpoints import KafkaTxnEndpoints
from pulsar_txn.txnid import TxnAction, TxnID


class _SlowAppender:
    def __init__(self) -> None:
        self.written: list[str] = []

    def append_cb(
        self, topic: str, partition: int, value: Any, *, headers: Any, callback: Callable[..., None]
    ) -> None:
        def later() -> None:
            time.sleep(0.8)  # past the re-check
            self.written.append(topic)
            callback(len(self.written), None)

        threading.Thread(target=later, daemon=True).start()


class _Admin:
    def __init__(self, second: Exception) -> None:
        self.calls = 0
        self.second = second

    def partition_count(self, topic: str) -> int:
        self.calls += 1
        if self.calls == 1:
            return 1
        raise self.second


def _end(second: Exception) -> tuple[_SlowAppender, _Admin]:
    appender, admin = _SlowAppender(), _Admin(second)

    async def main() -> None:
        endpoints = KafkaTxnEndpoints(appender, admin)  # type: ignore[arg-type]
        txn = TxnID(1, 2)
        await endpoints._ack_log_partitions("t-s__transaction_pending_ack", txn)  # the count, cached
        await endpoints.end_on_subscription("t", "s", txn, TxnAction.COMMIT, 0)

    asyncio.run(main())
    return appender, admin


def test_a_failed_recheck_waits_for_the_marker_writes() -> None:
    appender, admin = _end(BrokerUnavailableError("lookup timed out"))
    assert admin.calls == 2 and appender.written == ["t-s__transaction_pending_ack"]


def test_a_log_found_gone_ends_at_once() -> None:
    started = time.monotonic()
    appender, admin = _end(TopicNotFoundError("gone"))
    assert admin.calls == 2 and time.monotonic() - started < 0.8 and appender.written == []
