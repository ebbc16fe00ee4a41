"""The pure fold of one TC's log partition: state at offset X = f(records below X).

Fencing rule (see docs/storage-format.md): a claim's own offset is the epoch it starts. Reading in
offset order, the current epoch is the offset of the latest claim seen. A TxnMeta or SeqHighWater
record whose epoch is below the current epoch was written by a deposed owner after it lost the TC:
it is *stale* and ignored (its key is remembered so the owner can tombstone it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TypeVar

from kafka_store import REGISTRY, CodecError, KafkaConfig, read_range
from kafka_store.lograte import THROTTLE
from pulsar_txn.coordinator._log_mac import Headers, log_record_valid
from pulsar_txn.coordinator.records import CLAIM, SEQ_HIGH_WATER, TXN_META, TxnMeta
from pulsar_txn.coordinator.status import reachable
from pulsar_txn.txnid import TxnAction, TxnID

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass
class ClaimInfo:
    epoch: int
    owner_id: str
    owner_url: str
    claimed_at_ms: int


@dataclass
class TcLogFold:
    """With ``secret`` (the marker secret), records without a valid MAC for ``topic`` (the log
    topic) are skipped: see ``_log_mac``."""

    tc_id: int
    topic: str = ""
    secret: bytes | None = field(default=None, repr=False)
    epoch: int = -1
    claim: ClaimInfo | None = None
    txns: dict[int, TxnMeta] = field(default_factory=dict)
    keys_by_seq: dict[int, set[bytes]] = field(default_factory=dict)
    stale_keys: set[bytes] = field(default_factory=set)
    next_seq: int = 0
    skipped_records: int = 0
    # Records skipped for failing authentication: with them, sequences this fold cannot see may have
    # been handed out (an older build's unsigned log, or one written before the secret was set).
    unauthenticated_records: int = 0
    last_offset: int = -1
    # Values of the claims folded: a claim is written once, so a second record with the same value
    # is a copy (a signed claim re-sent by anyone able to write the log would fence the owner).
    claims_seen: set[bytes] = field(default_factory=set, repr=False)

    def apply(
        self, offset: int, key: bytes | None, value: bytes | None, headers: Headers | None = None
    ) -> ClaimInfo | None:
        """Fold one record in. Returns the claim if the record was one (callers detect deposition)."""
        self.last_offset = max(self.last_offset, offset)
        if key is None:
            self._skip(offset, "record without key")
            return None
        if not log_record_valid(self.secret, self.topic, self.tc_id, key, value, headers):
            self.unauthenticated_records += 1
            self._skip(offset, "record failed authentication (forged, or written without the secret)")
            return None
        if value is None:
            self._tombstone(key)
            return None
        try:
            kind, _version, fields = REGISTRY.decode(value)
        except CodecError as exc:
            self._skip(offset, str(exc))
            return None
        # Every field is read before anything changes: a well-formed record with impossible
        # contents (a forged one, a bug's) is skipped and counted, never half applied.
        try:
            if int(fields.get("tc_id", -1)) != self.tc_id:
                where = f"in the log partition of TC {self.tc_id}"
                self._skip(offset, f"record for TC {fields.get('tc_id')} {where}")
                return None
            if kind is CLAIM:
                claimed_at = int(fields["claimed_at_ms"])
                info = ClaimInfo(offset, fields["owner_id"], fields["owner_url"], claimed_at)
                if value in self.claims_seen:
                    self._skip(offset, f"a copy of an earlier claim of {info.owner_id!r:.80}")
                    return None
                self.claims_seen.add(value)
                if offset > self.epoch:
                    self.epoch = offset
                    self.claim = info
                return info
            if kind is not TXN_META and kind is not SEQ_HIGH_WATER:
                self._skip(offset, f"unexpected {kind.name} record in a transaction log")
                return None
            epoch = int(fields["epoch"])
            meta = TxnMeta.from_fields(fields) if kind is TXN_META else None
            next_seq = meta.txn_id.least_bits + 1 if meta is not None else int(fields["next_seq"])
        except (KeyError, TypeError, ValueError) as exc:  # ValueError: InvalidTxnID too
            self._skip(offset, f"malformed {kind.name} record: {type(exc).__name__}: {exc}")
            return None
        if epoch > offset or next_seq < 0:
            # An epoch is the offset of the claim that started it, so always below the record's own.
            self._skip(offset, f"impossible {kind.name} record (epoch {epoch}, next sequence {next_seq})")
            return None
        if epoch < self.epoch:
            self.stale_keys.add(key)
            # Its state is ignored, but the sequence it used is not handed out again: never a
            # second transaction under a TxnID a deposed owner may have written data for.
            self.next_seq = max(self.next_seq, next_seq)
            return None
        if meta is not None:
            known = self.txns.get(meta.txn_id.least_bits)
            if known is not None and not reachable(known.status, meta.status):
                # A decided outcome never changes, nor does an ended transaction open again: a
                # record that says so (forged, or a bug's) must not flip what readers were told.
                self._skip(
                    offset, f"{meta.txn_id} cannot go from {known.status.value} to {meta.status.value}"
                )
                return None
            if known is not None:
                _keep_known(meta, known)
        self.epoch = epoch  # a record newer than any claim seen: its claim was lost, trust its epoch
        if meta is not None:
            seq = meta.txn_id.least_bits
            self.txns[seq] = meta
            self.keys_by_seq.setdefault(seq, set()).add(key)
        self.next_seq = max(self.next_seq, next_seq)
        return None

    def _tombstone(self, key: bytes) -> None:
        self.stale_keys.discard(key)
        text = key.decode("utf-8", "replace")
        if not text.startswith("txn/"):
            return
        try:
            seq = int(text.split("/")[2].split("@")[0])
        except (IndexError, ValueError):
            return
        keys = self.keys_by_seq.get(seq)
        if keys is None:
            return
        keys.discard(key)
        if not keys:
            del self.keys_by_seq[seq]
            self.txns.pop(seq, None)

    def _skip(self, offset: int, why: str) -> None:
        self.skipped_records += 1
        THROTTLE.warning(
            log, ("tc-log", self.tc_id), "TC %d log offset %d skipped: %s", self.tc_id, offset, why
        )


def _keep_known(meta: TxnMeta, known: TxnMeta) -> None:
    """A transaction's partitions and subscriptions only ever grow: a record naming fewer than an
    earlier one is taken with the earlier ones kept. Copied into the log again (signing does not stop
    copies), the transaction's first OPEN record named none, and a new owner committed it with no
    markers: its data was held back or discarded as aborted (session 39's review). A partition
    kept so is at worst one that a write reported failed but stored: its marker changes nothing."""
    _add_missing(meta.partitions, known.partitions)
    _add_missing(meta.subscriptions, known.subscriptions)


def _add_missing(items: list[T], known: list[T]) -> None:
    if known and known != items:
        have = set(items)
        items.extend(x for x in known if x not in have)


def read_tc_log(kafka: KafkaConfig, log_topic: str, tc_id: int, secret: bytes | None = None) -> TcLogFold:
    """TC ``tc_id``'s state now, folded from its whole log partition (for occasional lookups by
    components that do not own the TC; raises ``kafka_store.StoreError``). With ``secret`` (the
    marker secret), only authenticated records count."""
    fold = TcLogFold(tc_id, log_topic, secret)
    for rec in read_range(kafka, log_topic, tc_id):
        fold.apply(rec.offset, rec.key, rec.value, rec.headers)
    return fold


def ended_as(fold: TcLogFold, txn: TxnID, *, decided: bool = False) -> TxnAction | None:
    """How the TC ended ``txn``: COMMIT, ABORT (also for one it has forgotten since: it ended long
    ago), or None while it is open or ending, or if the TC has not allocated its id yet. With
    ``decided``, an ending one counts by its decision (COMMITTING leads only to COMMITTED)."""
    meta = fold.txns.get(txn.least_bits)
    if meta is None:
        return TxnAction.ABORT if txn.least_bits < fold.next_seq else None
    if decided and meta.status.is_ending:
        return TxnAction.COMMIT if meta.status.value == "COMMITTING" else TxnAction.ABORT
    if not meta.status.is_terminal:
        return None
    return TxnAction.COMMIT if meta.status.value == "COMMITTED" else TxnAction.ABORT
