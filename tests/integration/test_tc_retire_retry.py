"""The coordinator's retirement of finished transactions survives a failed log write."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_store import ProduceError
from pulsar_txn.errors import TransactionNotFound
from pulsar_txn.txnid import TxnAction
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def test_a_failed_tombstone_write_is_retried_and_retirement_goes_on(
    embedded: Callable[..., Any], coord_config: Callable[..., Any]
) -> None:
    """One tombstone write reported failed (a Kafka time-out) ended the retire loop for good: no
    finished transaction was forgotten again (memory grew with every one) and END_TXN of one long
    gone still answered instead of TransactionNotFound."""
    cfg = coord_config(static_tc_ids=(0,), end_txn_retention_ms=300)
    ec = embedded(cfg)
    service = ec.service
    tc = service.coordinator(0)
    appender = service._appender
    real = appender.append_cb
    failures = [1]

    def append_cb(topic: str, partition: int, value: bytes | None, **kwargs: Any) -> Any:
        callback = kwargs.pop("callback")
        if failures[0] and topic == cfg.log_topic and value is None:  # the first tombstone
            failures[0] -= 1
            return real(
                topic,
                partition,
                value,
                callback=lambda _offset, _error: callback(None, ProduceError("Local: Message timed out")),
                **kwargs,
            )
        return real(topic, partition, value, callback=callback, **kwargs)

    appender.append_cb = append_cb
    first = ec.run(service.new_txn(0, 10_000))
    ec.run(service.end_txn(first, TxnAction.ABORT))
    wait_until(lambda: failures[0] == 0, timeout=10, what="the failed tombstone write")
    second = ec.run(service.new_txn(0, 10_000))
    ec.run(service.end_txn(second, TxnAction.ABORT))

    def forgotten() -> bool:
        return tc.get(first) is None and tc.get(second) is None

    wait_until(forgotten, timeout=15, what="both finished transactions retired")
    time.sleep(0.1)
    with pytest.raises(TransactionNotFound):
        ec.run(service.end_txn(second, TxnAction.ABORT))
    with pytest.raises(TransactionNotFound):
        ec.run(service.end_txn(first, TxnAction.ABORT))
