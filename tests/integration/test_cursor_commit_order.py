"""The order of a subscription's cursor commits against the real broker: the cursor Kafka ends up
holding is the newest one, never an older snapshot committed late by another thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from kafka_store import StoreError, group_offsets
from tests.conftest import Cluster, receive_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]


def test_a_seek_back_is_not_undone_by_a_concurrent_cursor_flush(
    cluster: ClusterFactory, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upkeep thread takes the cursor with all five messages acked and is slow to hand it to the
    group (paused here until the seek's commit is through, or 1.5 s); meanwhile the application
    seeks back to the third message. Before, the seek's commit went out first and the upkeep's older
    cursor landed after it: Kafka held offset 5, and after a restart the three messages the seek had
    made unacked again were never delivered (lost). Now the seek's commit waits for the one in flight
    and goes out last."""
    c = cluster()
    topic, sub = f"corder_{uid}", f"sub_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    consumer = c.client.subscribe(topic, sub, initial_position="Earliest")
    msgs = [consumer.receive(5000) for _ in range(5)]
    tp = (msgs[0].message_id.topic, msgs[0].message_id.partition)

    upkeep_commits, upkeep_committed, seek_committed = threading.Event(), threading.Event(), threading.Event()
    real = consumer._group.commit_async
    upkeep = f"consumer-{sub}"

    def slow_upkeep(offsets: dict[tuple[str, int], tuple[int, str]]) -> Future[None]:
        paused = False
        if threading.current_thread().name == upkeep and offsets[tp][0] == 5 and not upkeep_commits.is_set():
            paused = True
            upkeep_commits.set()
            seek_committed.wait(1.5)  # fixed: the seek's commit waits for this one
        done = real(offsets)
        if paused:
            done.add_done_callback(lambda _f: upkeep_committed.set())
        elif offsets[tp][0] == 2:
            done.add_done_callback(lambda _f: seek_committed.set())
        return done

    monkeypatch.setattr(consumer._group, "commit_async", slow_upkeep)
    for m in msgs:
        consumer.acknowledge(m)
    assert upkeep_commits.wait(5), "the upkeep flush never committed the acks"
    consumer.seek(msgs[2].message_id)
    assert seek_committed.wait(5) and upkeep_committed.wait(5)
    committed = group_offsets(c.client.kafka, sub, [tp])[tp][0]

    def crashed(offsets: dict[tuple[str, int], tuple[int, str]]) -> Future[None]:
        done: Future[None] = Future()
        done.set_exception(StoreError("the process died", retriable=True))
        return done

    # The consumer dies here: nothing of it is committed any more (a clean close would re-commit).
    monkeypatch.setattr(consumer._group, "commit_async", crashed)
    consumer.close()
    again = c.client.subscribe(topic, sub)
    got = sorted(m.message_id.offset for m in receive_all(again))
    again.close()
    assert (committed, got) == (2, [2, 3, 4])  # before: (5, []), the sought-back messages lost
