"""Stops an embedded broker once the process that started it has exited, however it exited.

``noida-db up`` detaches the broker, so a process that never stopped it (a script that exits
without ``close()``, an exception outside ``with``, a SIGKILL) left it running for good. A stop in
an exit hook runs too early (before hooks the application registered earlier, which may still use
the broker) and cannot run after a SIGKILL. So a small watcher process waits for its parent to be
gone, then runs ``noida-db down`` and removes the data dir it was told to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_WATCH = """
import os, select, shutil, subprocess, sys, time
parent, noida, data_dir, remove = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
try:
    fd = os.pidfd_open(parent)
except (AttributeError, OSError):
    fd = None
if fd is not None:
    select.select([fd], [], [])
else:
    while True:
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
subprocess.run([noida, "down", "--data-dir", data_dir], capture_output=True, timeout=120, check=False)
if remove:
    shutil.rmtree(remove, ignore_errors=True)
"""


class Reaper:
    """The watcher of one broker; ``stop()`` (the broker was stopped in order) ends it."""

    def __init__(self, noida: str, data_dir: Path, remove: Path | None) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _WATCH, str(os.getpid()), noida, str(data_dir), str(remove or "")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the terminal's process group must not end it first
        )

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
