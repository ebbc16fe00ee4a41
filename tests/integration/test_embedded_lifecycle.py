"""Stopping an in-process coordinator, or closing an embedded client, frees its Kafka clients at once
(broker connections, librdkafka's threads), not when the garbage collector runs (lifecycle review,
session 40: 10 descriptors and ~7 native threads per stopped coordinator stayed until a collection)."""

from __future__ import annotations

import gc
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafka_store import KafkaConfig, LocalBroker, TopicAdmin
from pulsar_txn.client import Client
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.errors import ConfigError, ConnectError, PulsarTxnError, Timeout
from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def without_gc() -> Iterator[None]:
    """Reference counting alone: what a stop leaves to the collector stays visible."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


@pytest.mark.parametrize("what", ["coordinator", "embedded_client"])
def test_stopped_coordinators_and_closed_embedded_clients_keep_no_descriptors(
    kafka: KafkaConfig, coord_config: Callable[..., CoordinatorConfig], without_gc: None, what: str
) -> None:
    def cycle() -> None:
        if what == "coordinator":
            EmbeddedCoordinator(kafka, coord_config()).start().stop()
        else:
            Client.embedded(
                bootstrap_servers=kafka.bootstrap_servers, coordinator=coord_config(tb_service_enabled=True)
            ).close()

    cycle()  # first use: process-wide things (librdkafka's globals, the loop's selector) stay
    before = _fds()
    for _ in range(4):
        cycle()
    # librdkafka's threads close their sockets as they end, moments after a stop returns (longer on
    # a loaded machine: 10 s was once not enough in CI): a leak stays, a lag does not.
    settled = time.monotonic() + 30
    while _fds() - before > 2 and time.monotonic() < settled:
        time.sleep(0.1)
    assert _fds() - before <= 2, f"{_fds() - before} descriptors more after 4 cycles"


def test_an_admin_that_found_the_topic_existing_is_freed_with_its_owner(
    kafka: KafkaConfig, without_gc: None
) -> None:
    """The TOPIC_ALREADY_EXISTS answer kept a cycle (the future's exception -> its traceback's
    frames -> the future) holding the admin client."""
    import weakref

    TopicAdmin(kafka).ensure_topic("lifecycle_existing", 1)
    admin = TopicAdmin(kafka)
    admin.ensure_topic("lifecycle_existing", 1)
    gone = weakref.ref(admin)
    del admin
    assert gone() is None


def test_the_operation_timeout_bounds_an_embedded_clients_start_too() -> None:
    # With nothing listening, the coordinator's start (its topic creation) waited Kafka's default
    # 10 s request timeout whatever operation_timeout_seconds said.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ConnectError):
        Client.embedded(bootstrap_servers=f"127.0.0.1:{dead}", operation_timeout_seconds=1)
    assert time.monotonic() - started < 6


def test_an_embedded_client_refused_for_a_bad_argument_leaves_no_broker_running(tmp_path: Path) -> None:
    # The broker was started before the arguments were checked, and nothing stopped it.
    with pytest.raises(ConfigError):
        Client.embedded(data_dir=tmp_path, operation_timeout_seconds=-1)
    assert LocalBroker(tmp_path / "broker")._running_pid() is None
    with pytest.raises(TypeError):
        Client.embedded(data_dir=tmp_path, no_such_option=1)  # refused by Client() itself
    assert LocalBroker(tmp_path / "broker")._running_pid() is None


# -- start-up and shut-down robustness (review of session 43); each test failed before ------------


def test_a_broker_asked_for_port_0_listens_on_a_free_port_it_names(tmp_path: Path) -> None:
    """Port 0 ("any free one", as the CLI takes it) waited 30 s on port 0 and failed."""
    broker = LocalBroker(tmp_path / "b", port=0)
    try:
        started = time.monotonic()
        bootstrap = broker.start(timeout=20)
        assert time.monotonic() - started < 15 and not bootstrap.endswith(":0")
        TopicAdmin(KafkaConfig(bootstrap_servers=bootstrap)).ensure_topic("t", 1)
    finally:
        broker.stop()


def test_a_stale_control_file_whose_pid_is_another_process_does_not_block_the_data_dir(
    tmp_path: Path,
) -> None:
    """After a SIGKILL and a reboot the control file's pid may be any process: the data dir was
    refused for good, while noida-db down said nothing runs."""
    import json
    import subprocess

    data = tmp_path / "b"
    data.mkdir()
    other = subprocess.Popen(["sleep", "30"])
    try:
        (data / "noida.control.json").write_text(json.dumps({"pid": other.pid}))
        broker = LocalBroker(data)
        try:
            broker.start(timeout=20)
            assert broker.alive()
        finally:
            broker.stop()
        assert other.poll() is None  # the other process was left alone
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_an_embedded_client_never_closed_leaves_no_broker_behind(how: str) -> None:
    """``noida-db up`` detaches the broker: a process that exited without ``close()`` (or was
    SIGKILLed) left it running for good, with its temp data dir. Its reaper stops it once the
    process is gone, after the application's own exit hooks, which may still use it."""
    import subprocess
    import sys

    script = (
        "import atexit, sys, time\n"
        "from pulsar_txn.client import Client\n"
        "client = Client.embedded()\n"
        "broker = next(t for t in client._owned if type(t).__name__ == 'LocalBroker')\n"
        "producer = client.create_producer('t') if client.create_topic('t', 1) is None else None\n"
        "atexit.register(lambda: print('hook', producer.send(b'last').offset, flush=True))\n"
        "print(broker.data_dir, flush=True)\n"
        "time.sleep(60 if sys.argv[1] == 'sigkill' else 0)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, how], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    data_dir = Path(child.stdout.readline().strip())
    broker = LocalBroker(data_dir)
    assert broker.alive()
    if how == "sigkill":
        child.kill()
    else:
        assert child.stdout.readline().startswith("hook")  # the broker still served the app's hook
    child.wait(60)
    child.stdout.close()
    deadline = time.monotonic() + 30
    while (broker.alive() or data_dir.parent.exists()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not broker.alive() and not data_dir.parent.exists()


def test_a_receive_with_the_broker_gone_returns_near_its_timeout(tmp_path: Path) -> None:
    """The reader's periodic checks (topic created again, transactions held below the log start)
    waited a request timeout per partition: a receive(2000) took 34 s with two partitions."""
    import signal

    client = Client.embedded(data_dir=tmp_path, operation_timeout_seconds=10)
    try:
        client.create_topic("gone", 2)
        consumer = client.subscribe("gone", "s")
        with pytest.raises(Timeout):
            consumer.receive(1000)  # its partitions read: the periodic checks are what is left
        pid = LocalBroker(tmp_path / "broker")._running_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        time.sleep(5.5)  # the checks are due every 5 s
        started = time.monotonic()
        with pytest.raises(PulsarTxnError):  # Timeout (nothing arrives) or a broker error
            consumer.receive(2000)
        assert time.monotonic() - started < 8
    finally:
        client.close()
