"""What the client processes of a Jepsen-style run did and saw, as JSON lines.

Each process appends to files of its own, one line per event, each written by a single ``os.write``
on a file opened with ``O_APPEND``: a SIGKILL loses at most the event being written, never an
earlier one (the data is in the kernel once ``write`` returned). A line cut short by the kill is
skipped by the loader and counted.

Events of one operation share ``(proc, inc, op)`` (process name, incarnation, operation number):

* ``invoke``: ``f`` (``txn``: transactional writes; ``send``: one plain write; ``xfer``: consume,
  produce and acknowledge in one transaction), ``writes`` ``[[topic, partition, value], ...]`` in
  send order, ``reads`` ``[[topic, partition, offset, value], ...]`` and ``sub`` (the subscription)
  (``xfer``), ``intent``
  (``commit``, ``abort`` or ``abandon``: never ended, left to the coordinator's timeout).
* ``begun``: ``txn`` (the TxnID as printed), ``b0``/``b1`` (``time.monotonic_ns`` around the begin
  call: one clock for every process of the machine). Written before the first write of the op.
* ``ok`` / ``fail`` / ``info``: committed (plain write stored) / certainly not committed / unknown.

Readers append observation lines ``{"r": name, "inc": n, "obs": [[topic, partition, offset,
value], ...]}`` in delivery order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Write = tuple[str, int, str]  # topic, partition, value
Read = tuple[str, int, int, str]  # topic, partition, offset, value
Location = tuple[str, int, int]  # topic, partition, offset


class _AppendOnly:
    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _line(self, record: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


class Recorder(_AppendOnly):
    """One client process's history file."""

    def __init__(self, path: Path, proc: str, inc: int) -> None:
        super().__init__(path)
        self.proc, self.inc = proc, inc

    def event(self, op: int, kind: str, **fields: Any) -> None:
        self._line({"proc": self.proc, "inc": self.inc, "op": op, "type": kind, **fields})


class Observations(_AppendOnly):
    """One reader process's observation file."""

    def __init__(self, path: Path, reader: str, inc: int) -> None:
        super().__init__(path)
        self.reader, self.inc = reader, inc

    def seen(self, batch: list[Read]) -> None:
        if batch:
            self._line({"r": self.reader, "inc": self.inc, "obs": batch})


@dataclass
class Op:
    """One operation, folded from its events."""

    proc: str
    inc: int
    op: int
    f: str = "?"
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    intent: str = "commit"
    sub: str | None = None  # the subscription of a transfer
    txn: str | None = None
    begun: tuple[int, int] | None = None  # monotonic ns before and after the begin call
    outcome: str = "info"  # as the client saw it: ok, fail, info (also: no outcome line at all)
    error: str | None = None
    tc_status: str | None = None  # the coordinator's final word on ``txn``, filled in by the runner

    @property
    def key(self) -> str:
        return f"{self.proc}.{self.inc}.{self.op}"


def _lines(paths: Iterable[Path], torn: list[int]) -> Iterator[dict[str, Any]]:
    for path in sorted(paths):
        for raw in path.read_bytes().splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                torn[0] += 1  # cut short by a SIGKILL
                continue
            if isinstance(record, dict):
                yield record


def load_ops(paths: Iterable[Path]) -> tuple[list[Op], int]:
    """The operations of these history files, and how many torn lines were skipped."""
    torn = [0]
    ops: dict[tuple[str, int, int], Op] = {}
    for e in _lines(paths, torn):
        key = (str(e["proc"]), int(e["inc"]), int(e["op"]))
        op = ops.get(key)
        if op is None:
            op = ops[key] = Op(*key)
        kind = e["type"]
        if kind == "invoke":
            op.f = e["f"]
            op.writes = [(str(t), int(p), str(v)) for t, p, v in e.get("writes", [])]
            op.reads = [(str(t), int(p), int(o), str(v)) for t, p, o, v in e.get("reads", [])]
            op.intent = e.get("intent", "commit")
            op.sub = e.get("sub")
        elif kind == "begun":
            op.txn = e["txn"]
            op.begun = (int(e["b0"]), int(e["b1"]))
        elif kind in ("ok", "fail", "info"):
            op.outcome = kind
            op.error = e.get("error")
    return list(ops.values()), torn[0]


def load_observations(paths: Iterable[Path]) -> tuple[dict[tuple[str, int], list[Read]], int]:
    """Per (reader, incarnation): what it delivered, in order; and the torn lines skipped."""
    torn = [0]
    out: dict[tuple[str, int], list[Read]] = {}
    for line in _lines(paths, torn):
        seen = out.setdefault((str(line["r"]), int(line["inc"])), [])
        seen.extend((str(t), int(p), int(o), str(v)) for t, p, o, v in line["obs"])
    return out, torn[0]
