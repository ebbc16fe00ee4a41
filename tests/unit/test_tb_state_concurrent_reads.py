"""``TxnBufferState.max_read_position`` is read on other threads than the one folding (a consumer's
acks check it while its reader polls): reads racing each other never lose an open transaction's
pin. Found in review, session 32."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest

from pulsar_txn.buffer.marker import TXN_HEADER, TxnMarker, marker_record
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.txnid import TxnAction, TxnID


@pytest.fixture
def switch_often() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch between almost any two bytecodes
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _message(state: TxnBufferState, offset: int, txn: TxnID) -> None:
    state.apply(offset, [(TXN_HEADER, txn.to_bytes())], b"m")


def _commit(state: TxnBufferState, offset: int, txn: TxnID) -> None:
    value, headers = marker_record(TxnMarker(txn, TxnAction.COMMIT, 0, 0), "t", 0, None)
    state.apply(offset, headers, value)


def _stale_tops_above_open_txn() -> TxnBufferState:
    """50 transactions committed (their heap entries, at 0-49, are stale and on top), then (0,0)
    open since 50: readers pop the stale entries, and must stop at the open one."""
    state = TxnBufferState("t", 0, num_tcs=2)
    for seq in range(50):
        _message(state, seq, TxnID(1, seq))
    _message(state, 50, TxnID(0, 0))
    for seq in range(50):
        _commit(state, 51 + seq, TxnID(1, seq))
    return state


def test_concurrent_reads_of_max_read_position_keep_the_open_txns_pin(switch_often: None) -> None:
    deadline = time.monotonic() + 3.0
    trials = 0
    while time.monotonic() < deadline and trials < 3000:
        trials += 1
        state = _stale_tops_above_open_txn()
        barrier = threading.Barrier(3)
        seen: list[int] = []

        def read(
            state: TxnBufferState = state, barrier: threading.Barrier = barrier, seen: list[int] = seen
        ) -> None:
            barrier.wait()
            seen.append(state.max_read_position)

        threads = [threading.Thread(target=read) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == [50, 50, 50], f"trial {trials}: {seen}"
        assert state.max_read_position == 50
