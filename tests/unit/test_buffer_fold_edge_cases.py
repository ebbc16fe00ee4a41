"""Edge cases of the transaction-buffer fold (``TxnBufferState``): it stays a pure function of the
records, whoever reads them, and bad or forged input is skipped, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_store import REGISTRY
from pulsar_txn.buffer.marker import (
    CTL_HEADER,
    MARKER_CTL,
    TXN_HEADER,
    TXN_MAC_HEADER,
    TXN_MARKER,
    TxnMarker,
    encode_marker,
    txn_message_mac,
)
from pulsar_txn.buffer.state import Headers, TxnBufferState
from pulsar_txn.txnid import TxnAction, TxnID

PLAIN: Headers = [("pulsar.seq", b"1")]


def _msg(txn: TxnID) -> Headers:
    return [("pulsar.seq", b"1"), (TXN_HEADER, txn.to_bytes())]


def _fold(records: list[tuple[Headers, bytes]]) -> tuple[TxnBufferState, list[object]]:
    state = TxnBufferState("t", 0, num_tcs=4)
    verdicts = [state.apply(offset, headers, value) for offset, (headers, value) in enumerate(records)]
    return state, verdicts


def test_a_header_without_a_value_folds_like_an_empty_one_so_the_service_and_readers_agree() -> None:
    # The TB service folds the client's raw headers (a missing value is None); readers get b"".
    txn = TxnID(0, 1 << 40)
    as_service: list[tuple[Headers, bytes]] = [
        ([(CTL_HEADER, None), (TXN_HEADER, txn.to_bytes())], b"ctl"),
        ([("pulsar.seq", b"1"), (TXN_HEADER, None)], b"txn-header-without-value"),
        (PLAIN, b"plain"),
    ]
    as_reader: list[tuple[Headers, bytes]] = [
        ([(name, raw if raw is not None else b"") for name, raw in headers or ()], value)
        for headers, value in as_service
    ]
    service, service_verdicts = _fold(as_service)
    reader, reader_verdicts = _fold(as_reader)
    assert service_verdicts == reader_verdicts == [False, False, True]
    assert service == reader
    assert service.ongoing == {} and service.max_read_position == 3
    for offset, ((headers, _), (reader_headers, _)) in enumerate(zip(as_service, as_reader, strict=True)):
        assert service.is_visible(offset, headers) == reader.is_visible(offset, reader_headers)


@pytest.mark.parametrize("most, least", [(-1, 5), (0, -1)])
@pytest.mark.parametrize("secret", [None, b"secret"])
def test_a_well_formed_marker_with_a_negative_txn_id_is_counted_corrupt_and_skipped(
    most: int, least: int, secret: bytes | None
) -> None:
    forged = TXN_MARKER.encode(
        {
            "txn_most": most,
            "txn_least": least,
            "action": "COMMIT",
            "low_watermark": 0,
            "written_at_ms": 0,
            "mac": b"",
        }
    )
    assert REGISTRY.decode_as(TXN_MARKER, forged)["txn_least"] == least  # well-formed Avro
    txn = TxnID(0, 1)
    state = TxnBufferState("t", 0, num_tcs=4, marker_secret=secret)
    assert state.apply(0, [(CTL_HEADER, MARKER_CTL), (TXN_HEADER, b"\0" * 16)], forged) is False
    assert state.counters.corrupt_markers == 1 and state.counters.markers == 0
    # The fold goes on as if the record were not there.
    opening = _msg(txn)
    if secret is not None:
        opening.append((TXN_MAC_HEADER, txn_message_mac(secret, txn.to_bytes(), "t", 0)))
    assert state.apply(1, opening, b"t") == txn
    assert state.apply(2, PLAIN, b"plain") is True
    assert state.ongoing == {txn: 1} and state.max_read_position == 1


def test_prune_keeps_an_aborted_txn_while_a_late_message_of_it_is_retained() -> None:
    txn = TxnID(0, 7)
    abort_value, abort_headers = encode_marker(TxnMarker(txn, TxnAction.ABORT, -1, 0))
    state, verdicts = _fold(
        [
            (PLAIN, b"p0"),
            (_msg(txn), b"t1"),
            (list(abort_headers), abort_value),
            (_msg(txn), b"late-t3"),  # sent after the abort (an in-flight send)
            (PLAIN, b"p4"),
        ]
    )
    assert verdicts[3] is False and state.max_read_position == 5
    # Retention deleted the marker (log start 3) but not the late message: it stays invisible.
    state.prune(3)
    assert txn in state.aborted
    assert state.is_visible(3, _msg(txn)) is False
    assert state.deliverable(3, _msg(txn), verdicts[3]) is False
    assert state.deliverable(3, _msg(txn), None) is False
    # Once the late message is gone too, the txn is forgotten.
    state.prune(4)
    assert txn not in state.aborted


def test_the_open_transactions_heap_stays_bounded_behind_one_long_open_transaction() -> None:
    """Ended transactions left the heap of open ones only on reaching its top: behind one transaction
    kept open, every later transaction stayed in it (50,001 entries here; memory grew with traffic
    in every reader and in the TB service). Found in review, session 26."""
    from pulsar_txn.buffer.marker import TXN_HEADER, TxnMarker, marker_record
    from pulsar_txn.buffer.state import TxnBufferState
    from pulsar_txn.txnid import TxnAction, TxnID

    state = TxnBufferState("t", 0, num_tcs=2)
    long_open = TxnID(0, 0)
    state.apply(0, [(TXN_HEADER, long_open.to_bytes())], b"x")
    offset = 1
    for seq in range(20_000):  # TC 1: short transactions, each committed at once
        txn = TxnID(1, seq)
        state.apply(offset, [(TXN_HEADER, txn.to_bytes())], b"m")
        value, headers = marker_record(TxnMarker(txn, TxnAction.COMMIT, seq, 0), "t", 0, None)
        state.apply(offset + 1, headers, value)
        offset += 2
    assert list(state.ongoing) == [long_open]
    assert len(state._oldest) <= 2 * len(state.ongoing) + 64, len(state._oldest)
    assert state.max_read_position == 0  # still pinned by the open one


class _ScanningState(TxnBufferState):
    """The fold as it was before session 28: a watermark advance scanned every ended entry."""

    def _advance_lwm(self, tc: int, lwm: int, offset: int) -> None:
        if lwm <= self.lwm.get(tc, -1):
            return
        self.lwm[tc] = lwm
        self.changes += 1
        for txn in [t for t in self.ended if t.most_bits == tc and t.least_bits <= lwm]:
            del self.ended[txn]
        for txn in [t for t in self.ongoing if t.most_bits == tc and t.least_bits <= lwm]:
            del self.ongoing[txn]
            self.aborted[txn] = offset
            self.counters.hanging_resolved += 1


def _marker(txn: TxnID, action: TxnAction, lwm: int) -> tuple[Headers, bytes]:
    value, headers = encode_marker(TxnMarker(txn, action, lwm, 0))
    return headers, value


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["msg", "commit", "abort"]),
            st.integers(0, 2),  # TC
            st.integers(0, 40),  # sequence
            st.integers(-1, 40),  # the marker's low watermark
        ),
        max_size=200,
    )
)
@settings(max_examples=300, deadline=None)
def test_ended_entries_leave_by_watermark_exactly_as_the_scanning_fold_did(
    steps: list[tuple[str, int, int, int]],
) -> None:
    records: list[tuple[Headers, bytes]] = []
    for kind, tc, seq, lwm in steps:
        txn = TxnID(tc, seq)
        if kind == "msg":
            records.append((_msg(txn), b"m"))
        else:
            records.append(_marker(txn, TxnAction.COMMIT if kind == "commit" else TxnAction.ABORT, lwm))
    new, old = TxnBufferState("t", 0, num_tcs=4), _ScanningState("t", 0, num_tcs=4)
    for offset, (headers, value) in enumerate(records):
        assert new.apply(offset, headers, value) == old.apply(offset, headers, value)
    assert (new.ended, new.ongoing, new.aborted, new.lwm) == (old.ended, old.ongoing, old.aborted, old.lwm)
    assert new.counters.corrupt_markers == 0  # the markers were read (not skipped as unreadable)


def test_a_transaction_whose_marker_was_deleted_unread_ends_by_its_tcs_outcome() -> None:
    """A state folded to offset 2 holds T open from 0; retention then deletes 0..3, T's commit
    marker (2) among them, before the state folds it. Reading on from the log start kept T open,
    and maxReadPosition at 0 below the log start, for ever (review, session 32). Skipping the gap
    keeps T (it may still be open); its TC's outcome ends it."""
    txn = TxnID(0, 7)
    state, _ = _fold([(_msg(txn), b"t0"), (PLAIN, b"p1")])
    state.skip_deleted(4)
    assert state.scanned_to == 4 and state.max_read_position == 0 and state.held_below(4) == [txn]
    assert state.held_below(0) == []
    state.end_deleted({txn: TxnAction.COMMIT}, 4)
    assert state.ongoing == {} and state.max_read_position == 4 and state.has_ended(txn)
    assert state.apply(4, PLAIN, b"p4") is True and state.max_read_position == 5


