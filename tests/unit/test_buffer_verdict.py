"""The verdict ``apply`` returns gives the same delivery answer as ``is_visible`` (pure, property-based).

The read-committed reader decides delivery from the verdict it kept while scanning, without parsing
headers again; it must never disagree with the state's own rule, whatever ends a transaction later
(its marker, or the TC's low watermark resolving it as hanging)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_store import StoredRecord
from pulsar_txn.buffer.marker import TxnMarker, encode_marker
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.txnid import TxnAction, TxnID
from tests.unit.test_spark_read import _build, _Msg, _step

# Also: a marker of another txn whose low watermark ends every txn up to i (hanging ones included).
_lwm_step = st.tuples(st.just("lwm"), st.integers(0, 5))


def _with_lwm(steps: list[tuple[str, int]]) -> list[_Msg]:
    msgs: list[_Msg] = []
    for kind, i in steps:
        if kind == "lwm":
            value, headers = encode_marker(TxnMarker(TxnID(0, 99), TxnAction.COMMIT, 10 + i, 0))
            msgs.append(_Msg(len(msgs), value, list(headers)))
        else:
            msgs.extend(_Msg(len(msgs), m.value(), m.headers()) for m in _build([(kind, i)]))
    return msgs


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_step, _lwm_step), max_size=60))
def test_deliverable_by_verdict_agrees_with_is_visible(steps: list[tuple[str, int]]) -> None:
    msgs = _with_lwm(steps)
    state = TxnBufferState("t", 0)
    verdicts = [state.apply(m.offset(), m.headers(), m.value()) for m in msgs]
    for m, verdict in zip(msgs, verdicts, strict=True):
        by_verdict = state.deliverable(m.offset(), m.headers(), verdict)
        assert by_verdict == state.is_visible(m.offset(), m.headers())


def test_a_record_folded_before_gets_no_verdict_and_falls_back_to_is_visible() -> None:
    state = TxnBufferState("t", 0)
    txn = TxnID(0, 1)
    headers = [("pulsar.seq", b"1"), ("ptxn.txn", txn.to_bytes())]
    assert state.apply(0, headers, b"a") == txn
    assert state.apply(0, headers, b"a") is None  # already folded
    assert state.deliverable(0, headers, None) is True
    value, marker_headers = encode_marker(TxnMarker(txn, TxnAction.ABORT, -1, 0))
    assert state.apply(1, marker_headers, value) is False  # a marker is never delivered
    assert state.deliverable(0, headers, None) is False  # aborted now
    assert state.deliverable(0, headers, txn) is False


def _records(msgs: list[_Msg]) -> list[StoredRecord]:
    return [StoredRecord("t", 0, m.offset(), None, m.value(), tuple(m.headers() or ()), 0) for m in msgs]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(_step, _lwm_step), max_size=60),
    st.lists(st.integers(1, 7), min_size=1, max_size=12),
    st.integers(0, 5),
)
def test_apply_batch_folds_exactly_as_apply_record_by_record(
    steps: list[tuple[str, int]], cuts: list[int], refold: int
) -> None:
    """The reader's batch fold (plain messages and messages of open transactions inline) gives the
    verdicts, the state and the anchor that ``apply`` one record at a time gives, in batches of any
    size, also when a batch starts with records folded before (a snapshot's overlap)."""
    records = _records(_with_lwm(steps))
    one = TxnBufferState("t", 0)
    expected = [one.apply(r.offset, r.headers, r.value) for r in records]
    batched = TxnBufferState("t", 0)
    got: list[object] = []
    start, i = 0, 0
    while start < len(records):
        stop = start + cuts[i % len(cuts)]
        i += 1
        got += batched.apply_batch(records[start:stop])
        start = stop
    assert got == expected
    assert batched == one  # the dataclass's compared fields: the whole fold
    assert batched.anchor() == one.anchor()
    assert batched.max_read_position == one.max_read_position
    again = one.apply_batch(records[max(0, len(records) - refold) :])  # folded before: no verdicts
    assert all(v is None for v in again)
