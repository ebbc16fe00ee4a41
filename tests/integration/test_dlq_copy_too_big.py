"""A message whose dead-letter copy can never be stored (the DLQ's REAL_TOPIC and ORIGIN_MESSAGE_ID
properties push a message near the record limit over it) is said once and then delivered to the
application. Found by the record-size review (session 42): the DLQ send was retried every second
for good, every receive raised MessageTooBig (documented as not retriable) and the subscription's
cursor stayed at that message, across restarts too."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pulsar_txn import DeadLetterPolicy, MessageTooBig
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def _largest_sendable(producer: object, lo: int = 1_000_000, hi: int = 1_004_096) -> int:
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            producer.send(b"x" * mid)  # type: ignore[attr-defined]
            lo = mid
        except MessageTooBig:
            hi = mid
    return lo


def test_a_message_too_big_to_dead_letter_is_said_once_then_delivered(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    scratch, topic = f"dlqbig_scratch_{uid}", f"dlqbig_{uid}"
    for t in (scratch, topic):
        c.client.create_topic(t, 1)
    size = _largest_sendable(c.client.create_producer(scratch))
    producer = c.client.create_producer(topic)
    producer.send(b"x" * size)
    consumer = c.client.subscribe(
        topic,
        "s",
        initial_position="Earliest",
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    try:
        for _ in range(2):  # delivered, then redelivered once
            consumer.negative_acknowledge(consumer.receive(10_000))
        errors = 0
        big = None
        deadline = time.monotonic() + 20
        while big is None and time.monotonic() < deadline:
            try:
                msg = consumer.receive(1_000)
            except MessageTooBig as exc:
                assert "cannot be dead-lettered" in str(exc) and not exc.retriable
                errors += 1
                continue
            if len(msg.data) == size:
                big = msg
        assert errors == 1 and big is not None and big.redelivery_count == 1, (size, errors, big)
        consumer.acknowledge(big)
        producer.send(b"after")  # the cursor moved on
        assert consumer.receive(10_000).data == b"after"
    finally:
        consumer.close()
