"""The executor's filter agrees with the transaction buffer's own rule (pure, property-based)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsar_txn.buffer.marker import CTL_HEADER, TXN_HEADER, TxnMarker, encode_marker
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.txnid import TxnAction, TxnID
from spark._options import parse_options
from spark._plan import Planner
from spark._read import _columns

Headers = list[tuple[str, bytes]]


@dataclass
class _Msg:
    """The slice of a client message ``_columns`` reads (offset, key, value, headers, timestamp)."""

    _offset: int
    _value: bytes | None
    _headers: Headers | None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


# One step of a partition's history: plain message, message of txn i, end of txn i, or junk.
_step = st.one_of(
    st.just(("plain", 0)),
    st.tuples(st.just("msg"), st.integers(0, 5)),
    st.tuples(st.just("commit"), st.integers(0, 5)),
    st.tuples(st.just("abort"), st.integers(0, 5)),
    st.just(("corrupt", 0)),
    st.just(("null", 0)),
    st.just(("ctl", 0)),
)


def _build(steps: list[tuple[str, int]]) -> list[_Msg]:
    msgs: list[_Msg] = []
    for kind, i in steps:
        o = len(msgs)
        txn = TxnID(0, 10 + i)
        if kind == "plain":
            msgs.append(_Msg(o, f"p{o}".encode(), [("pulsar.seq", b"1")]))
        elif kind == "msg":
            msgs.append(_Msg(o, f"m{o}".encode(), [("pulsar.seq", b"1"), (TXN_HEADER, txn.to_bytes())]))
        elif kind in ("commit", "abort"):
            action = TxnAction.COMMIT if kind == "commit" else TxnAction.ABORT
            value, headers = encode_marker(TxnMarker(txn, action, -1, 0))
            msgs.append(_Msg(o, value, list(headers)))
        elif kind == "corrupt":
            msgs.append(_Msg(o, b"c", [(TXN_HEADER, b"short")]))
        elif kind == "null":  # a foreign producer's null header value: the client returns None
            msgs.append(_Msg(o, b"n", [(TXN_HEADER, None)]))  # type: ignore[list-item]
        else:
            msgs.append(_Msg(o, b"x", [(CTL_HEADER, b"other")]))
    return msgs


def _stored(headers: Headers | None) -> Headers:
    """Headers as the driver's fold gets them from kafka_store (a null value is empty bytes)."""
    return [(k, v if v is not None else b"") for k, v in headers or []]


@settings(max_examples=300, deadline=None)
@given(st.lists(_step, max_size=60), st.data())
def test_executor_filter_delivers_exactly_what_is_visible_per_the_tb_state(
    steps: list[tuple[str, int]], data: st.DataObject
) -> None:
    msgs = _build(steps)
    state = TxnBufferState("t", 0)
    for m in msgs:
        state.apply(m.offset(), _stored(m.headers()), m.value())
    limit = state.max_read_position
    start = data.draw(st.integers(0, limit))
    planner = Planner(parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False))
    planner.states[("t", 0)] = state
    part = planner.range_partition(("t", 0), start, limit)
    from spark._read import RangeFilter

    cols, done = _columns(msgs[start:], limit, RangeFilter(part.aborted, part.discarded), True, {})
    expected = [
        m.offset()
        for m in msgs[start:limit]
        if not any(k == CTL_HEADER for k, _ in m.headers() or [])
        and state.is_visible(m.offset(), _stored(m.headers()))
    ]
    assert cols[0] == expected
    assert done == (len(msgs) > start)  # reached the range end (or past it)
    # The txnId column names the transaction of transactional records, None for plain ones.
    for offset, txn in zip(cols[0], cols[5], strict=True):
        has_txn = any(k == TXN_HEADER for k, _ in msgs[offset].headers() or [])
        assert (txn is not None) == has_txn


def test_raw_mode_keeps_every_record_markers_included() -> None:
    msgs = _build([("plain", 0), ("msg", 1), ("abort", 1), ("msg", 2)])
    cols, done = _columns(msgs, 4, None, True, {})
    assert cols[0] == [0, 1, 2, 3]
    assert cols[5] == [None, "(0,11)", "(0,11)", "(0,12)"]
    assert cols[4] == [0, 0, 0, 0]  # librdkafka create-time (1) -> Spark's 0
    assert done


def test_a_gap_past_the_log_start_is_data_loss_unless_failondataloss_is_false() -> None:
    """Retention deleting records while a task reads them makes the client jump to the new log
    start: with failOnDataLoss (the default) the task fails, as Spark's Kafka source does; a gap
    that the log start does not explain (compaction) is no loss."""
    import pytest

    from pulsar_txn.errors import DataLossError
    from spark._plan import RangePartition
    from spark._read import _check_gap

    class Marks:
        def __init__(self, low: int) -> None:
            self.low = low

        def watermarks(self, _topic: str, _partition: int) -> tuple[int, int]:
            return self.low, 100

    def part(**options: str) -> RangePartition:
        opts = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **options}, streaming=False)
        return RangePartition(opts, "t", 0, 10, 100, [], [])

    _check_gap(Marks(0), part(), 20, 30)  # type: ignore[arg-type]  # compaction: nothing deleted
    with pytest.raises(DataLossError, match=r"20\.\.49"):
        _check_gap(Marks(50), part(), 20, 50)  # type: ignore[arg-type]
    _check_gap(Marks(50), part(failOnDataLoss="false"), 20, 50)  # type: ignore[arg-type]
