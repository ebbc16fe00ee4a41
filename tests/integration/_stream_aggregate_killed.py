"""``spark.jobs.stream_aggregate`` whose driver SIGKILLs itself at a chosen crash point, for the
exactly-once tests. ``PULSAR_TXN_KILL_AT``: ``tasks:<batch>`` (every task has produced its rows into
the batch's transaction, which is still open) or ``commit:<batch>`` (the transaction is committed,
Spark has not yet recorded the batch as done)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from spark import writer
from spark.jobs import stream_aggregate

point, _, at = os.environ["PULSAR_TXN_KILL_AT"].partition(":")
kill_batch = int(at)
current: dict[str, int | None] = {}

_write = writer.TransactionalWriter.write
_run_tasks = writer.TransactionalWriter._run_tasks
_attempt = writer.TransactionalWriter._attempt


def _die_at(where: str) -> None:
    if point == where and current.get("batch") == kill_batch:
        print(f"SIGKILL at {where} of batch {kill_batch}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def write(self: Any, df: Any, **kwargs: Any) -> Any:
    current["batch"] = kwargs.get("batch_id")
    return _write(self, df, **kwargs)


def run_tasks(self: Any, *args: Any) -> None:
    _run_tasks(self, *args)
    _die_at("tasks")


def attempt(self: Any, *args: Any) -> Any:
    result = _attempt(self, *args)
    _die_at("commit")
    return result


writer.TransactionalWriter.write = write  # type: ignore[method-assign]
writer.TransactionalWriter._run_tasks = run_tasks  # type: ignore[method-assign]
writer.TransactionalWriter._attempt = attempt  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(stream_aggregate.main())
