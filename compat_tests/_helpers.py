"""Small helpers for the scenarios, on the public API only."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import pulsar_txn


def _collect(next_message: Callable[[int], Any], quiet_ms: int, expect: int | None) -> list[Any]:
    """Messages until ``quiet_ms`` pass without one. With ``expect``: wait up to 15 s for each of the
    first ``expect`` messages, then only ``quiet_ms`` for any extra (which the caller will see)."""
    out = []
    while True:
        wait = 15_000 if expect is not None and len(out) < expect else quiet_ms
        try:
            out.append(next_message(wait))
        except pulsar_txn.Timeout:
            return out


def read_all(reader: pulsar_txn.Reader, quiet_ms: int = 1000, expect: int | None = None) -> list[Any]:
    """Everything the reader delivers until it has been quiet for ``quiet_ms``."""
    return _collect(reader.read_next, quiet_ms, expect)


def drain(consumer: pulsar_txn.Consumer, quiet_ms: int = 1000, expect: int | None = None) -> list[Any]:
    """Everything the consumer receives until it has been quiet for ``quiet_ms``."""
    return _collect(consumer.receive, quiet_ms, expect)


def receive_n(consumer: pulsar_txn.Consumer, n: int, timeout_ms: int = 10_000) -> list[pulsar_txn.Message]:
    return [consumer.receive(timeout_ms) for _ in range(n)]


def values(msgs: list[pulsar_txn.Message]) -> list[str]:
    return [m.data.decode() for m in msgs]


def pending_acks(consumer: pulsar_txn.Consumer) -> int:
    """The consumer's pending-ack count over all its partitions (Pulsar's pendingAckStats)."""
    return sum(int(p["pending_ack_count"]) for p in consumer.stats()["partitions"].values())


def publish(client: pulsar_txn.Client, topic: str, n: int, partitions: int = 1) -> None:
    client.create_topic(topic, partitions)
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send_async(f"m{i:04d}", partition_key=str(i))
    producer.flush()


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.05)
