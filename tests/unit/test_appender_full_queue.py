"""A full producer queue (the broker away or not keeping up): a caller on an event loop is never
made to wait for room (its records wait on the partition's retry thread, in order), a plain
thread still is (back-pressure), and every record is settled once, at its delivery deadline."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from kafka_store import KafkaConfig
from kafka_store.errors import StoreError
from kafka_store.producer import Appender


def _dead_address() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _appender() -> Appender:
    config = KafkaConfig(bootstrap_servers=_dead_address())
    return Appender(config, delivery_timeout_ms=1500, extra={"queue.buffering.max.messages": 2})


def test_an_event_loop_never_waits_for_room_in_a_full_producer_queue() -> None:
    appender = _appender()
    settled: list[tuple[int, StoreError | None]] = []
    done = threading.Event()

    def callback(i: int) -> object:
        def report(_offset: int | None, error: StoreError | None) -> None:
            settled.append((i, error))
            if len(settled) == 6:
                done.set()

        return report

    async def main() -> float:
        started = time.monotonic()
        for i in range(6):  # two fill the queue; four find it full
            appender.append_cb("t", 0, b"v%d" % i, callback=callback(i))  # type: ignore[arg-type]
        return time.monotonic() - started

    try:
        took = asyncio.run(main())
        assert took < 0.5, f"the event loop waited {took:.2f}s for room"
        assert done.wait(15), settled
        assert all(error is not None for _i, error in settled)  # the broker never answered
        assert sorted(i for i, _e in settled) == list(range(6))  # each settled once
    finally:
        appender.close()


def test_a_plain_thread_still_waits_for_room_in_a_full_producer_queue() -> None:
    appender = _appender()
    settled = threading.Semaphore(0)
    try:
        started = time.monotonic()
        for i in range(3):
            appender.append_cb("t", 0, b"v%d" % i, callback=lambda *_: settled.release())
        took = time.monotonic() - started
        assert took >= 1.0  # the third append waited (until its deadline: the queue never drained)
        for _ in range(3):
            assert settled.acquire(timeout=15)
    finally:
        appender.close()
