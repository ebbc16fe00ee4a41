"""pulsar-client compatibility found in review (session 34): a client's close stops its listeners
and table views, concurrent asyncio receives get distinct messages, a refused unsubscribe keeps the
consumer and its listener, ``migrate-check`` takes ``from pulsar.schema import *``, and
``migrate-run`` passes ``sys.exit("message")`` on and stops its embedded broker on SIGTERM. Each
test failed before its fix."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pulsar_txn.compat as pulsar
import pulsar_txn.compat.asyncio as pulsar_asyncio
from pulsar_txn.compat import check
from tests.conftest import Cluster, compat_options, wait_until

PTXN = str(Path(sys.executable).with_name("pulsar-txn"))


@pytest.fixture
def compat_client(cluster: Callable[..., Cluster]) -> Iterator[Callable[[], pulsar.Client]]:
    c = cluster()
    made: list[pulsar.Client] = []

    def make() -> pulsar.Client:
        client = pulsar.Client(c.coordinator.url or "", **compat_options(c))
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def _threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


@pytest.mark.integration
def test_closing_the_client_stops_its_listeners_and_table_views(
    compat_client: Callable[[], pulsar.Client], uid: str
) -> None:
    """They went on for the life of the process, retrying reads of closed handles every 0.5 s."""
    client = compat_client()
    topic = f"lst-{uid}"
    got: list[Any] = []
    consumer = client.subscribe(
        topic,
        f"s-{uid}",
        message_listener=lambda _c, m: got.append(m),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    client.create_table_view(topic)
    client.create_producer(topic).send(b"x")
    wait_until(lambda: got, 20, what="the listener's message")
    assert _threads(f"pulsar-listener-s-{uid}") and _threads("pulsar-txn-table-view")
    client.close()
    wait_until(lambda: not _threads(f"pulsar-listener-s-{uid}"), 10, what="the listener thread ended")
    assert not consumer.is_connected()


@pytest.mark.integration
def test_concurrent_asyncio_receives_get_distinct_messages(
    compat_client: Callable[[], pulsar.Client], uid: str
) -> None:
    """They all awaited one slice and got the same message (workers sharing a consumer would
    process each message several times)."""
    sync = compat_client()
    topic = f"aio-{uid}"
    producer = sync.create_producer(topic)
    consumer = pulsar_asyncio.Consumer(
        sync.subscribe(topic, f"s-{uid}", initial_position=pulsar.InitialPosition.Earliest)
    )
    for i in range(4):
        producer.send(f"m{i}".encode())

    async def main() -> list[bytes]:
        msgs = await asyncio.wait_for(asyncio.gather(*(consumer.receive() for _ in range(4))), 30)
        return sorted(m.data() for m in msgs)

    assert asyncio.run(main()) == [b"m0", b"m1", b"m2", b"m3"]


@pytest.mark.integration
def test_a_refused_unsubscribe_keeps_the_consumer_and_its_listener(
    compat_client: Callable[[], pulsar.Client], uid: str
) -> None:
    """Refused because the group also holds another topic's cursors: the native consumer was closed
    before the check, and the compat listener stopped; both go on now, as with pulsar-client."""
    client = compat_client()
    a, b, sub = f"ua-{uid}", f"ub-{uid}", f"shared-{uid}"
    got: list[bytes] = []
    producer = client.create_producer(a)
    client.create_producer(b).send(b"b")
    other = client.subscribe(b, sub, initial_position=pulsar.InitialPosition.Earliest)
    other.acknowledge(other.receive(10000))

    def listener(c: Any, m: Any) -> None:
        got.append(m.data())
        c.acknowledge(m)

    consumer = client.subscribe(
        a, sub, message_listener=listener, initial_position=pulsar.InitialPosition.Earliest
    )
    producer.send(b"1")
    wait_until(lambda: got, 20, what="the first message")
    with pytest.raises(pulsar.NotAllowedError):
        consumer.unsubscribe()
    assert consumer.is_connected()
    producer.send(b"2")
    wait_until(lambda: len(got) == 2, 20, what="a message after the refused unsubscribe")


def test_migrate_check_takes_a_star_import_of_pulsar_schema() -> None:
    source = (
        "import pulsar\nfrom pulsar.schema import *\n"
        "class Order(Record):\n    item = String()\n"
        "schema = AvroSchema(Order)\n"
    )
    findings = check.check_source(source)
    assert not [f for f in findings if f.kind in ("missing", "error")], findings


def test_migrate_run_prints_the_message_of_sys_exit(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("import sys\nsys.exit('fatal: bad config')\n")
    run = subprocess.run(
        [
            *(PTXN, "migrate-run", "--no-check", "--service-url", "pulsar://127.0.0.1:1"),
            *("--bootstrap-servers", "127.0.0.1:1", str(tmp_path / "p.py")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "fatal: bad config" in run.stderr


def _brokers_under(path: Path) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "noida" in cmdline and str(path) in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.integration
def test_sigterm_to_migrate_run_stops_its_embedded_broker(tmp_path: Path) -> None:
    """The SIGTERM handler was only installed on a code path migrate-run does not take: the broker
    (a daemon of its own) and its data dir were left behind."""
    (tmp_path / "p.py").write_text(
        "import time, pulsar\n"
        "client = pulsar.Client('pulsar://localhost:6650')\n"
        "client.create_producer('sigterm-topic').send(b'x')\n"
        "print('PROGRAM READY', flush=True)\n"
        "time.sleep(120)\n"
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.Popen(
        [PTXN, "migrate-run", "--no-check", str(tmp_path / "p.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TMPDIR": str(temp)},  # the embedded broker's data dir goes here
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 90
        while not (lines and "PROGRAM READY" in lines[-1]) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        assert _brokers_under(temp), "no embedded broker found"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130
        wait_until(lambda: not _brokers_under(temp), 30, what="the embedded broker stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        for pid in _brokers_under(temp):  # never leave one behind, even when the test fails
            os.kill(pid, signal.SIGKILL)


@pytest.mark.integration
def test_listener_callbacks_of_a_client_run_one_at_a_time_as_pulsar_clients_default(
    compat_client: Callable[[], pulsar.Client], uid: str
) -> None:
    """pulsar-client's ``message_listener_threads=1``: callbacks of different consumers never
    overlap (they did: one thread per consumer). A callback may close its own consumer."""
    client = compat_client()
    state = {"active": 0, "max": 0}
    lock = threading.Lock()
    done: list[bytes] = []

    def listener(consumer: Any, msg: Any) -> None:
        with lock:
            state["active"] += 1
            state["max"] = max(state["max"], state["active"])
        time.sleep(0.3)
        with lock:
            state["active"] -= 1
        consumer.acknowledge(msg)
        done.append(msg.data())

    consumers = []
    for name in ("a", "b"):
        topic = f"lt-{name}-{uid}"
        producer = client.create_producer(topic)
        consumers.append(
            client.subscribe(
                topic,
                f"s-{name}-{uid}",
                message_listener=listener,
                initial_position=pulsar.InitialPosition.Earliest,
            )
        )
        for _ in range(3):
            producer.send(b"x")
    wait_until(lambda: len(done) == 6, 30, what="all six messages")
    assert state["max"] == 1

    closed: list[float] = []

    def closing(consumer: Any, _msg: Any) -> None:
        started = time.monotonic()
        consumer.close()  # waited 5 s for its own listener thread, which waits for this call
        closed.append(time.monotonic() - started)

    topic = f"lt-close-{uid}"
    producer = client.create_producer(topic)
    client.subscribe(
        topic, f"s-{uid}", message_listener=closing, initial_position=pulsar.InitialPosition.Earliest
    )
    producer.send(b"x")
    wait_until(lambda: closed, 20, what="the closing callback")
    assert closed[0] < 2.0


def test_message_listener_threads_must_be_a_positive_whole_number() -> None:
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(pulsar.InvalidConfiguration):
            pulsar.Client(
                "pulsar://127.0.0.1:1", bootstrap_servers="127.0.0.1:1", message_listener_threads=bad
            )


@pytest.mark.integration
def test_an_embedded_compat_client_subscribes_reads_and_closes() -> None:
    """``Client.embedded()`` bypasses ``__init__``: what subscribe, readers and close need must be set
    up there too (a first version of this session's close fix broke it)."""
    client = pulsar.Client.embedded()
    try:
        client.create_producer("emb-topic").send(b"x")
        consumer = client.subscribe("emb-topic", "emb-sub", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(10000).data() == b"x"
        reader = client.create_reader("emb-topic", pulsar.MessageId.earliest)
        assert reader.read_next(10000).data() == b"x"
    finally:
        client.close()
    assert not consumer.is_connected()
