"""With a marker secret, a transaction opens in a partition only on a signed message
(``ptxn.txn.mac``): a plain producer cannot pin ``max_read_position`` with a message of a TxnID its
TC never allocated (before, that held the partition's readers back for good). With
``unsigned_txn_history`` (clusters whose producers before session 38 did not sign), unsigned openings
before the partition's first signed one still open their transactions."""

from __future__ import annotations

import pytest

from pulsar_txn.buffer.marker import TXN_HEADER, TXN_MAC_HEADER, TxnMarker, marker_record, txn_message_mac
from pulsar_txn.buffer.state import UNSIGNED_TXN_HISTORY_ENV, Headers, TxnBufferState
from pulsar_txn.txnid import TxnAction, TxnID

SECRET = b"correct horse battery staple"
PLAIN: Headers = [("pulsar.seq", b"1")]


def _msg(txn: TxnID, mac: bytes | None = None) -> Headers:
    headers: Headers = [("pulsar.seq", b"1"), (TXN_HEADER, txn.to_bytes())]
    if mac is not None:
        headers.append((TXN_MAC_HEADER, mac))
    return headers


def _signed(txn: TxnID, topic: str = "t", partition: int = 0) -> Headers:
    return _msg(txn, txn_message_mac(SECRET, txn.to_bytes(), topic, partition))


ARMING = TxnID(3, 1)  # a signed transaction that arms the check


def _state() -> TxnBufferState:
    """A partition whose first transaction (offset 0, still open) was opened by a signed message."""
    state = TxnBufferState("t", 0, num_tcs=4, marker_secret=SECRET)
    assert state.apply(0, _signed(ARMING), b"armed") == ARMING
    assert state.txn_auth_from == 0
    value, headers = marker_record(TxnMarker(ARMING, TxnAction.COMMIT, -1, 0), "t", 0, SECRET)
    assert state.apply(1, headers, value) is False
    return state


def test_an_unsigned_message_of_an_unknown_txn_neither_pins_nor_is_delivered() -> None:
    state = _state()
    forged = TxnID(0, 10**12)  # never allocated: no marker would ever end it
    assert state.apply(2, _msg(forged), b"forged") is False
    assert state.apply(3, PLAIN, b"plain") is True
    assert state.ongoing == {} and state.max_read_position == 4
    assert not state.is_visible(2, _msg(forged))  # a gap reader's re-read skips it too
    assert state.counters.forged_txn_messages == 1


def test_a_mac_made_for_another_partition_or_with_another_secret_does_not_open_a_txn() -> None:
    state = _state()
    txn = TxnID(1, 3)
    other_partition = txn_message_mac(SECRET, txn.to_bytes(), "t", 1)
    other_secret = txn_message_mac(b"guess", txn.to_bytes(), "t", 0)
    other_txn = txn_message_mac(SECRET, TxnID(1, 4).to_bytes(), "t", 0)
    for offset, mac in enumerate((other_partition, other_secret, other_txn, b""), start=2):
        assert state.apply(offset, _msg(txn, mac), b"x") is False
    # Two copies of the header are refused, even if one is right.
    doubled = [*_signed(txn), (TXN_MAC_HEADER, b"\0" * 32)]
    assert state.apply(6, doubled, b"x") is False
    assert state.ongoing == {} and state.counters.forged_txn_messages == 5


def test_a_signed_message_opens_the_txn_and_later_ones_of_it_need_no_mac() -> None:
    state = _state()
    txn = TxnID(2, 8)
    assert state.apply(2, _signed(txn), b"a") == txn
    assert state.apply(3, _msg(txn), b"b") == txn  # the transaction is open here: its own message
    assert state.max_read_position == 2
    value, headers = marker_record(TxnMarker(txn, TxnAction.COMMIT, -1, 0), "t", 0, SECRET)
    assert state.apply(4, headers, value) is False
    assert state.ongoing == {} and state.is_visible(2, _signed(txn)) and state.is_visible(3, _msg(txn))
    assert state.counters.forged_txn_messages == 0


def test_apply_batch_checks_the_opening_message_like_apply() -> None:
    from kafka_store import StoredRecord

    txn, forged = TxnID(0, 1), TxnID(0, 2)
    rows = [_signed(txn), _msg(forged), _msg(txn), PLAIN]
    records = [StoredRecord("t", 0, i, None, b"v", tuple(h), 0) for i, h in enumerate(rows, start=2)]
    one, batch = _state(), _state()
    assert [one.apply(i, h, b"v") for i, h in enumerate(rows, start=2)] == batch.apply_batch(records)
    assert batch.ongoing == {txn: 2} and batch.counters.forged_txn_messages == 1


def test_a_forged_opening_at_the_partition_start_is_skipped() -> None:
    """Jepsen seed 3902 (session 39): a forger wrote an unsigned opening of a TxnID no TC allocates
    before the partition's first signed one. Armed by that first signed opening, the check came too
    late, and the forged transaction held every reader of the partition at offset 5 for good."""
    state = TxnBufferState("t", 0, num_tcs=4, marker_secret=SECRET)
    assert state.txn_auth_from == 0
    forged = TxnID(0, 1 << 40)
    assert state.apply(0, _msg(forged), b"forged") is False
    txn = TxnID(0, 1)
    assert state.apply(1, _signed(txn), b"real") == txn
    value, headers = marker_record(TxnMarker(txn, TxnAction.COMMIT, -1, 0), "t", 0, SECRET)
    assert state.apply(2, headers, value) is False
    assert state.ongoing == {} and state.max_read_position == 3
    assert state.counters.forged_txn_messages == 1


def test_the_environment_asks_for_unsigned_history(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UNSIGNED_TXN_HISTORY_ENV, "1")
    assert TxnBufferState("t", 0, marker_secret=SECRET).txn_auth_from is None
    monkeypatch.setenv(UNSIGNED_TXN_HISTORY_ENV, "0")
    assert TxnBufferState("t", 0, marker_secret=SECRET).txn_auth_from == 0


def test_unsigned_openings_before_the_first_signed_one_still_open_their_txns() -> None:
    """With ``unsigned_txn_history``: history written by producers before session 38 (no
    ``ptxn.txn.mac``) stays readable."""
    state = TxnBufferState("t", 0, num_tcs=4, marker_secret=SECRET, unsigned_txn_history=True)
    old = TxnID(0, 1)
    assert state.apply(0, _msg(old), b"old") == old and state.txn_auth_from is None
    value, headers = marker_record(TxnMarker(old, TxnAction.COMMIT, -1, 0), "t", 0, SECRET)
    assert state.apply(1, headers, value) is False
    assert state.is_visible(0, _msg(old))
    new = TxnID(0, 2)
    assert state.apply(2, _signed(new), b"new") == new and state.txn_auth_from == 2
    assert state.apply(3, _msg(TxnID(0, 3)), b"unsigned after") is False
    assert state.counters.forged_txn_messages == 1 and list(state.ongoing) == [new]


def test_without_a_secret_any_message_opens_its_txn() -> None:
    state = TxnBufferState("t", 0, num_tcs=4)
    txn = TxnID(0, 10**12)
    assert state.apply(0, _msg(txn), b"x") == txn
    assert state.max_read_position == 0
