"""Runnable Spark jobs: ``python -m spark.jobs.<name> --help``."""

from __future__ import annotations

import os
import sys

from pulsar_txn._args import cli_number
from spark._errors import typed_error

SECRET_ENV = {"token": "PULSAR_TXN_AUTH_TOKEN", "marker_secret": "PULSAR_TXN_MARKER_SECRET"}
"""Where the jobs take their secrets from (as the coordinator and the pipeline do): never a command
line, which ``ps`` shows to every user of the machine."""


def secret_from_env(kind: str) -> str | None:
    """The secret ``kind`` (``token``, ``marker_secret``) from its environment variable; None if unset
    or empty."""
    return os.environ.get(SECRET_ENV[kind]) or None


positive_int = cli_number(int, "count", 1)
"""An argparse type for counts (TCs, offsets per trigger): 0 or less is a usage error, not a value
the job drops (as "not given") or that fails at its first micro-batch."""


def exit_code_of(exc: Exception, prog: str) -> int:
    """A job failed with ``exc``: if it carries one of our typed errors (Spark wraps them in its own
    exceptions, with the worker's traceback as text), print that one line and give exit code 2, as
    the ``pulsar-txn`` commands do; anything else is raised again."""
    typed = typed_error(exc)
    if typed is None:
        raise exc
    print(f"{prog}: error: {type(typed).__name__}: {typed}", file=sys.stderr)
    return 2
