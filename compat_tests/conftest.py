"""Harness of the compatibility suite: where the deployment under test is, and how to restart its
coordinator. Only this file (and ``_report.py``) may use non-public helpers; test bodies use the public
API (``import pulsar_txn``).

By default one embedded Kafka broker and one in-process coordinator are started for the session.
``--service-url pulsar://host:6650 --bootstrap-servers host:9092`` runs against an existing deployment
instead; ``--coordinator-stop-cmd`` / ``--coordinator-start-cmd`` let the restart scenarios run there
too (without them those tests skip, and a skip is reported as such, never as a pass).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

import pulsar_txn
from compat_tests import _report

NEEDS_RESTART = "needs restart hook: pass --coordinator-stop-cmd and --coordinator-start-cmd"
NEEDS_ADMIN = "needs the coordinator's admin endpoint: pass --admin-url"


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("pulsar-txn compatibility suite")
    g.addoption("--service-url", help="coordinator to test (pulsar://host:6650); default: embedded")
    g.addoption("--bootstrap-servers", help="Kafka of that deployment (host:9092)")
    g.addoption("--admin-url", help="coordinator admin endpoint (http://host:8080) for coordinator stats")
    g.addoption("--auth-token", help="token for the coordinator (default: $PULSAR_TXN_AUTH_TOKEN)")
    g.addoption("--num-tcs", type=int, help="number of TCs of the deployment (default: ask nobody, 16)")
    g.addoption("--log-topic", default="__pulsar_txn_log", help="the coordinators' log_topic")
    g.addoption(
        "--snapshot-topic", default="__transaction_buffer_snapshot", help="the coordinators' snapshot_topic"
    )
    g.addoption(
        "--end-txn-reply",
        choices=("after_markers", "after_decision"),
        default="after_markers",
        help="the embedded coordinator's end_txn_reply (default: Pulsar's, after the markers)",
    )
    g.addoption("--coordinator-stop-cmd", help="shell command that stops (or kills) the coordinator")
    g.addoption("--coordinator-start-cmd", help="shell command that starts it again (returns once started)")
    g.addoption(
        "--compat-results",
        help="write each scenario's outcome as JSON here (compat_tests/_report.py renders the README table)",
    )


class Deployment:
    """The system under test: how to make clients for it, read its stats, and restart its coordinator."""

    def __init__(self, config: pytest.Config, tmp: Path) -> None:
        opt = config.getoption
        self.embedded = opt("--service-url") is None
        self.log_topic: str = opt("--log-topic")
        self.snapshot_topic: str = opt("--snapshot-topic")
        self.auth_token: str | None = opt("--auth-token") or os.environ.get("PULSAR_TXN_AUTH_TOKEN") or None
        self.marker_secret = os.environ.get("PULSAR_TXN_MARKER_SECRET")
        self.end_txn_reply: Literal["after_markers", "after_decision"] = opt("--end-txn-reply")
        self._stop_cmd: str | None = opt("--coordinator-stop-cmd")
        self._start_cmd: str | None = opt("--coordinator-start-cmd")
        self._broker: Any = None
        self._coordinator: Any = None
        if self.embedded:
            self._start_embedded(tmp)
        else:
            if not opt("--bootstrap-servers"):
                raise pytest.UsageError("--service-url needs --bootstrap-servers (the deployment's Kafka)")
            self.service_url: str = opt("--service-url")
            self.bootstrap_servers: str = opt("--bootstrap-servers")
            self.admin_url: str | None = opt("--admin-url")
            self.num_tcs: int | None = opt("--num-tcs")

    # ------------------------------------------------------------------ embedded deployment
    def _start_embedded(self, tmp: Path) -> None:
        from kafka_store import KafkaConfig, LocalBroker, free_port
        from pulsar_txn.config import CoordinatorConfig

        self._broker = LocalBroker(tmp / "broker")
        self.bootstrap_servers = self._broker.start()
        self._kafka = KafkaConfig(bootstrap_servers=self.bootstrap_servers, request_timeout_ms=15_000)
        self.num_tcs = 4
        # Fixed ports, so clients and the admin URL stay valid across a coordinator restart.
        self._config = CoordinatorConfig(
            num_tcs=self.num_tcs,
            ownership="static",
            static_tc_ids=(0, 1, 2, 3),
            port=free_port(),
            admin_port=free_port(),
            log_topic=self.log_topic,
            snapshot_topic=self.snapshot_topic,
            log_write_timeout_ms=2000,
            end_retry_max_backoff_ms=200,
            tb_snapshot_interval_ms=200,
            tb_snapshot_max_changes=5,
            end_txn_reply=self.end_txn_reply,
            # The clients' secret (PULSAR_TXN_MARKER_SECRET): the coordinator signs what they check.
            marker_secret=self.marker_secret,
        )
        self._start_coordinator()
        self.service_url = self._coordinator.url
        self.admin_url = self._coordinator.admin_url

    def _start_coordinator(self) -> None:
        from pulsar_txn.coordinator.embedded import EmbeddedCoordinator

        self._coordinator = EmbeddedCoordinator(self._kafka, self._config).start(wait_ready=60)

    # ------------------------------------------------------------------ what tests use
    @property
    def can_restart(self) -> bool:
        return self.embedded or bool(self._stop_cmd and self._start_cmd)

    def client(self, **kwargs: Any) -> pulsar_txn.Client:
        kwargs.setdefault("num_tcs", self.num_tcs)
        kwargs.setdefault("snapshot_topic", self.snapshot_topic)
        kwargs.setdefault("log_topic", self.log_topic)
        kwargs.setdefault("authentication", self.auth_token)
        kwargs.setdefault("marker_secret", self.marker_secret)
        return pulsar_txn.Client(self.service_url, bootstrap_servers=self.bootstrap_servers, **kwargs)

    def stop_coordinator(self) -> None:
        if not self.can_restart:
            pytest.skip(NEEDS_RESTART)
        if self.embedded:
            if self._coordinator is not None:
                self._coordinator.stop()
                self._coordinator = None
        else:
            _run(self._stop_cmd)

    def start_coordinator(self) -> None:
        if not self.can_restart:
            pytest.skip(NEEDS_RESTART)
        if self.embedded:
            if self._coordinator is None:
                self._start_coordinator()
        else:
            _run(self._start_cmd)

    def restart_coordinator(self, down_seconds: float = 0.0) -> None:
        self.stop_coordinator()
        time.sleep(down_seconds)
        self.start_coordinator()

    def delete_topic(self, topic: str) -> None:
        """Plain Kafka admin (works on any deployment): used to make a marker write impossible."""
        from kafka_store import KafkaConfig, TopicAdmin
        from pulsar_txn.naming import TopicName

        admin = TopicAdmin(KafkaConfig(bootstrap_servers=self.bootstrap_servers))
        admin.delete_topics([TopicName.parse(topic).kafka_topic])

    def close(self) -> None:
        try:
            if self._coordinator is not None:
                self._coordinator.stop()
        finally:
            if self._broker is not None:
                self._broker.stop()


def _run(cmd: str | None) -> None:
    assert cmd is not None
    done = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"{cmd!r} exited {done.returncode}: {done.stderr[-2000:]}")


@pytest.fixture(scope="session")
def deployment(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    tmp = Path(tempfile.mkdtemp(prefix="pulsar-txn-compat-"))
    dep = Deployment(request.config, tmp)
    try:
        yield dep
    finally:
        dep.close()
        shutil.rmtree(tmp, ignore_errors=True)  # its broker's data: each run left one behind


@pytest.fixture
def restartable(deployment: Deployment) -> Iterator[Deployment]:
    """The deployment, for tests that restart its coordinator (skipped where that is impossible).
    The coordinator is running again when the test ends, whatever happened."""
    if not deployment.can_restart:
        pytest.skip(NEEDS_RESTART)
    yield deployment
    deployment.start_coordinator()


@pytest.fixture
def client(deployment: Deployment) -> Iterator[pulsar_txn.Client]:
    c = deployment.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def clients(deployment: Deployment) -> Iterator[Callable[..., pulsar_txn.Client]]:
    """More clients (a restarted process, another timeout); all closed at the end."""
    made: list[pulsar_txn.Client] = []

    def make(**kwargs: Any) -> pulsar_txn.Client:
        c = deployment.client(**kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def admin(deployment: Deployment, client: pulsar_txn.Client) -> pulsar_txn.TransactionsAdmin:
    return pulsar_txn.TransactionsAdmin(
        client,
        admin_url=deployment.admin_url,
        auth_token=deployment.auth_token,
        log_topic=deployment.log_topic,
    )


@pytest.fixture
def coordinator_stats(deployment: Deployment) -> None:
    """Marks a test that reads coordinator stats (HTTP admin endpoint)."""
    if deployment.admin_url is None:
        pytest.skip(NEEDS_ADMIN)


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:10]


# ---------------------------------------------------------------------- results for the README table
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _report.record(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--compat-results", None)
    # Under pytest-xdist the controller sees every worker's reports; a worker writes nothing.
    if path and not hasattr(session.config, "workerinput"):
        mode = "embedded" if session.config.getoption("--service-url") is None else "external"
        _report.write(Path(path), mode)
