"""A zombie pipeline instance (an old run still alive after a new one with the same ``instance_id``
took over) must not commit output: here the old run is stalled mid-batch (its batch acked in memory,
nothing sent yet, so nothing the successor's start-up fencing can see), the successor processes the
whole input, then the old run resumes."""

from __future__ import annotations

import threading

import pytest

from pulsar_txn.message import Message
from pulsar_txn.pipeline import ExactlyOncePipeline, PipelineSettings, verify_exactly_once
from pulsar_txn.pipeline.app import upper
from pulsar_txn.pipeline.fencing import PipelineFenced
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


def _fill(c: Cluster, topic: str, n: int) -> None:
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(n):
        producer.send_async(f"msg-{i:05d}")
    producer.flush()


def _stall_then_take_over(
    c: Cluster, uid: str, fence_check_interval_s: float | None, join_s: float
) -> tuple[ExactlyOncePipeline, list[BaseException | None]]:
    """200 inputs; the old run stalls at the first message of its third batch (acked in memory,
    nothing sent), a successor with its instance id processes the input, then the old run resumes.
    Returns the old pipeline (closed) and how its ``run()`` ended."""
    _fill(c, f"in_{uid}", 200)
    c.client.create_topic(f"out_{uid}", 1)
    settings = PipelineSettings(
        f"in_{uid}",
        f"out_{uid}",
        subscription=f"pipe_{uid}",
        instance_id=f"p-{uid}",
        batch_size=50,
        idle_exit_s=1.5,
        fence_check_interval_s=fence_check_interval_s,
    )
    stalled, resume = threading.Event(), threading.Event()

    def stall_once(msg: Message[bytes]) -> bytes:
        if msg.data == b"msg-00100" and not stalled.is_set():  # first message of the third batch
            stalled.set()
            resume.wait(60)  # a long GC pause, a frozen VM, a network partition ...
        return upper(msg)

    old = ExactlyOncePipeline(c.client, settings, stall_once)
    outcome: list[BaseException | None] = []

    def run_old() -> None:
        try:
            old.run()
            outcome.append(None)
        except BaseException as exc:  # reported to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=run_old, daemon=True)
    thread.start()
    try:
        assert stalled.wait(30), "the old run never reached the stall"
        new = ExactlyOncePipeline(c.client, settings)  # same instance id: takes over, fences
        progress = new.run()
        new.close()
        assert progress.processed > 0
    finally:
        resume.set()
    thread.join(join_s)
    assert not thread.is_alive()
    old.close()
    return old, outcome


def test_zombie_instance_cannot_commit_after_a_successor_took_over(cluster, uid: str) -> None:
    c = cluster()
    _old, outcome = _stall_then_take_over(c, uid, 0.3, join_s=30)
    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper)
    assert verdict.ok, str(verdict)
    # The old run learnt that it was replaced, and stopped instead of taking the subscription back.
    assert len(outcome) == 1 and isinstance(outcome[0], PipelineFenced), outcome


def test_without_the_takeover_watch_the_zombies_commit_is_refused_by_the_group(cluster, uid: str) -> None:
    """The watch only notices a takeover within its interval; what closes the window is each
    commit's ownership check (a group commit as a member, after the acks are stored): the group
    refuses the replaced member, so its transaction aborts instead of committing duplicates."""
    c = cluster()
    old, outcome = _stall_then_take_over(c, uid, None, join_s=60)
    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper)
    assert verdict.ok, str(verdict)
    assert old.progress.failed_batches >= 1, old.progress  # the zombie's batch did not commit
    # After the refused commit, the session's end asked the group once (no periodic watch): replaced.
    assert len(outcome) == 1 and isinstance(outcome[0], PipelineFenced), outcome
