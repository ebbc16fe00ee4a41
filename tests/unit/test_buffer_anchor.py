"""A TB state's anchor: what a snapshot carries so that a load can tell its partition from another
incarnation of it (a topic deleted and created again under its name)."""

from pulsar_txn.buffer.marker import TXN_HEADER
from pulsar_txn.buffer.state import TxnBufferState, record_fingerprint
from pulsar_txn.txnid import TxnID


def test_anchor_is_the_last_record_folded_in() -> None:
    state = TxnBufferState("t", 0)
    assert state.anchor() == (-1, 0)
    state.apply(0, None, b"a")
    state.apply(1, [(TXN_HEADER, TxnID(0, 1).to_bytes())], b"b")
    state.apply(1, None, b"ignored: already folded")
    assert state.anchor() == (1, record_fingerprint([(TXN_HEADER, TxnID(0, 1).to_bytes())], b"b"))


def test_a_loaded_anchor_holds_until_a_newer_record_is_folded_in() -> None:
    state = TxnBufferState("t", 0, scanned_to=10)
    state.set_anchor(9, 1234)
    assert state.anchor() == (9, 1234)
    state.apply(10, None, b"x")
    assert state.anchor() == (10, record_fingerprint(None, b"x"))


def test_fingerprint_tells_value_and_headers_apart() -> None:
    base = record_fingerprint([("h", b"1")], b"v")
    assert base == record_fingerprint((("h", b"1"),), b"v")
    assert base != record_fingerprint([("h", b"2")], b"v")
    assert base != record_fingerprint([("h", b"1")], b"w")
    assert record_fingerprint(None, None) == record_fingerprint([], b"")
