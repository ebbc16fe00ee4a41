"""Commits handed to the group's thread are answered even when the assignment cannot be read: they
were taken from the queue and dropped, so their futures never completed (a synchronous commit then
waited its whole timeout; review, session 26)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicPartition

from kafka_store import KafkaConfig, StoreError
from kafka_store.group import SubscriptionGroup


class _NoAssignment:
    def assignment(self) -> Any:
        raise KafkaException("broker transport failure")


def test_queued_commits_fail_when_the_assignment_cannot_be_read() -> None:
    group = SubscriptionGroup(
        KafkaConfig(bootstrap_servers="127.0.0.1:1"),
        "g",
        ["t"],
        lambda p: None,
        lambda p: None,
        client_id="c",
    )
    real = group._consumer
    try:
        group._consumer = _NoAssignment()  # type: ignore[assignment]
        done: Future[None] = Future()
        group._commits.put(([TopicPartition("t", 0, 5)], done))
        group._run_commits()
        with pytest.raises(StoreError, match="assignment"):
            done.result(0)
    finally:
        group._consumer = real
        real.close()
