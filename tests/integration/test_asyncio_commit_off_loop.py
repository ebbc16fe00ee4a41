"""An async commit begins off the event loop: beginning it runs the consumer's hooks, which wait for
the consumer's lock (a rebalance holds it while its group commit lasts)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from pulsar_txn.asyncio import AsyncClient
from tests.conftest import Cluster, LoopStalls

pytestmark = pytest.mark.integration


def test_an_async_commit_with_transactional_acks_never_blocks_the_event_loop(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    topic = f"aio_blk_{uid}"
    c.client.create_topic(topic, 1)

    async def main() -> float:
        async with AsyncClient(c.client, max_workers=4) as client:
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(topic, f"sub_{uid}", initial_position="Earliest")
            await producer.send(b"a")
            msg = await consumer.receive(10000)
            txn = await client.transaction(60)
            await consumer.acknowledge(msg, txn=txn)
            stalls = LoopStalls()
            await asyncio.sleep(0.1)
            held = threading.Event()

            def hold() -> None:  # as a revocation waiting for its group commit under the lock
                with consumer.sync._lock:
                    held.set()
                    time.sleep(4.0)

            threading.Thread(target=hold, daemon=True).start()
            held.wait()
            await txn.commit()
            return stalls.stop()

    assert asyncio.run(main()) < 2.0  # the commit itself waited ~4 s for the lock, the loop did not


def test_the_compacted_topic_check_of_a_first_transactional_send_is_made_off_the_event_loop(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the parity review (session 42): the first transactional send of an AsyncProducer
    asked the broker whether its topic is compacted (DescribeConfigs, up to the request timeout) on
    the event loop thread; a broker answering in 2 s stood every task of the loop still that long."""
    from kafka_store import TopicAdmin

    c = cluster(tb_service_enabled=False)
    topic = f"aiocompact_{uid}"
    c.client.create_topic(topic, 1)
    real = TopicAdmin.topic_config
    threads: list[str] = []

    def slow(self: TopicAdmin, name: str) -> dict[str, str]:
        threads.append(threading.current_thread().name)
        time.sleep(2.0)  # a busy cluster
        return real(self, name)

    monkeypatch.setattr(TopicAdmin, "topic_config", slow)

    async def main() -> tuple[str, float]:
        async with AsyncClient(c.client) as client:
            producer = await client.create_producer(topic)
            txn = await client.new_transaction().with_transaction_timeout(60).build()
            stalls = LoopStalls()
            await asyncio.sleep(0.05)
            await producer.send(b"x", txn=txn)
            worst = stalls.stop()
            await txn.commit()
            return threading.current_thread().name, worst

    loop_thread, worst = asyncio.run(main())
    assert threads and loop_thread not in threads
    assert worst < 1.0, f"the event loop stalled {worst:.2f}s"
