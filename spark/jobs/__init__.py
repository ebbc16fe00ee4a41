"""Runnable Spark jobs: ``python -m spark.jobs.<name> --help``."""

from __future__ import annotations

import argparse
import os

SECRET_ENV = {"token": "PULSAR_TXN_AUTH_TOKEN", "marker_secret": "PULSAR_TXN_MARKER_SECRET"}
"""Where the jobs take their secrets from (as the coordinator and the pipeline do): never a command
line, which ``ps`` shows to every user of the machine."""


def secret_from_env(kind: str) -> str | None:
    """The secret ``kind`` (``token``, ``marker_secret``) from its environment variable; None if unset
    or empty."""
    return os.environ.get(SECRET_ENV[kind]) or None


def positive_int(text: str) -> int:
    """An argparse type for counts (TCs, offsets per trigger): 0 or less is a usage error, not a
    value the job drops (as "not given") or that fails at its first micro-batch."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r:.40}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive whole number")
    return value
