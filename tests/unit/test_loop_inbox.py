"""LoopInbox runs calls queued from other threads on the loop, in order, batching wake-ups."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

from pulsar_txn._loop_inbox import inbox


def test_calls_from_threads_run_on_the_loop_in_queue_order() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        box = inbox(loop)
        assert inbox(loop) is box
        seen: list[tuple[int, bool]] = []
        done = asyncio.Event()
        loop_thread = threading.get_ident()

        def record(i: int) -> None:
            seen.append((i, threading.get_ident() == loop_thread))
            if i == 999:
                done.set()

        def producer() -> None:
            for i in range(1000):
                box.put(record, i)

        t = threading.Thread(target=producer)
        t.start()
        await asyncio.wait_for(done.wait(), 10)
        t.join()
        assert [i for i, _ in seen] == list(range(1000))
        assert all(on_loop for _, on_loop in seen)

    asyncio.run(main())


def test_put_after_the_loop_closed_is_dropped_quietly() -> None:
    loop = asyncio.new_event_loop()
    box = inbox(loop)
    loop.close()
    box.put(print, "never")  # no exception on the delivery thread


def test_an_inbox_does_not_keep_its_closed_loop_alive() -> None:
    # The inbox held its loop strongly while the registry is keyed weakly by that loop: every
    # embedded coordinator started and stopped left its loop (~1 MB) behind for good.
    loop = asyncio.new_event_loop()
    box = inbox(loop)
    box.put(lambda: None)
    loop.close()
    gone = weakref.ref(loop)
    del loop, box
    gc.collect()
    assert gone() is None
