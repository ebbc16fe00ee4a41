"""Spark wraps what a Python data source raises (``AnalysisException`` / ``StreamingQueryException``
with ``PYTHON_DATA_SOURCE_ERROR``, the worker's traceback as text), so ``except ConfigError`` catches
nothing around a read: :func:`typed_error` gives the typed error back."""

from __future__ import annotations

import re

from pulsar_txn import errors

# The traceback's last line names the exception: "pulsar_txn.errors.ConfigError: option fetchBatch...".
_RAISED = re.compile(r"^pulsar_txn\.errors\.([A-Za-z]+): (.*)$", re.MULTILINE)


def typed_error(exc: BaseException) -> errors.PulsarTxnError | None:
    """The ``pulsar_txn.errors`` exception a Spark read failed with, found in ``exc`` (any exception
    Spark raised) and made again with its class and message (its ``retriable`` as the class has it);
    None if ``exc`` carries none. ``exc`` itself if it already is one."""
    if isinstance(exc, errors.PulsarTxnError):
        return exc
    found = _RAISED.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]  # the one raised: a chained traceback prints its causes first
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.PulsarTxnError)):
        return None
    typed = cls(message)
    typed.__cause__ = exc
    return typed
