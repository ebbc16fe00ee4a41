"""The main job under fire: the pipeline process and the coordinator process are SIGKILLed again and
again while it runs; after a final uninterrupted run the output holds every input exactly once, in
per-partition order."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kafka_store import KafkaConfig, free_port
from pulsar_txn.client import Client
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.pipeline import verify_exactly_once
from pulsar_txn.pipeline.app import upper
from tests.conftest import REPO, CoordinatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BACKLOG = 1500  # input waiting before the pipeline starts
LIVE_RATE = 300  # input messages/s published while the kills happen
# (what to kill, seconds of work after a run's first commit before the kill); bounded: < 20 s of work.
SCHEDULE = [
    ("pipeline", 3.5),
    ("coordinator", 2.0),
    ("pipeline", 1.2),
    ("both", 2.5),
    ("pipeline", 0.8),
    ("coordinator", 1.0),
    ("pipeline", 2.0),
]


class PipelineProcess:
    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log = args, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0

    def start(self, *extra: str) -> None:
        self.started_at = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pulsar_txn.cli", "pipeline", *self.args, *extra],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )

    def wait_for_progress(self, timeout: float = 60.0) -> None:
        """Until this run has committed its first batch (so that a kill lands mid-work)."""
        deadline = time.monotonic() + timeout
        while b"processed " not in self.log.read_bytes()[self.started_at :]:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "pipeline made no progress"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)


def test_output_is_exactly_once_after_repeated_sigkills_of_pipeline_and_coordinator(
    kafka: KafkaConfig,
    coord_config: Callable[..., CoordinatorConfig],
    coordinator_process: Callable[[CoordinatorConfig], CoordinatorProcess],
    uid: str,
    tmp_path: Path,
) -> None:
    cfg = coord_config(port=free_port(), tb_service_enabled=True, tb_snapshot_interval_ms=500)
    coordinator = coordinator_process(cfg).start()
    client = Client(coordinator.url, kafka=kafka, num_tcs=cfg.num_tcs, snapshot_topic=cfg.snapshot_topic)
    source, sink = f"in_{uid}", f"out_{uid}"
    client.create_topic(source, 3)
    client.create_topic(sink, 3)
    producer = client.create_producer(source)
    for i in range(BACKLOG):
        producer.send_async(f"event-{i:05d}", partition_key=f"key-{i % 31}")
    producer.flush()
    stop_feed = threading.Event()
    fed = [BACKLOG]

    def feed() -> None:  # keeps input arriving through every kill, so each one lands mid-work
        while not stop_feed.wait(0.05):
            for _ in range(LIVE_RATE // 20):
                producer.send_async(f"event-{fed[0]:05d}", partition_key=f"key-{fed[0] % 31}")
                fed[0] += 1

    feeder = threading.Thread(target=feed, daemon=True)

    pipeline = PipelineProcess(
        [
            "--service-url", coordinator.url,
            "--bootstrap-servers", kafka.bootstrap_servers,
            "--input", source,
            "--output", sink,
            "--subscription", f"pipe_{uid}",
            "--instance-id", f"pipe-{uid}",
            "--batch-size", "50",
            "--work-ms", "1",  # most of a transaction's life is then before its commit
            "--txn-timeout", "8",
            "--num-tcs", str(cfg.num_tcs),
            "--snapshot-topic", cfg.snapshot_topic,
        ],
        tmp_path / "pipeline.log",
    )  # fmt: skip
    rng = random.Random(uid)
    try:
        pipeline.start()
        feeder.start()
        for victim, seconds in SCHEDULE:
            pipeline.wait_for_progress()
            time.sleep(seconds * rng.uniform(0.7, 1.3))
            if victim in ("pipeline", "both"):
                pipeline.kill()
            if victim in ("coordinator", "both"):
                coordinator.kill()
                coordinator.start()  # same port: clients reconnect to it
            if victim in ("pipeline", "both"):
                pipeline.start()
        stop_feed.set()
        feeder.join(10)
        producer.flush()
        pipeline.kill()
        # The last run goes uninterrupted until the input has been idle for 3 s.
        pipeline.start("--idle-exit", "3")
        assert pipeline.proc is not None
        assert pipeline.proc.wait(240) == 0, pipeline.log.read_text()[-3000:]
        verdict = verify_exactly_once(client, source, sink, upper)
        assert verdict.inputs == fed[0]
        assert verdict.ok, f"{verdict}\n{pipeline.log.read_text()[-3000:]}"
    finally:
        stop_feed.set()
        pipeline.kill()
        client.close()
