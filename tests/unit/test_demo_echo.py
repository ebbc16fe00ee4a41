"""The demo's wait for its last pipeline run is bounded: ``_echo_until`` with no progress count
returns at the run's exit or at ``timeout``, whichever comes first (it used to wait for the exit)."""

from __future__ import annotations

import subprocess
import sys
import time

from pulsar_txn.pipeline.demo import _echo_until


def test_waiting_for_a_run_to_exit_gives_up_at_the_timeout() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('processed 1', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        started = time.monotonic()
        _echo_until(proc, progress_lines=None, timeout=1.0)
        assert time.monotonic() - started < 10
        assert proc.poll() is None  # still running: the caller decides (the demo stops it)
    finally:
        proc.kill()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()
