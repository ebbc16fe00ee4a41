"""Session fixtures: one real Kafka-protocol broker (noida-db) for the whole run, and factories for
coordinators (in-process and as separate processes that tests can SIGKILL)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_store import KafkaConfig, LocalBroker, TopicAdmin
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator

REPO = Path(__file__).resolve().parents[1]


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # pytest then tears the fixtures down: the session broker is stopped


def pytest_configure(config: pytest.Config) -> None:
    # A runner's timeout sends SIGTERM, which skips every ``finally``: the broker stayed running.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture(scope="session")
def broker() -> Iterator[LocalBroker]:
    external = os.environ.get("PULSAR_TXN_TEST_BOOTSTRAP")
    if external:  # run the suite against an existing Kafka cluster instead
        yield LocalBroker(Path(tempfile.gettempdir()), port=int(external.rsplit(":", 1)[1]))
        return
    data = Path(tempfile.mkdtemp(prefix="pulsar-txn-test-broker-"))
    b = LocalBroker(data)
    try:
        b.start()
        yield b
    finally:
        b.stop()
        shutil.rmtree(data, ignore_errors=True)  # up to ~1 GB after a full run


@pytest.fixture(scope="session")
def kafka(broker: LocalBroker) -> KafkaConfig:
    return KafkaConfig(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=15_000)


@pytest.fixture(scope="session")
def admin(kafka: KafkaConfig) -> TopicAdmin:
    return TopicAdmin(kafka)


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def coord_config(uid: str) -> Callable[..., CoordinatorConfig]:
    """A CoordinatorConfig with topics and group private to this test."""

    def make(**overrides: Any) -> CoordinatorConfig:
        base: dict[str, Any] = {
            "log_topic": f"__log_{uid}",
            "owners_topic": f"__owners_{uid}",
            "coordinator_group": f"coord_{uid}",
            "num_tcs": 4,
            "ownership": "static",
            "static_tc_ids": (0, 1, 2, 3),
            "port": 0,
            "log_write_timeout_ms": 2000,
            "end_retry_max_backoff_ms": 200,
            "tb_service_enabled": False,
            "tb_group": f"tb_{uid}",
            "snapshot_topic": f"__tbsnap_{uid}",
            # The session broker holds every test's topics: a TB service owning them all would load
            # and snapshot thousands of partitions at each rebalance, slower with every test.
            "tb_topic_pattern": f".*{uid}.*",
        }
        base.update(overrides)
        return CoordinatorConfig(**base)

    return make


@pytest.fixture
def embedded(kafka: KafkaConfig) -> Iterator[Callable[..., EmbeddedCoordinator]]:
    started: list[EmbeddedCoordinator] = []

    def make(config: CoordinatorConfig, *, serve: bool = False, wait: bool = True) -> EmbeddedCoordinator:
        ec = EmbeddedCoordinator(kafka, config, serve=serve)
        started.append(ec)
        ec.start(wait_ready=30 if wait else None)
        return ec

    yield make
    for ec in reversed(started):
        ec.stop()


class CoordinatorProcess:
    """``pulsar-txn coordinator`` in its own process, for SIGKILL tests."""

    def __init__(
        self,
        kafka: KafkaConfig,
        config: CoordinatorConfig,
        workdir: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        """``env``: more environment for the process, e.g. ``PULSAR_TXN_MARKER_SECRET`` (a secret in
        ``config`` would be written to the config file masked)."""
        self.env = {**os.environ, **env} if env else None
        self.workdir = workdir
        self.config_file = workdir / f"coord-{uuid.uuid4().hex[:6]}.json"
        self.config_file.write_text(
            json.dumps(
                {
                    "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
                    "coordinator": json.loads(config.model_dump_json()),
                }
            )
        )
        self.ready_file = self.config_file.with_suffix(".ready")
        self.log_file = self.config_file.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}

    def start(self, timeout: float = 60.0) -> CoordinatorProcess:
        self.ready_file.unlink(missing_ok=True)
        with self.log_file.open("ab") as logf:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pulsar_txn.cli",
                    "coordinator",
                    "--config",
                    str(self.config_file),
                    "--ready-file",
                    str(self.ready_file),
                ],
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=self.env,
            )
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"coordinator exited {self.proc.returncode}: {self.log_file.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"coordinator not ready in {timeout}s: {self.log_file.read_text()[-2000:]}"
                )
            time.sleep(0.05)
        self.info = json.loads(self.ready_file.read_text())
        return self

    @property
    def url(self) -> str:
        return str(self.info["url"])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


@pytest.fixture
def coordinator_process(
    kafka: KafkaConfig, tmp_path: Path
) -> Iterator[Callable[[CoordinatorConfig], CoordinatorProcess]]:
    procs: list[CoordinatorProcess] = []

    def make(config: CoordinatorConfig) -> CoordinatorProcess:
        proc = CoordinatorProcess(kafka, config, tmp_path)
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        proc.kill()


def wait_until(
    predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll ``predicate`` until truthy; fail the test with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


class Cluster:
    """An embedded coordinator (protocol server + TB service) and a Client wired to it."""

    def __init__(self, kafka: KafkaConfig, config: CoordinatorConfig) -> None:
        self.config = config
        self.kafka = kafka
        self.coordinator = EmbeddedCoordinator(kafka, config).start()
        assert self.coordinator.url is not None
        self.client = self.other_client()

    def other_client(self, operation_timeout_seconds: float = 30) -> Any:
        """A new Client of this cluster, set up as ``client`` (the caller closes it): e.g. another
        process's client, that commits or aborts a transaction by its id."""
        from pulsar_txn.client import Client

        config = self.config
        secret = config.marker_secret.get_secret_value() if config.marker_secret else None
        return Client(
            self.coordinator.url or "",
            kafka=self.kafka,
            num_tcs=config.num_tcs,
            marker_secret=secret,
            snapshot_topic=config.snapshot_topic,
            log_topic=config.log_topic,
            operation_timeout_seconds=operation_timeout_seconds,
        )

    def stop(self) -> None:
        self.client.close()
        self.coordinator.stop()


