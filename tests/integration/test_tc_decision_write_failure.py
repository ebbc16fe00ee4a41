"""A decision record (COMMITTING/ABORTING) whose write is reported failed may have landed: librdkafka
reports a timed-out message as "possibly persisted". The TC used to put the transaction back to
OPEN; its timeout (or the client's abort) then wrote ABORTING/ABORTED after the COMMITTING record and
wrote ABORT markers, while a failover would have replayed COMMITTING and committed: the outcome
depended on what came next (found by a review of session 33; the test failed before the fix)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_store import REGISTRY, KafkaConfig, ProduceError, StoreError, TopicAdmin
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.coordinator.records import TXN_META
from pulsar_txn.errors import InvalidTxnStatusError
from pulsar_txn.txnid import TxnAction
from tests.integration.test_coordinator import _log_statuses, _markers

pytestmark = pytest.mark.integration


def _report_first_committing_write_failed(ec: EmbeddedCoordinator, log_topic: str) -> dict[str, bool]:
    """The first COMMITTING record is written, but its delivery is reported as timed out."""
    app = ec.service._appender
    real = app.append_cb
    armed = {"on": False}

    def append_cb(topic: str, partition: int, value: bytes, *, key: bytes | None = None, **kw: Any) -> Any:
        callback = kw.pop("callback")
        decision = armed["on"] and topic == log_topic and key and key.startswith(b"txn/") and value
        if decision and REGISTRY.decode_as(TXN_META, value)["status"] == "COMMITTING":
            armed["on"] = False

            def landed_but_reported_failed(offset: int | None, error: StoreError | None) -> None:
                callback(None, ProduceError("Local: Message timed out (possibly persisted)"))

            return real(topic, partition, value, key=key, callback=landed_but_reported_failed, **kw)
        return real(topic, partition, value, key=key, callback=callback, **kw)

    app.append_cb = append_cb  # type: ignore[method-assign]
    return armed


def test_a_commit_decision_whose_write_was_reported_failed_is_never_turned_into_an_abort(
    embedded: Callable[..., EmbeddedCoordinator],
    coord_config: Callable[..., CoordinatorConfig],
    kafka: KafkaConfig,
    admin: TopicAdmin,
    uid: str,
) -> None:
    topic = f"decided_{uid}"
    admin.ensure_topic(topic, 1)
    cfg = coord_config(static_tc_ids=(0,), end_retry_initial_backoff_ms=100, end_retry_max_backoff_ms=200)
    ec = embedded(cfg)
    service = ec.service
    armed = _report_first_committing_write_failed(ec, cfg.log_topic)
    txn = ec.run(service.new_txn(0, 2000))  # a 2 s timeout: it would fire while the TC retries
    ec.run(service.add_partitions(txn, [f"{topic}-partition-0"]))
    armed["on"] = True
    ec.run(service.end_txn(txn, TxnAction.COMMIT))  # the decision is written again, then carried out
    with pytest.raises(InvalidTxnStatusError):
        ec.run(service.end_txn(txn, TxnAction.ABORT))
    time.sleep(2.5)  # past the transaction's timeout
    statuses = [status for seq, status, _ in _log_statuses(kafka, cfg.log_topic, 0) if seq == txn.least_bits]
    assert "ABORTING" not in statuses and "ABORTED" not in statuses
    assert statuses[-1] == "COMMITTED"
    assert [m[2] for m in _markers(kafka, topic, 0)] == [TxnAction.COMMIT]
