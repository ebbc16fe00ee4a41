"""Kafka baselines on the same broker: produce round trip (acks=all) and Kafka's transactional producer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Producer


@dataclass
class SeqResult:
    """A sequential loop: one operation at a time, latencies in ms."""

    ops: int = 0
    window_s: float = 0.0
    latency_ms: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def per_s(self) -> float:
        return self.ops / self.window_s if self.window_s else 0.0


def _producer(bootstrap: str, **extra: str | int | bool) -> Producer:
    conf: dict[str, str | int | bool] = {
        "bootstrap.servers": bootstrap,
        "client.id": "pulsar-txn-bench",
        "linger.ms": 0,
        "acks": "all",
        "enable.idempotence": True,
    }
    conf.update(extra)
    return Producer(conf)


def _loop(step: Callable[[], bool], warmup_s: float, duration_s: float, max_ops: int) -> SeqResult:
    """Run ``step()`` (returns True on success) back to back: warm-up, then a measured window."""
    result = SeqResult(window_s=duration_s)
    start = time.perf_counter()
    warm_end = start + warmup_s
    end = warm_end + duration_s
    done = 0
    while done < max_ops:
        t0 = time.perf_counter()
        if t0 >= end:
            break
        ok = step()
        t1 = time.perf_counter()
        done += 1
        if t0 >= warm_end and t1 <= end:
            if ok:
                result.ops += 1
                result.latency_ms.append((t1 - t0) * 1000)
            else:
                result.errors += 1
    return result


def produce_rtt(bootstrap: str, topic: str, warmup_s: float, duration_s: float) -> SeqResult:
    """One 100-byte message at a time, idempotent, acks=all, waiting for each delivery report."""
    producer = _producer(bootstrap)
    payload = b"x" * 100
    state = {"done": False, "ok": False}

    def on_delivery(err: object, msg: object) -> None:
        state["done"], state["ok"] = True, err is None

    def step() -> bool:
        state["done"] = False
        producer.produce(topic, payload, partition=0, on_delivery=on_delivery)
        deadline = time.monotonic() + 10
        while not state["done"] and time.monotonic() < deadline:
            producer.poll(1.0)
        return state["ok"]

    try:
        return _loop(step, warmup_s, duration_s, max_ops=200_000)
    finally:
        producer.flush(10)


def transactional_producer(bootstrap: str, topic: str, warmup_s: float, duration_s: float) -> SeqResult:
    """init_transactions once, then begin -> produce 1 message -> commit, sequentially."""
    producer = _producer(bootstrap, **{"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    payload = b"x" * 100

    def step() -> bool:
        try:
            producer.begin_transaction()
            producer.produce(topic, payload, partition=0)
            producer.commit_transaction(10)
        except KafkaException:
            try:
                producer.abort_transaction(10)
            except KafkaException:
                pass
            return False
        return True

    try:
        return _loop(step, warmup_s, duration_s, max_ops=100_000)
    finally:
        producer.flush(10)