@pytest.fixture
def cluster(
    kafka: KafkaConfig, coord_config: Callable[..., CoordinatorConfig]
) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(**overrides: Any) -> Cluster:
        overrides.setdefault("tb_service_enabled", True)
        overrides.setdefault("tb_snapshot_interval_ms", 200)
        c = Cluster(kafka, coord_config(**overrides))
        made.append(c)
        return c

    yield make
    for c in reversed(made):
        c.stop()


class LoopStalls:
    """Made on a running event loop: ticks every 10 ms and keeps the gaps between ticks; ``stop``
    returns the longest (a call that blocks the loop shows as a stall of its length)."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.gaps.append(now - last)
            last = now

    def stop(self) -> float:
        self._task.cancel()
        return max(self.gaps, default=0.0)


def compat_options(c: Cluster) -> dict[str, Any]:
    """What a migrated program adds to ``pulsar.Client(service_url, ...)`` of the compat layer: where
    Kafka is (and this test cluster's private topics)."""
    return {
        "kafka": c.client.kafka,
        "num_tcs": c.config.num_tcs,
        "snapshot_topic": c.config.snapshot_topic,
        "log_topic": c.config.log_topic,
    }


def fill_topic(c: Cluster, topic: str, n: int, partitions: int = 1, *, keyed: bool = False) -> None:
    """Create ``topic`` and send ``m0000``..: ``n`` plain messages (``keyed``: each with its number
    as partition key, else round-robin)."""
    c.client.create_topic(topic, partitions)
    producer = c.client.create_producer(topic)
    for i in range(n):
        producer.send_async(f"m{i:04d}", partition_key=str(i) if keyed else None)
    producer.flush()


def create_again_behind_an_open_txn(c: Cluster, topic: str) -> Any:
    """Delete ``topic`` and create it again under its name, holding an open transaction's message at
    offset 0 and plain messages ``new0``..``new6`` behind it (offsets 1..7); returns the transaction."""
    c.client.delete_topic(topic)
    time.sleep(1)
    c.client.create_topic(topic, 1)
    producer = c.client.create_producer(topic)
    txn = c.client.transaction(120)
    producer.send(b"open", txn=txn)
    for i in range(7):
        producer.send(b"new%d" % i)
    return txn


def read_all(reader: Any, timeout_ms: int = 1500) -> list[Any]:
    """Everything a Reader delivers until it has been quiet for ``timeout_ms``."""
    return _until_quiet(reader.read_next, timeout_ms)


def run_pipeline_bounded(pipeline: Any, seconds: float = 60) -> Any:
    """``pipeline.run`` with its stop set after ``seconds``: a run that should end by itself (idle
    exit, an unfixable failure) fails the test instead of hanging it."""
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    try:
        return pipeline.run(stop)
    finally:
        timer.cancel()


def receive_all(consumer: Any, timeout_ms: int = 1500) -> list[Any]:
    """Everything a Consumer delivers until it has been quiet for ``timeout_ms``."""
    return _until_quiet(consumer.receive, timeout_ms)


def _until_quiet(next_message: Callable[[int], Any], timeout_ms: int) -> list[Any]:
    from pulsar_txn.errors import Timeout

    out = []
    while True:
        try:
            out.append(next_message(timeout_ms))
        except Timeout:
            return out


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """One local Spark (2 cores) for the whole run; the JVM starts once (~10 s)."""
    from pyspark.sql import SparkSession

    # Python workers must run this interpreter (the venv with pyarrow and our packages); Spark's
    # data source planner ignores spark.pyspark.python and follows the environment variable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pulsar-txn-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()
