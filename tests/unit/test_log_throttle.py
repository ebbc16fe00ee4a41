"""Warnings others can cause by the thousand pass the first of each kind, then one per interval
saying how many were left out (kafka_store.lograte); librdkafka's repeated lines the same way."""

from __future__ import annotations

import logging
import time

import pytest

from kafka_store import KafkaConfig
from kafka_store.lograte import LogThrottle


def test_a_throttle_passes_the_first_of_each_kind_then_one_per_interval_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("test.throttle")
    throttle = LogThrottle(interval=0.2)
    with caplog.at_level(logging.WARNING, logger="test.throttle"):
        for i in range(50):
            throttle.warning(log, "a", "record %d skipped", i)
        throttle.warning(log, "b", "other kind")
        assert [r.getMessage() for r in caplog.records] == ["record 0 skipped", "other kind"]
        time.sleep(0.25)
        throttle.warning(log, "a", "record %d skipped", 50)
    assert (
        caplog.records[-1].getMessage() == "record 50 skipped (and 49 more like it since the last such line)"
    )


def test_librdkafka_lines_alike_but_for_their_numbers_pass_once(caplog: pytest.LogCaptureFixture) -> None:
    KafkaConfig(bootstrap_servers="127.0.0.1:1").client_conf()  # the logger every client is given
    log = logging.getLogger("librdkafka")
    with caplog.at_level(logging.ERROR, logger="librdkafka"):
        for i in range(100):
            log.error(
                "FAIL [rdkafka#producer-%d] 127.0.0.1:%d/bootstrap: Connect failed (after %dms)",
                i,
                9000 + i,
                i,
            )
    assert len([r for r in caplog.records if r.name == "librdkafka"]) == 1


def test_librdkafka_debug_output_asked_for_is_kept_whole(caplog: pytest.LogCaptureFixture) -> None:
    """Only warnings and errors are throttled (kafka.extra {"debug": ...} output is per request)."""
    KafkaConfig(bootstrap_servers="127.0.0.1:1").client_conf()
    log = logging.getLogger("librdkafka")
    with caplog.at_level(logging.DEBUG, logger="librdkafka"):
        for i in range(20):
            log.debug("PRODUCE [rdkafka#producer-1] produce msgset of %d message(s)", i)
    assert len([r for r in caplog.records if r.name == "librdkafka"]) == 20
