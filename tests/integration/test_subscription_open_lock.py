"""Opening a partition's reader while other threads use the subscription (session 38, found in
review): a partition is opened once, by one thread, and a failed open leaves nothing half-done."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

from kafka_store import StoreError
from pulsar_txn.errors import NotAllowedError
from pulsar_txn.message import new_message_id
from tests.conftest import Cluster, fill_topic, receive_all, wait_until

pytestmark = pytest.mark.integration


def _split(c: Cluster, uid: str, prefix: str) -> tuple[Any, Any]:
    topic, sub = f"{prefix}_{uid}", f"fo_{uid}"
    fill_topic(c, topic, 8, partitions=2, keyed=True)
    f1 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    f2 = c.client.subscribe(topic, sub, consumer_type="Failover", initial_position="Earliest")
    wait_until(
        lambda: len(f1.assigned_partitions()) == 1 and len(f2.assigned_partitions()) == 1,
        30,
        what="split",
    )
    return f1, f2


def _all_eight(f1: Any, n: int = 8) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(set(got)) < n and time.monotonic() < deadline:
        got += [m.data for m in receive_all(f1, 300)]
    return sorted(set(got))


def test_an_ack_while_a_partition_opens_does_not_open_it_a_second_time(
    cluster: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acks read the reader's state under the consumer lock only: with the open moved out of that
    lock (tried in session 38), an ack opened the partition a second time from the application's
    thread, the loser's assignment failed and the partition stayed unread for good."""
    c: Cluster = cluster()
    f1, f2 = _split(c, uid, "ackopen")
    held = f1.assigned_partitions()[0]
    first = receive_all(f1, 800)[0]
    real_open = f1._reader._open
    opened_by: list[str] = []
    slow = threading.Event()

    def slow_open(tp: Any, start: int) -> Any:
        opened_by.append(threading.current_thread().name)
        if tp != held:
            slow.set()
            time.sleep(2)
        return real_open(tp, start)

    monkeypatch.setattr(f1._reader, "_open", slow_open)
    f2.close()
    assert slow.wait(30), "f1 never opened the second partition"
    acked = []
    with contextlib.suppress(NotAllowedError):  # its partition may be between revoke and assign
        f1.acknowledge(first)
        acked.append(first.data)
    wait_until(lambda: len(f1.assigned_partitions()) == 2, 30, what="f1 holds both partitions")
    assert threading.current_thread().name not in opened_by
    expected = [f"m{i:04d}".encode() for i in range(8)]
    assert _all_eight(f1, 8 - len(acked)) == [v for v in expected if v not in acked]
    f1.close()


def test_a_partition_whose_open_failed_once_is_opened_by_the_retry(
    cluster: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed open (a snapshot or watermark read timing out) must leave nothing half-published:
    found in review, the reader opened it itself at the next poll, and every retry of the
    subscription then failed (already assigned), leaving it out of the subscription for good."""
    c: Cluster = cluster()
    f1, f2 = _split(c, uid, "failopen")
    held = f1.assigned_partitions()[0]
    receive_all(f1, 800)
    real_open = f1._reader._open
    failed: list[Any] = []

    def fail_once(tp: Any, start: int) -> Any:
        if tp != held and not failed:
            failed.append(tp)
            raise StoreError("watermarks: timed out (injected)")
        return real_open(tp, start)

    monkeypatch.setattr(f1._reader, "_open", fail_once)
    f2.close()
    wait_until(lambda: bool(failed), 30, what="the injected failure")
    assert _all_eight(f1) == [f"m{i:04d}".encode() for i in range(8)]
    assert len(f1.assigned_partitions()) == 2
    f1.close()


def test_a_first_receive_and_an_ack_open_the_reader_once(
    cluster: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscription's reader opens its partitions at first use: a receive (under the read lock)
    and an ack of a message id the application already holds (under the consumer lock) both got
    there and opened the partition twice; the receive failed (already assigned)."""
    c: Cluster = cluster()
    topic = f"lazy_{uid}"
    fill_topic(c, topic, 4, partitions=1)
    consumer = c.client.subscribe(topic, f"ex_{uid}", initial_position="Earliest")
    assert consumer._reader._scanner is None  # nothing read yet: the reader opens at first use
    real_open = consumer._reader._open
    opens: list[str] = []
    receiver_opening = threading.Event()

    def slow_open(tp: Any, start: int) -> Any:
        opens.append(threading.current_thread().name)
        if threading.current_thread().name == "receiver":
            receiver_opening.set()
            time.sleep(1.5)  # a snapshot load
        return real_open(tp, start)

    monkeypatch.setattr(consumer._reader, "_open", slow_open)
    got: list[bytes] = []
    errors: list[BaseException] = []

    def receive() -> None:
        try:
            got.extend(m.data for m in receive_all(consumer, 1500))
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    receiver = threading.Thread(target=receive, name="receiver")
    receiver.start()
    assert receiver_opening.wait(10)
    consumer.acknowledge(new_message_id(topic, 0, 0))
    receiver.join(30)
    consumer.close()
    assert not errors, errors
    assert opens == ["receiver"]
    # m0000 may come before its ack lands (both are fine); the rest come once each.
    assert sorted(set(got) - {b"m0000"}) == [b"m0001", b"m0002", b"m0003"] and len(got) == len(set(got))
