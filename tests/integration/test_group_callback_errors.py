"""A rebalance callback's own error, which confluent-kafka re-raises from ``poll()``, must not end the
group thread: a coordinator instance's membership thread (TC ownership) or a subscription's group
thread (rebalances and cursor commits) died with it (found by review, session 34)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_store import GroupMembership, KafkaConfig, SubscriptionGroup, TopicAdmin
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def _survives(group: Any, calls: list[object]) -> None:
    """Start ``group`` (its on_assign appends to ``calls`` and raises): its thread outlives that."""
    group.start()
    try:
        wait_until(lambda: calls, 20, what="the assignment")
        time.sleep(1)
        assert group._thread is not None and group._thread.is_alive()
    finally:
        group.stop()


def _failing(calls: list[object]) -> Any:
    def on_assign(parts: object) -> None:
        calls.append(parts)
        raise ValueError("on_assign bug")

    return on_assign


def test_a_coordinator_group_member_survives_a_failing_rebalance_callback(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"gm_{uid}"
    admin.ensure_topic(topic, 2, {})
    calls: list[object] = []
    _survives(
        GroupMembership(kafka, f"g_{uid}", topic, _failing(calls), lambda _p: None, session_timeout_ms=6000),
        calls,
    )


def test_a_subscription_group_thread_survives_a_failing_rebalance_callback(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"sg_{uid}"
    admin.ensure_topic(topic, 1, {})
    calls: list[object] = []
    _survives(
        SubscriptionGroup(kafka, f"s_{uid}", [topic], _failing(calls), lambda _p: None, client_id="x"), calls
    )
