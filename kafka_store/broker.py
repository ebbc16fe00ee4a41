"""Runs the embedded default broker: noida-db's Kafka service on 127.0.0.1.

The project starts and stops it itself (demo, tests, ``pulsar-txn standalone``); any real Kafka
cluster works instead by giving bootstrap servers.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from kafka_store._reaper import Reaper
from kafka_store.config import KafkaConfig
from kafka_store.errors import BrokerStartError

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _noida_binary() -> str:
    # Prefer the console script next to the running interpreter (the project's venv).
    candidate = Path(sys.executable).with_name("noida-db")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("noida-db")
    if found is None:
        raise BrokerStartError("noida-db is not installed: pip install noida-db")
    return found


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class LocalBroker:
    """A Kafka-protocol broker in its own data dir on a free local port."""

    # This broker answers an empty fetch at once (docs/broker-quirks.md): idle tailing readers would
    # spin without the idle gate. Apache Kafka holds empty fetches itself and needs no gate.
    IDLE_FETCH_BACKOFF_MS = 5

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self._running = False

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise BrokerStartError("broker not started")
        return f"127.0.0.1:{self.port}"

    def kafka_config(self, **settings: Any) -> KafkaConfig:
        """Client settings for this broker: its bootstrap servers and the idle gate it wants
        (``settings`` override either)."""
        settings.setdefault("bootstrap_servers", self.bootstrap_servers)
        settings.setdefault("idle_fetch_backoff_ms", self.IDLE_FETCH_BACKOFF_MS)
        return KafkaConfig(**settings)

    def start(self, timeout: float = 30.0) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:  # None or 0: any free one (noida-db itself would pick one we cannot tell)
            self.port = free_port()
        cmd = [
            _noida_binary(),
            "up",
            "--only",
            "kafka",
            "--host",
            "127.0.0.1",
            "--kafka-port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        running = self._running_pid()
        if running is not None:
            # ``up`` would attach to it, and our stop() would then stop another process's broker.
            raise BrokerStartError(
                f"a broker already runs in {self.data_dir} (pid {running}): use another data dir, or "
                f"stop it with: noida-db down --data-dir {self.data_dir}"
            )
        try:
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                raise BrokerStartError(f"noida-db up did not return within {timeout}s") from None
            if proc.returncode != 0:
                # noida-db says what went wrong on stdout ("port ... is already in use"); stderr may
                # hold only a loader's warning.
                said = "\n".join(x for x in (proc.stdout.strip(), proc.stderr.strip()) if x)
                raise BrokerStartError(f"noida-db up failed ({proc.returncode}): {said[-800:]}")
            deadline = time.monotonic() + timeout
            while not _port_open(self.port):
                if time.monotonic() > deadline:
                    raise BrokerStartError(f"the broker did not listen on port {self.port} in {timeout}s")
                time.sleep(0.05)
        except BaseException:
            # ``up`` may have started the broker's daemon before failing or being interrupted (Ctrl-C,
            # SIGTERM): nothing may stay behind.
            self._down_quietly()
            raise
        self._running = True
        log.info("embedded broker up at %s (data %s)", self.bootstrap_servers, self.data_dir)
        return self.bootstrap_servers

    def _running_pid(self) -> int | None:
        """The pid of a live broker of this data dir (None: none, or a stale control file)."""
        try:
            pid = int(json.loads((self.data_dir / "noida.control.json").read_text())["pid"])
            os.kill(pid, 0)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return pid if _is_broker_of(pid, self.data_dir) else None

    def reaper(self, remove: str | os.PathLike[str] | None = None) -> Reaper:
        """A watcher that stops this broker (and removes ``remove``) once this process has exited,
        however it exits; stop it after stopping the broker in order."""
        return Reaper(_noida_binary(), self.data_dir, Path(remove) if remove is not None else None)

    def alive(self) -> bool:
        """Whether this data dir's broker process runs (False once it exited or was killed)."""
        return self._running_pid() is not None

    def _down_quietly(self) -> None:
        if self._running_pid() is None:
            return
        try:
            subprocess.run(
                [_noida_binary(), "down", "--data-dir", str(self.data_dir)],
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.SubprocessError, BrokerStartError) as exc:
            log.warning("stopping the half-started broker in %s failed: %s", self.data_dir, exc)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the broker (data is kept). If ``noida-db down`` does not finish in time (a large data
        dir can take long to flush), the broker process is killed: the caller asked it to go."""
        if not self._running:
            return
        cmd = [_noida_binary(), "down", "--data-dir", str(self.data_dir)]
        try:
            subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            log.warning("noida-db down did not return within %ss; killing the broker", timeout)
            self._kill()
        self._running = False
        log.info("embedded broker stopped")

    def _kill(self) -> None:
        control = self.data_dir / "noida.control.json"
        try:
            pid = int(json.loads(control.read_text())["pid"])
        except (OSError, ValueError, KeyError) as exc:
            raise BrokerStartError(f"cannot find the broker's pid in {control}: {exc}") from None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _is_broker_of(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is a live broker of ``data_dir``: after a SIGKILL and a reboot (or a container
    restart) the control file's pid can belong to any process, which made the data dir unusable
    (``noida-db down`` then said nothing runs). Told from ``/proc``; without it, assumed so."""
    proc = Path(f"/proc/{pid}")
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        args = (proc / "cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # gone, or no procfs to ask
    except (OSError, IndexError):
        return True  # not ours to read: do not take it for stale
    if state == "Z":  # exited, not reaped yet
        return False
    try:
        given = args[args.index(b"--data-dir") + 1].decode()
    except (ValueError, IndexError, UnicodeDecodeError):
        return False  # not a noida-db broker's command line
    path = Path(given)
    if not path.is_absolute():
        path = (proc / "cwd").resolve() / path  # relative to the broker's working dir, not ours
    return path.resolve() == data_dir.resolve()
