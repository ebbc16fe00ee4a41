"""The coordinator log fold with a marker secret: only records carrying a valid MAC for this log
topic and partition count; without a secret every record does (as before)."""

from __future__ import annotations

from pulsar_txn.coordinator._log_mac import LOG_MAC_HEADER, log_headers, log_record_valid
from pulsar_txn.coordinator.fold import TcLogFold, ended_as
from pulsar_txn.coordinator.records import TxnMeta, claim_key, encode_claim, txn_key
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.txnid import TxnAction, TxnID

SECRET = b"s3cret"
TOPIC = "__log"


def _meta(seq: int, status: TxnStatus = TxnStatus.OPEN) -> TxnMeta:
    return TxnMeta(TxnID(0, seq), status, 1000, 0, 1000, 0)


def _signed(fold: TcLogFold, offset: int, key: bytes, value: bytes | None) -> None:
    fold.apply(offset, key, value, log_headers(SECRET, TOPIC, 0, key, value))


def _owned_fold() -> TcLogFold:
    fold = TcLogFold(0, TOPIC, SECRET)
    _signed(fold, 0, claim_key(0, "a"), encode_claim(0, "a", "u", 0))
    _signed(fold, 1, txn_key(TxnID(0, 1), 0), _meta(1).encode(0))
    return fold


def test_signed_records_fold_as_without_a_secret() -> None:
    fold = _owned_fold()
    assert fold.epoch == 0 and fold.txns[1].status is TxnStatus.OPEN and fold.skipped_records == 0


def test_an_unsigned_decision_is_skipped_and_the_transaction_stays_open() -> None:
    fold = _owned_fold()
    fold.apply(2, txn_key(TxnID(0, 1), 0), _meta(1, TxnStatus.COMMITTED).encode(0))
    assert fold.txns[1].status is TxnStatus.OPEN
    assert ended_as(fold, TxnID(0, 1)) is None
    assert fold.skipped_records == 1


def test_an_unsigned_claim_does_not_move_the_epoch() -> None:
    fold = _owned_fold()
    assert fold.apply(2, claim_key(0, "forger"), encode_claim(0, "forger", "u", 0)) is None
    assert fold.epoch == 0 and fold.claim is not None and fold.claim.owner_id == "a"


def test_an_unsigned_tombstone_does_not_make_an_open_transaction_forgotten() -> None:
    """A forgotten transaction (below next_seq, not in the log) counts as aborted."""
    fold = _owned_fold()
    fold.apply(2, txn_key(TxnID(0, 1), 0), None)
    assert 1 in fold.txns
    _signed(fold, 3, txn_key(TxnID(0, 1), 0), None)
    assert 1 not in fold.txns and ended_as(fold, TxnID(0, 1)) is TxnAction.ABORT


def test_a_mac_for_another_partition_topic_or_secret_does_not_count() -> None:
    key, value = txn_key(TxnID(0, 2), 0), _meta(2).encode(0)
    for headers in (
        log_headers(SECRET, TOPIC, 1, key, value),
        log_headers(SECRET, "__other_log", 0, key, value),
        log_headers(b"guess", TOPIC, 0, key, value),
        log_headers(SECRET, TOPIC, 0, key, None),  # a tombstone's MAC on a record with a value
        [(LOG_MAC_HEADER, b"")],
        (log_headers(SECRET, TOPIC, 0, key, value) or []) * 2,  # twice: ambiguous, refused
    ):
        assert not log_record_valid(SECRET, TOPIC, 0, key, value, headers)
    assert log_record_valid(SECRET, TOPIC, 0, key, value, log_headers(SECRET, TOPIC, 0, key, value))


def test_without_a_secret_unsigned_records_count() -> None:
    fold = TcLogFold(0, TOPIC)
    fold.apply(0, claim_key(0, "a"), encode_claim(0, "a", "u", 0))
    fold.apply(1, txn_key(TxnID(0, 1), 0), _meta(1, TxnStatus.COMMITTED).encode(0))
    assert ended_as(fold, TxnID(0, 1)) is TxnAction.COMMIT
    assert log_headers(None, TOPIC, 0, b"k", b"v") is None


def test_a_copy_of_an_earlier_open_record_does_not_take_partitions_or_subscriptions_away() -> None:
    """Signing does not stop copies: the transaction's first OPEN record (no partitions), written to
    the log again after its ADD_PARTITION records, made a new owner commit it with no markers, so its
    committed data was held back or discarded as aborted (session 39's review)."""
    fold = _owned_fold()
    txn = TxnID(0, 1)
    key = txn_key(txn, 0)
    first = _meta(1).encode(0)
    grown = TxnMeta(txn, TxnStatus.OPEN, 1000, 0, 1000, 5, ["a-partition-0", "b"], [("a", "sub")])
    _signed(fold, 2, key, grown.encode(0))
    _signed(fold, 3, key, first)  # the copy, byte for byte, signature included
    assert fold.txns[1].partitions == ["a-partition-0", "b"]
    assert fold.txns[1].subscriptions == [("a", "sub")]
    committing = TxnMeta(txn, TxnStatus.COMMITTING, 1000, 0, 1000, 9, ["b", "c"])
    _signed(fold, 4, key, committing.encode(0))
    assert fold.txns[1].status is TxnStatus.COMMITTING
    assert sorted(fold.txns[1].partitions) == ["a-partition-0", "b", "c"]
