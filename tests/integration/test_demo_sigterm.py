"""``pulsar-txn demo`` stopped with SIGTERM (what a service manager or ``timeout`` sends) stops the
pipeline process and the embedded broker it started: nothing is left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kafka_store import KafkaConfig
from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _running_with(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.pid != os.getpid() and any(marker in part for part in cmdline):
            found.append(proc)
    return found


def test_sigterm_during_the_demo_leaves_no_broker_or_pipeline_running(tmp_path: Path) -> None:
    data = tmp_path / "demo-data"
    demo = subprocess.Popen(
        [sys.executable, "-m", "pulsar_txn.cli", "demo", "--data-dir", str(data), "--messages", "200000"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert demo.stdout is not None
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 120
        for line in demo.stdout:  # until the pipeline process runs
            seen.append(line)
            if line.startswith("[pipeline]") or time.monotonic() > deadline:
                break
        assert any(line.startswith("[pipeline]") for line in seen), "".join(seen[-20:])
        broker = [p for p in _running_with(str(data)) if p.pid != demo.pid]
        assert broker, "the demo's broker should be running"
        pipeline = [p for p in psutil.Process(demo.pid).children() if "pipeline" in " ".join(p.cmdline())]
        assert pipeline, "the demo's pipeline process should be running"
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(60) == 130
        _gone, alive = psutil.wait_procs(broker + pipeline, timeout=30)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(30)
        demo.stdout.close()
        for proc in _running_with(str(data)):  # never leave a broker behind, even when failing
            proc.kill()


@pytest.mark.parametrize("after_s", [0.3, 1.0])
def test_sigterm_while_standalone_starts_leaves_no_broker(tmp_path: Path, after_s: float) -> None:
    """A SIGTERM (or Ctrl-C) while ``standalone`` starts its broker and coordinator: Python's default
    action, or an interrupted ``noida-db up``, left the broker's daemon running."""
    data = tmp_path / "sa"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsar_txn.cli", "standalone", "--data-dir", str(data), "--port", "0"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(after_s)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        time.sleep(0.5)  # a daemon forked at the last moment
        assert _running_with(str(data)) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for leftover in _running_with(str(data)):
            leftover.kill()


def test_a_broker_is_not_started_twice_in_one_data_dir_and_a_refusal_says_why(tmp_path: Path) -> None:
    """A second start in a data dir whose broker runs attached to it (and its stop() then stopped
    the first one's broker). A port already taken was reported with a loader warning from stderr
    only; noida-db's own reason is on stdout."""
    from kafka_store import BrokerStartError, LocalBroker

    first = LocalBroker(tmp_path / "one")
    first.start()
    try:
        with pytest.raises(BrokerStartError, match="already runs in"):
            LocalBroker(tmp_path / "one").start()
        with pytest.raises(BrokerStartError, match="already in use"):
            LocalBroker(tmp_path / "two", port=first.port).start(timeout=20)
        assert _running_with(str(tmp_path / "two")) == []
        assert first.bootstrap_servers  # still up
    finally:
        first.stop()
    assert _running_with(str(tmp_path / "one")) == []


def test_a_coordinator_whose_ready_file_cannot_be_written_is_not_announced_and_stops_cleanly(
    tmp_path: Path, kafka: KafkaConfig, uid: str
) -> None:
    """The ready line was printed before the ready file was written; a file that could not be
    written then failed the command past its clean stop (the group member never left)."""
    config = tmp_path / "coordinator.json"
    coordinator = {
        "log_topic": f"__log_{uid}",
        "owners_topic": f"__owners_{uid}",
        "coordinator_group": f"coord_{uid}",
        "num_tcs": 2,
        "tb_service_enabled": False,
    }
    config.write_text(json.dumps({"coordinator": coordinator}))
    cmd = [sys.executable, "-m", "pulsar_txn.cli", "coordinator", "--config", str(config), "--port", "0"]
    cmd += ["--bootstrap-servers", kafka.bootstrap_servers, "--ready-file", str(tmp_path / "no" / "r.json")]
    done = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""  # never announced as ready
    assert "stopping coordinator" in done.stderr and "No such file or directory" in done.stderr


def test_the_demo_kills_the_pipeline_mid_transaction_and_a_reused_data_dir_still_checks_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's main job: a killed pipeline leaves a transaction open that its successor aborts
    (before, the pipeline outran its input and every kill found it idle: "fenced 0"). A second demo
    in the same data dir found the first one's input too and said "demo FAILED" though every input
    was there exactly once."""
    from pulsar_txn.pipeline.demo import run_pipeline_demo

    data = tmp_path / "demo"
    assert run_pipeline_demo(data, messages=3000, kills=1) == 0
    first = capsys.readouterr().out
    fenced = [int(line.rsplit("fenced ", 1)[1]) for line in first.splitlines() if "fenced " in line]
    assert max(fenced) >= 1, first[-2000:]
    assert run_pipeline_demo(data, messages=500, kills=0) == 0
    second = capsys.readouterr().out
    assert "3500 inputs, 3500 outputs: exactly once" in second and "demo OK" in second


def test_an_embedded_client_without_a_data_dir_leaves_no_files_behind() -> None:
    """Client.embedded() (migrate-run, demos, users' tests) made a temp data dir for its broker and
    never removed it: ~25 MB per run."""
    from pulsar_txn.client import Client

    client = Client.embedded()
    made = [x.path for x in client._owned if type(x).__name__ == "_TempDir"]
    assert len(made) == 1 and Path(made[0]).is_dir()
    client.close()
    assert not Path(made[0]).exists()
    assert _running_with(made[0]) == []


def test_standalone_stops_with_an_error_when_its_broker_dies(tmp_path: Path) -> None:
    """It served on, a coordinator without its Kafka, logging only connection failures (start-up
    review of session 43). Failed before."""
    data, ready = tmp_path / "sa", tmp_path / "ready.json"
    command = [sys.executable, "-m", "pulsar_txn.cli", "standalone", "--data-dir", str(data), "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--ready-file", str(ready)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert ready.exists()
        os.kill(json.loads((data / "broker" / "noida.control.json").read_text())["pid"], signal.SIGKILL)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 2 and "embedded broker exited" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for leftover in _running_with(str(data)):
            leftover.kill()
