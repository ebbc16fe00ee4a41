"""The transaction-log fold is a pure function of the records: replay and fencing rules."""

from pulsar_txn.coordinator.fold import TcLogFold
from pulsar_txn.coordinator.records import (
    TxnMeta,
    claim_key,
    encode_claim,
    encode_seq_high_water,
    seq_key,
    txn_key,
)
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.txnid import TxnID


def _meta(seq: int, status: TxnStatus = TxnStatus.OPEN, tc: int = 0) -> TxnMeta:
    return TxnMeta(TxnID(tc, seq), status, 1000, 0, 1000, 0)


class Log:
    def __init__(self) -> None:
        self.records: list[tuple[int, bytes | None, bytes | None]] = []

    def claim(self, owner: str) -> int:
        self.records.append((len(self.records), claim_key(0, owner), encode_claim(0, owner, "u", 0)))
        return len(self.records) - 1

    def txn(self, meta: TxnMeta, epoch: int) -> None:
        self.records.append((len(self.records), txn_key(meta.txn_id, epoch), meta.encode(epoch)))

    def raw(self, key: bytes | None, value: bytes | None) -> None:
        self.records.append((len(self.records), key, value))

    def fold(self, records: list[tuple[int, bytes | None, bytes | None]] | None = None) -> TcLogFold:
        f = TcLogFold(0)
        for off, key, value in self.records if records is None else records:
            f.apply(off, key, value)
        return f


def test_latest_record_per_txn_wins_and_next_seq_follows() -> None:
    log = Log()
    e = log.claim("a")
    log.txn(_meta(0), e)
    log.txn(_meta(1), e)
    log.txn(_meta(0, TxnStatus.COMMITTING), e)
    f = log.fold()
    assert f.epoch == e
    assert f.txns[0].status is TxnStatus.COMMITTING
    assert f.next_seq == 2


def test_write_of_a_deposed_owner_after_the_new_claim_is_stale_and_ignored() -> None:
    log = Log()
    e1 = log.claim("a")
    log.txn(_meta(0), e1)
    e2 = log.claim("b")
    log.txn(_meta(0, TxnStatus.COMMITTING), e1)  # zombie "a" decides after losing the TC
    f = log.fold()
    assert f.epoch == e2
    assert f.txns[0].status is TxnStatus.OPEN
    assert txn_key(TxnID(0, 0), e1) in f.keys_by_seq[0]
    assert len(f.stale_keys) == 1


def test_writes_before_the_new_claim_stay_valid() -> None:
    log = Log()
    e1 = log.claim("a")
    log.txn(_meta(0, TxnStatus.COMMITTING), e1)
    log.claim("b")
    assert log.fold().txns[0].status is TxnStatus.COMMITTING


def test_compaction_keeps_the_verdict_held_under_the_new_owners_key() -> None:
    log = Log()
    e1 = log.claim("a")
    log.txn(_meta(0), e1)
    e2 = log.claim("b")
    log.txn(_meta(0, TxnStatus.ABORTING), e2)
    log.txn(_meta(0, TxnStatus.COMMITTING), e1)  # stale
    # Compaction keeps the last record per key. The stale write shares its key with a's valid
    # record and shadows it, so the state must live under b's key too: a new owner rewrites every
    # unfinished transaction under its own epoch when it takes over (TransactionCoordinator._adopt).
    latest: dict[bytes | None, tuple[int, bytes | None, bytes | None]] = {}
    for rec in log.records:
        latest[rec[1]] = rec
    compacted = sorted(latest.values())
    assert log.fold(compacted).txns[0].status is TxnStatus.ABORTING
    assert log.fold().txns[0].status is TxnStatus.ABORTING


def test_tombstones_forget_finished_txns_and_seq_high_water_keeps_sequences_increasing() -> None:
    log = Log()
    e = log.claim("a")
    log.txn(_meta(0, TxnStatus.COMMITTED), e)
    log.raw(seq_key(0, e), encode_seq_high_water(0, e, 1))
    log.raw(txn_key(TxnID(0, 0), e), None)
    full = log.fold()
    assert full.txns == {}
    assert full.next_seq == 1
    # After compaction removes the txn entirely the high-water still says 1.
    compacted = [r for r in log.records if r[1] is not None and not r[1].startswith(b"txn/")]
    assert log.fold(compacted).next_seq == 1


def test_garbage_and_misrouted_records_are_skipped_and_counted() -> None:
    log = Log()
    e = log.claim("a")
    log.raw(b"txn/0/5@0", b"garbage")
    log.raw(None, b"no key")
    log.txn(_meta(3, tc=1), e)  # a record of TC 1 in TC 0's partition
    log.txn(_meta(4), e)
    f = log.fold()
    assert f.skipped_records == 3
    assert set(f.txns) == {4}


def test_state_at_offset_x_is_a_function_of_records_below_x() -> None:
    log = Log()
    e = log.claim("a")
    for i in range(5):
        log.txn(_meta(i), e)
    log.txn(_meta(2, TxnStatus.ABORTING), e)
    one = log.fold(log.records[:4])
    two = log.fold(log.records[:4])
    assert one.txns == two.txns
    assert set(one.txns) == {0, 1, 2}


def test_a_stale_write_still_moves_next_seq_so_its_txn_id_is_never_handed_out_again() -> None:
    log = Log()
    e1 = log.claim("a")
    log.txn(_meta(0), e1)
    log.claim("b")
    log.txn(_meta(1), e1)  # zombie "a" allocated seq 1 after losing the TC
    log.raw(seq_key(0, e1), encode_seq_high_water(0, e1, 5))  # and wrote a high-water (stale too)
    f = log.fold()
    assert sorted(f.txns) == [0] and len(f.stale_keys) == 2
    assert f.next_seq == 5
