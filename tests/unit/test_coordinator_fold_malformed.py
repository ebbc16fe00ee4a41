"""Coordinator log fold: malformed / unexpected records must be skipped and counted, not crash the
fold and not change its state."""

from pulsar_txn.coordinator.fold import TcLogFold
from pulsar_txn.coordinator.records import TXN_META, TxnMeta, claim_key, encode_claim, txn_key
from pulsar_txn.coordinator.service import OWNER
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.txnid import TxnID


def _meta(seq: int) -> TxnMeta:
    return TxnMeta(TxnID(0, seq), TxnStatus.OPEN, 1000, 0, 1000, 0)


def test_well_formed_txnmeta_with_negative_seq_is_skipped_not_a_crash() -> None:
    f = TcLogFold(0)
    f.apply(0, claim_key(0, "a"), encode_claim(0, "a", "u", 0))
    fields = _meta(1).to_fields(0)
    fields["seq"] = -1  # well-formed Avro, impossible content
    bad = TXN_META.encode(fields)
    f.apply(1, b"txn/0/-1@0", bad)  # raises InvalidTxnID today
    f.apply(2, txn_key(TxnID(0, 2), 0), _meta(2).encode(0))
    assert f.skipped_records == 1
    assert set(f.txns) == {2}


def test_unexpected_record_kind_does_not_move_the_epoch() -> None:
    f = TcLogFold(0)
    f.apply(0, claim_key(0, "a"), encode_claim(0, "a", "u", 0))
    # A TcOwner record (owner directory kind) misrouted into TC 0's log partition: "skipped".
    owner = OWNER.encode({"tc_id": 0, "epoch": 10**9, "owner_id": "x", "owner_url": "u"})
    f.apply(1, b"0", owner)
    f.apply(2, txn_key(TxnID(0, 5), 0), _meta(5).encode(0))  # a valid write of the owner at epoch 0
    assert f.skipped_records == 1
    assert f.epoch == 0
    assert 5 in f.txns  # today: treated as stale (epoch moved to 10**9), the open txn is lost


def test_after_an_unexpected_record_a_new_claim_still_takes_the_tc() -> None:
    # Recovery checks fold.epoch == its own claim offset (TransactionCoordinator._check_claim_held).
    f = TcLogFold(0)
    f.apply(0, claim_key(0, "a"), encode_claim(0, "a", "u", 0))
    owner = OWNER.encode({"tc_id": 0, "epoch": 10**9, "owner_id": "x", "owner_url": "u"})
    f.apply(1, b"0", owner)
    f.apply(2, claim_key(0, "b"), encode_claim(0, "b", "u", 0))
    assert f.epoch == 2  # today 10**9: every later recovery is "superseded" -> fenced forever


def test_txnmeta_whose_epoch_is_beyond_its_own_offset_is_impossible_and_skipped() -> None:
    f = TcLogFold(0)
    f.apply(0, claim_key(0, "a"), encode_claim(0, "a", "u", 0))
    f.apply(1, txn_key(TxnID(0, 1), 10**9), _meta(1).encode(10**9))  # epoch = a claim offset not yet written
    f.apply(2, txn_key(TxnID(0, 2), 0), _meta(2).encode(0))
    assert 2 in f.txns


def _with_status(seq: int, status: TxnStatus) -> TxnMeta:
    meta = _meta(seq)
    meta.status = status
    return meta


def test_a_record_that_would_change_a_decided_outcome_is_skipped() -> None:
    """COMMITTING then ABORTING, or ABORTED then COMMITTING: a decided outcome never changes (review,
    session 33: the fold took any record of the current epoch, so one forged or buggy record made a
    recovered TC commit a transaction whose partitions held ABORT markers)."""
    f = TcLogFold(0)
    f.apply(0, claim_key(0, "a"), encode_claim(0, "a", "u", 0))
    key = txn_key(TxnID(0, 1), 0)
    f.apply(1, key, _with_status(1, TxnStatus.OPEN).encode(0))
    f.apply(2, key, _with_status(1, TxnStatus.COMMITTING).encode(0))
    f.apply(3, key, _with_status(1, TxnStatus.ABORTING).encode(0))
    assert f.txns[1].status is TxnStatus.COMMITTING and f.skipped_records == 1
    f.apply(4, key, _with_status(1, TxnStatus.COMMITTED).encode(0))
    f.apply(5, key, _with_status(1, TxnStatus.OPEN).encode(0))
    assert f.txns[1].status is TxnStatus.COMMITTED and f.skipped_records == 2
    other = txn_key(TxnID(0, 2), 0)
    f.apply(6, other, _with_status(2, TxnStatus.ABORTED).encode(0))
    f.apply(7, other, _with_status(2, TxnStatus.COMMITTING).encode(0))
    assert f.txns[2].status is TxnStatus.ABORTED and f.skipped_records == 3


def test_compaction_may_leave_open_followed_by_an_end_and_that_is_taken() -> None:
    """One record per key survives compaction, and a key is per owner epoch: OPEN (epoch 0) then
    COMMITTED (epoch 3, its COMMITTING compacted away) is a real log."""
    f = TcLogFold(0)
    f.apply(0, claim_key(0, "a"), encode_claim(0, "a", "u", 0))
    f.apply(1, txn_key(TxnID(0, 1), 0), _with_status(1, TxnStatus.OPEN).encode(0))
    f.apply(3, claim_key(0, "b"), encode_claim(0, "b", "u", 0))
    f.apply(5, txn_key(TxnID(0, 1), 3), _with_status(1, TxnStatus.COMMITTED).encode(3))
    f.apply(6, txn_key(TxnID(0, 1), 3), _with_status(1, TxnStatus.COMMITTED).encode(3))
    assert f.txns[1].status is TxnStatus.COMMITTED and f.skipped_records == 0
