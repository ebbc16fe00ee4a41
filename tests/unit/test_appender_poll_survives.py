"""The appender's poll thread serves every send's delivery report: a report handler that raises
must be logged, not end the thread (a dead thread would leave every later send unconfirmed)."""

from __future__ import annotations

import logging

import pytest

from kafka_store import KafkaConfig
from kafka_store.producer import Appender


class _Producer:
    def __init__(self, appender: Appender) -> None:
        self.appender = appender
        self.polls = 0

    def poll(self, _timeout: float) -> int:
        self.polls += 1
        if self.polls == 1:
            raise ValueError("a handler's bug")
        self.appender._stop.set()
        return 0

    def __len__(self) -> int:
        return 0


def test_a_failing_delivery_report_handler_does_not_stop_the_poll_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    appender = Appender(KafkaConfig(bootstrap_servers="127.0.0.1:1"))
    producer = _Producer(appender)
    with caplog.at_level(logging.ERROR, logger="kafka_store"):
        appender._poll_loop(producer)  # type: ignore[arg-type]
    assert producer.polls == 2
    assert "a delivery report handler failed" in caplog.text
