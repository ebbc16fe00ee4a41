"""The TB service loop driven by a scripted group reader: a partition that reports an end below what
was folded (its topic deleted and created again) is folded anew from its start; the fresh state is
never marked folded up to that end without reading it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pulsar_txn.buffer.service as svc_mod
from pulsar_txn.buffer.service import TransactionBufferService
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.config import CoordinatorConfig

TP = ("t", 0)


class FakeGroupReader:
    instances: list[FakeGroupReader] = []

    def __init__(self, kafka, group, on_assign, on_revoke, **kw):
        self.on_assign, self.eof, self.seeks, self.polls = on_assign, {}, [], 0
        self.subscribed = False
        self.fatal = None  # GroupReader: why the membership ended for good (never, here)
        FakeGroupReader.instances.append(self)

    def subscribe(self, topics):
        if not self.subscribed:
            self.subscribed = True
            self.on_assign([TP])

    def poll_batch(self, n, timeout):
        self.polls += 1
        if self.polls == 2:
            self.eof[TP] = 50  # the new incarnation of t[0] ends at 50 (records 0..49 not read yet)
        time.sleep(0.01)
        return []

    def caught_up(self):
        return False

    def pause_all(self): ...
    def resume_all(self): ...

    def seek_to_start(self, topic, partition):
        self.seeks.append((topic, partition))
        self.eof.pop((topic, partition), None)

    def close(self): ...


class FakeAdmin:
    def __init__(self, kafka): ...

    def list_topics(self):
        return ["t"]

    def close(self):
        pass


class FakeStore:
    def __init__(self):
        self.written: list[tuple[int, dict]] = []

    def load_many(self, partitions, **kw):
        old = TxnBufferState("t", 0, num_tcs=16)
        old.scanned_to = 100  # folded up to 100 in the old incarnation
        return {TP: (old, 0)}

    def forget(self, topic, partitions):
        return 0

    def drop_cached(self, exists):
        return 0

    def matches(self, *a):
        return True

    def write(self, state):
        self.written.append((state.scanned_to, dict(state.ongoing)))
        f: Future = Future()
        f.set_result(0)
        return f


def test_end_below_folded_offset_refolds_from_start(monkeypatch) -> None:
    monkeypatch.setattr(svc_mod, "GroupReader", FakeGroupReader)
    monkeypatch.setattr(svc_mod, "TopicAdmin", FakeAdmin)
    svc = TransactionBufferService(None, CoordinatorConfig())  # type: ignore[arg-type]
    store = FakeStore()
    svc._store = store  # type: ignore[assignment]
    th = threading.Thread(target=svc._run, daemon=True)
    th.start()
    time.sleep(1.0)
    svc._stop.set()
    th.join(10)
    reader = FakeGroupReader.instances[-1]
    state = svc._owned.get(TP)
    scanned = state.state.scanned_to if state else None
    # Expected: records 0..49 of the new partition get folded (seek to its start, or scanned_to
    # stays below them). Observed: scanned_to jumps to 50 with nothing folded and no seek, and the
    # snapshot written says so: a reader trusting it would deliver an open txn's messages in 0..49.
    assert reader.seeks == [TP] or scanned == 0, (reader.seeks, scanned, store.written)
