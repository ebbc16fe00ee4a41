"""``pulsar-txn demo`` stopped with SIGTERM (what a service manager or ``timeout`` sends) stops the
pipeline process and the embedded broker it started: nothing is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

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
