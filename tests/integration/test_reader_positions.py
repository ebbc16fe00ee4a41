"""Reader positions as in Pulsar: ``has_message_available`` compares positions (no timing), an
inclusive reader's ``LATEST`` is the last readable message, and ``startMessageIdInclusive`` applies
to ``seek(message_id)`` too."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from pulsar_txn import EARLIEST, LATEST, AlreadyClosed, MessageId
from pulsar_txn.asyncio import AsyncClient
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def c(cluster: Callable[..., Cluster]) -> Cluster:
    return cluster(tb_service_enabled=False)


def _fill(c: Cluster, topic: str, n: int) -> list[MessageId]:
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    return [producer.send(f"m{i}".encode()) for i in range(n)]


def test_has_message_available_is_true_behind_a_large_committed_txn_before_anything_is_fetched(
    c: Cluster, uid: str
) -> None:
    topic = f"hma_big_{uid}"
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    with c.client.transaction(timeout=120) as txn:
        for _ in range(30_000):
            producer.send_async(b"x" * 100, txn=txn)
    reader = c.client.create_reader(topic, EARLIEST)
    try:
        assert reader.has_message_available()
        assert reader.read_next(30_000).message_id.offset == 0
    finally:
        reader.close()


def test_a_has_message_available_loop_reads_everything_then_stops(c: Cluster, uid: str) -> None:
    ids = _fill(c, f"hma_loop_{uid}", 5)
    reader = c.client.create_reader(f"hma_loop_{uid}", EARLIEST)
    got = []
    try:
        while reader.has_message_available():
            got.append(reader.read_next(5000).message_id)
    finally:
        reader.close()
    assert got == ids


def test_has_message_available_is_false_at_the_end_and_behind_an_open_txn(c: Cluster, uid: str) -> None:
    topic = f"hma_end_{uid}"
    _fill(c, topic, 2)
    reader = c.client.create_reader(topic, LATEST)
    try:
        assert not reader.has_message_available()
        txn = c.client.transaction(timeout=60)
        c.client.create_producer(topic).send(b"open", txn=txn)
        assert not reader.has_message_available()
        txn.commit()
        assert reader.has_message_available()
        assert reader.read_next(5000).data() == b"open"
    finally:
        reader.close()


def test_latest_inclusive_starts_at_the_last_readable_message(c: Cluster, uid: str) -> None:
    topic = f"latest_incl_{uid}"
    ids = _fill(c, topic, 3)
    reader = c.client.create_reader(topic, LATEST, start_message_id_inclusive=True)
    try:
        assert reader.has_message_available()
        assert reader.read_next(5000).message_id == ids[-1]
        reader.seek(LATEST)
        assert reader.read_next(5000).message_id == ids[-1]
    finally:
        reader.close()


def test_seek_to_a_message_id_follows_start_message_id_inclusive(c: Cluster, uid: str) -> None:
    topic = f"seek_incl_{uid}"
    ids = _fill(c, topic, 5)
    exclusive = c.client.create_reader(topic, EARLIEST)
    inclusive = c.client.create_reader(topic, EARLIEST, start_message_id_inclusive=True)
    try:
        exclusive.seek(ids[2])
        inclusive.seek(ids[2])
        assert exclusive.read_next(5000).message_id == ids[3]
        assert inclusive.read_next(5000).message_id == ids[2]
    finally:
        exclusive.close()
        inclusive.close()


def test_async_has_message_available_compares_positions_too(c: Cluster, uid: str) -> None:
    topic = f"hma_async_{uid}"
    ids = _fill(c, topic, 3)

    async def main() -> list[MessageId]:
        async with AsyncClient(c.client) as client:
            reader = await client.create_reader(topic, EARLIEST)
            got = []
            while await reader.has_message_available():
                got.append((await reader.read_next(5000)).message_id)
            await reader.close()
            return got

    assert asyncio.run(main()) == ids


def test_closing_a_reader_ends_a_read_next_waiting_in_another_thread(c: Cluster, uid: str) -> None:
    # As a consumer's close ends a receive: before, the reader's wait ran to its timeout (~10 s).
    topic = f"rclose_{uid}"
    c.client.create_topic(topic, 1)
    reader = c.client.create_reader(topic, EARLIEST)
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            reader.read_next(10_000)
        except BaseException as exc:  # recorded for the assertion
            outcome.append(exc)

    waiting = threading.Thread(target=wait)
    waiting.start()
    time.sleep(0.5)  # read_next is waiting
    started = time.monotonic()
    reader.close()
    waiting.join(5)
    assert not waiting.is_alive() and time.monotonic() - started < 3
    assert len(outcome) == 1 and isinstance(outcome[0], AlreadyClosed)
