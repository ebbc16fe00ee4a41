"""Garbage-collector settings for our long-running processes (coordinator, standalone, pipeline).

A coordinator keeps every finished transaction for ``end_txn_retention_ms`` (hundreds of thousands
at full load), and CPython's default thresholds re-scan that whole population every few seconds:
at 2,000 txn/s the full collections alone cost ~20% of the event loop. A pipeline holds a batch of
messages and their send futures; there full collections took ~20% of the process's CPU. Neither
makes reference cycles per message or request, so young collections can be far rarer. Only our
entry points call this; an application using the library keeps its own settings.
"""

from __future__ import annotations

import gc

# Young collections every 50,000 allocations (default 700); full ones 100x rarer than default.
SERVICE_THRESHOLDS = (50_000, 20, 100)


def tune_for_service() -> None:
    """Freeze what start-up allocated (modules, config) and raise the collection thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVICE_THRESHOLDS)
