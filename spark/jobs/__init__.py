"""Runnable Spark jobs: ``python -m spark.jobs.<name> --help``."""

from __future__ import annotations

import os

from pulsar_txn._args import cli_number

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
