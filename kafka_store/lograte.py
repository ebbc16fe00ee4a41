"""Warnings that others can cause by the thousand (forged or malformed records in a topic, a dead
broker's connection errors), logged without letting them fill the log: the first of each kind, then
at most one line per interval, saying how many like it were left out. The counters in the stats
keep the full count."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable

LOG_INTERVAL_S = 60.0
_MAX_KINDS = 10_000  # kinds are call sites x partitions; forgotten all at once past this


class LogThrottle:
    """Per kind (any hashable: a reason, a partition and a reason), the first warning and then one
    per ``interval`` seconds."""

    def __init__(self, interval: float = LOG_INTERVAL_S) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._kinds: dict[Hashable, tuple[float, int]] = {}  # kind -> (last logged, left out since)

    def admit(self, kind: Hashable) -> int | None:
        """None: leave this one out; else how many of its kind were left out since the last line."""
        now = time.monotonic()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is not None and now - seen[0] < self.interval:
                self._kinds[kind] = (seen[0], seen[1] + 1)
                return None
            if seen is None and len(self._kinds) >= _MAX_KINDS:
                self._kinds.clear()
            self._kinds[kind] = (now, 0)
            return 0 if seen is None else seen[1]

    def log(self, logger: logging.Logger, level: int, kind: Hashable, msg: str, *args: object) -> None:
        left_out = self.admit(kind)
        if left_out is None:
            return
        if left_out:
            msg += " (and %d more like it since the last such line)"
            args = (*args, left_out)
        logger.log(level, msg, *args)

    def warning(self, logger: logging.Logger, kind: Hashable, msg: str, *args: object) -> None:
        self.log(logger, logging.WARNING, kind, msg, *args)


THROTTLE = LogThrottle()
"""The process's throttle for records skipped on reading (each kind keyed by where and why)."""

__all__ = ["LOG_INTERVAL_S", "THROTTLE", "LogThrottle"]
