"""A send whose partition could not join its transaction (the coordinator was down) fails for the
rest of that transaction, whose commit aborts: its error must not say "retriable" (found by review,
session 34: five retries after the coordinator came back each failed at once with a retriable
Timeout)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from kafka_store import KafkaConfig, TopicAdmin, free_port
from pulsar_txn.client import Client
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.errors import PulsarTxnError, TransactionHasOperationFailed
from tests.conftest import CoordinatorProcess

pytestmark = pytest.mark.integration


Factory = Callable[[CoordinatorConfig], CoordinatorProcess]


@dataclass
class _Setup:
    coordinator: CoordinatorProcess
    client: Client
    topic: str


@contextmanager
def _one_tc(
    coordinator_process: Factory,
    coord_config: Callable[..., CoordinatorConfig],
    kafka: KafkaConfig,
    topic: str,
    op_s: float,
) -> Iterator[_Setup]:
    """A coordinator process serving one TC, a one-partition topic and a client of them (the
    operation timeout ``op_s``)."""
    cfg = coord_config(static_tc_ids=(0,), num_tcs=1, port=free_port())
    coordinator = coordinator_process(cfg).start()
    TopicAdmin(kafka).ensure_topic(topic, 1, {})
    with Client(
        coordinator.url,
        kafka=kafka,
        num_tcs=1,
        operation_timeout_seconds=op_s,
        snapshot_topic=cfg.snapshot_topic,
        log_topic=cfg.log_topic,
    ) as client:
        yield _Setup(coordinator, client, topic)


def test_a_send_whose_partition_could_not_join_is_not_retriable_in_that_transaction(
    coordinator_process: Factory, coord_config: Callable[..., CoordinatorConfig], kafka: KafkaConfig, uid: str
) -> None:
    with _one_tc(coordinator_process, coord_config, kafka, f"join_{uid}", 2.0) as c:
        producer = c.client.create_producer(c.topic)
        txn = c.client.new_transaction().with_transaction_timeout(120).build()
        c.coordinator.kill()
        with pytest.raises(PulsarTxnError):
            producer.send(b"m1", txn=txn)  # its own wait times out (outcome unknown then)
        time.sleep(2.5)  # the partition's ADD_PARTITION_TO_TXN has failed by now
        c.coordinator.start()
        with pytest.raises(PulsarTxnError) as again:
            producer.send(b"m1", txn=txn)
        assert not again.value.retriable, again.value
        with pytest.raises(TransactionHasOperationFailed):
            txn.commit()


def test_a_commit_that_could_abort_neither_does_not_say_aborted(
    coordinator_process: Factory, coord_config: Callable[..., CoordinatorConfig], kafka: KafkaConfig, uid: str
) -> None:
    """The coordinator is gone: a send's partition cannot join, so the commit turns into an abort,
    which fails too. The error said "was aborted" although the transaction stays open at the
    coordinator until its timeout (found by review, session 34)."""
    with _one_tc(coordinator_process, coord_config, kafka, f"noabort_{uid}", 1.0) as c:
        producer = c.client.create_producer(c.topic)
        txn = c.client.new_transaction().with_transaction_timeout(120).build()
        c.coordinator.kill()
        producer.send_async(b"m1", txn=txn)
        with pytest.raises(TransactionHasOperationFailed) as failed:
            txn.commit()
        assert "was aborted" not in str(failed.value)
        assert "abort sent instead failed" in str(failed.value)
