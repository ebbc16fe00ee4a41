"""How a pipeline session ends when something fails: what it reports (progress counts every batch that
committed, also one that committed while the session was failing) and what it survives (a Kafka error
while fencing at start-up restarts the session instead of ending ``run``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from kafka_store import BrokerUnavailableError
from pulsar_txn.consumer import Consumer
from pulsar_txn.errors import ConnectError, Timeout
from pulsar_txn.pipeline import ExactlyOncePipeline, PipelineSettings, fencing, verify_exactly_once
from pulsar_txn.pipeline.app import upper
from pulsar_txn.transaction import Transaction
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def _fill(c: Cluster, topic: str, partitions: int, per_partition: int) -> None:
    c.client.create_topic(topic, partitions)
    for p in range(partitions):
        producer = c.client.create_producer(f"{topic}-partition-{p}")
        for i in range(per_partition):
            producer.send_async(f"p{p}-{i:04d}")
        producer.flush()


def _settings(uid: str, **kw: object) -> PipelineSettings:
    base: dict[str, object] = {
        "subscription": f"pipe_{uid}",
        "instance_id": f"p-{uid}",
        "idle_exit_s": 1.5,
        "retry_backoff_s": 0.1,
    }
    base.update(kw)
    return PipelineSettings(f"in_{uid}", f"out_{uid}", **base)  # type: ignore[arg-type]


def test_progress_counts_a_batch_that_committed_while_its_session_failed(
    cluster, uid: str, monkeypatch
) -> None:
    c = cluster()
    _fill(c, f"in_{uid}", partitions=2, per_partition=100)
    c.client.create_topic(f"out_{uid}", 2)
    pipeline = ExactlyOncePipeline(c.client, _settings(uid, batch_size=50))
    armed, fired = [False], [False]

    def fail_once() -> None:
        if armed[0] and not fired[0]:
            fired[0] = True
            raise ConnectError("the consumer lost its broker connection")

    # The session fails at its very next step after a partition-0 batch was handed to its commit chain
    # (so that commit is still in flight, and completes while the failing session winds down).
    process = pipeline._process

    def process_then_arm(consumer, partition, batch, chains):  # type: ignore[no-untyped-def]
        fail_once()
        process(consumer, partition, batch, chains)
        armed[0] = armed[0] or partition == 0

    receive = Consumer.batch_receive

    def failing_receive(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        fail_once()
        return receive(self, *args, **kwargs)

    pipeline._process = process_then_arm  # type: ignore[method-assign]
    monkeypatch.setattr(Consumer, "batch_receive", failing_receive)
    progress = pipeline.run()  # the session fails once, and run() starts a new one
    pipeline.close()
    assert fired[0] and progress.sessions == 2, progress
    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper)
    assert verdict.ok, str(verdict)
    # Each input committed exactly once, in 4 transactions: that is what progress must say. No
    # batch's transaction failed (the session failed between batches).
    assert progress.processed == verdict.inputs == 200, progress
    assert progress.transactions == 4, progress
    assert progress.failed_batches == 0, progress


def test_a_kafka_error_while_fencing_restarts_the_session(cluster, uid: str, monkeypatch) -> None:
    c = cluster()
    _fill(c, f"in_{uid}", partitions=1, per_partition=60)
    c.client.create_topic(f"out_{uid}", 1)
    real_load_state = fencing.load_state
    calls = [0]

    def flaky_load_state(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == 1:
            raise BrokerUnavailableError("broker went away for a moment")
        return real_load_state(*args, **kwargs)

    monkeypatch.setattr(fencing, "load_state", flaky_load_state)
    pipeline = ExactlyOncePipeline(c.client, _settings(uid, batch_size=20))
    started = time.monotonic()
    progress = pipeline.run()
    pipeline.close()
    assert time.monotonic() - started < 30
    assert progress.sessions == 2 and progress.processed == 60, progress
    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper)
    assert verdict.ok, str(verdict)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_commit_that_landed_but_reported_a_timeout_is_counted_once_resolved(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch, overlap: bool
) -> None:
    """The coordinator committed, but the answer was lost (the client saw ``Timeout``): the session
    restarts, and its inputs are not redelivered (they are acked). Before session 38 they were never
    counted as processed; the next session now asks the coordinator's log how it ended."""
    c = cluster()
    _fill(c, f"in_{uid}", 1, 120)
    c.client.create_topic(f"out_{uid}", 1)
    real_commit = Transaction.commit_async
    lost: list[Transaction] = []

    def commit_with_the_answer_lost(txn: Transaction) -> Future[None]:
        landed = real_commit(txn)
        if lost:
            return landed
        lost.append(txn)
        landed.result(30)  # it commits ...
        answer: Future[None] = Future()
        answer.set_exception(Timeout(f"{txn.txn_id}: no answer in time (injected)"))  # ... unseen
        return answer

    monkeypatch.setattr(Transaction, "commit_async", commit_with_the_answer_lost)
    pipeline = ExactlyOncePipeline(c.client, _settings(uid, batch_size=40, overlap_commits=overlap))
    progress = pipeline.run()
    pipeline.close()
    assert lost and progress.sessions == 2, progress
    assert verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper).ok
    assert progress.processed == 120 and progress.transactions == 3, progress