def test_an_open_transaction_below_the_log_start_still_holds_reads_back() -> None:
    """T is still open (its TC says nothing has ended): its first message was deleted, but plain
    messages after it stay held back, as for a reader that folded every record (review, session 33:
    dropping T let plain 3 and 4 through while T was open)."""
    txn = TxnID(0, 7)
    state, _ = _fold([(_msg(txn), b"t0"), (PLAIN, b"p1"), (PLAIN, b"p2")])
    state.skip_deleted(3)
    state.apply(3, PLAIN, b"p3")
    state.apply(4, PLAIN, b"p4")
    state.apply(5, _msg(txn), b"t5")
    state.end_deleted({}, 3)
    assert state.max_read_position == 0 and state.ongoing == {txn: 0}


def test_an_aborted_transaction_ended_by_its_tc_keeps_its_late_messages_hidden() -> None:
    txn = TxnID(0, 7)
    state, _ = _fold([(_msg(txn), b"t0"), (PLAIN, b"p1")])
    state.skip_deleted(3)  # T's abort marker was at 2
    state.end_deleted({txn: TxnAction.ABORT}, 3)
    assert state.ongoing == {} and txn in state.aborted
    late = state.apply(3, _msg(txn), b"late")  # an in-flight send after the abort
    assert state.deliverable(3, _msg(txn), late) is False and state.max_read_position == 4
    state.prune(3)
    assert txn in state.aborted  # kept while retention keeps the late message


@pytest.mark.parametrize("action", [TxnAction.COMMIT, TxnAction.ABORT])
def test_late_messages_folded_before_the_tcs_outcome_stay_hidden(action: TxnAction) -> None:
    """T's marker (at 1) was deleted unread; a late message of T (at 10, after the marker) was folded
    while T still looked open. Ending T from its TC's outcome delivered it when T committed (a full
    scan discards it), and when T aborted, a prune past the log start dropped T while the late
    message was still in the log (review, session 35)."""
    txn = TxnID(0, 7)
    state, _ = _fold([(_msg(txn), b"t0")])
    state.skip_deleted(5)
    late = state.apply(10, _msg(txn), b"late")
    assert state.held_below(5) == [txn]
    state.end_deleted({txn: action}, 5)
    assert state.max_read_position == 11
    assert state.deliverable(10, _msg(txn), late) is False
    state.prune(6)  # retention moved on, the late message is still there
    assert state.deliverable(10, _msg(txn), late) is False and not state.is_visible(10, _msg(txn))
