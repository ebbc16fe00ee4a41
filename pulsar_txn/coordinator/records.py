"""Transaction-log records: versioned Avro schemas and the value objects they carry.

Every record in the log partition of TC ``n`` is keyed so that compaction keeps what recovery needs:

* ``txn/<tc>/<seq>@<epoch>``  -> TxnMeta, the full state of one transaction as written under one epoch
* ``claim/<tc>/<owner_id>``   -> Claim, an ownership claim; its own offset is the new epoch
* ``seq/<tc>@<epoch>``        -> SeqHighWater, the next sequence to allocate (written before tombstones)

Keys carry the epoch so a deposed owner's late write can never shadow a valid record under compaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kafka_store import REGISTRY, RecordKind
from pulsar_txn.coordinator._meta_codec import TXN_META_CODE, TXN_META_V1, encode_txn_meta_v1
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.txnid import TxnID

_STATUS_SYMBOLS = [s.value for s in TxnStatus]
_STATUS_INDEX = {symbol: index for index, symbol in enumerate(_STATUS_SYMBOLS)}

TXN_META = REGISTRY.register(
    RecordKind(
        "TxnMeta",
        code=TXN_META_CODE,
        schemas={
            1: {
                "type": "record",
                "name": "TxnMetaV1",
                "namespace": "pulsar_txn.log",
                "fields": [
                    {"name": "tc_id", "type": "long"},
                    {"name": "seq", "type": "long"},
                    {"name": "epoch", "type": "long"},
                    {
                        "name": "status",
                        "type": {"type": "enum", "name": "TxnStatusV1", "symbols": _STATUS_SYMBOLS},
                    },
                    {"name": "partitions", "type": {"type": "array", "items": "string"}},
                    {
                        "name": "subscriptions",
                        "type": {
                            "type": "array",
                            "items": {
                                "type": "record",
                                "name": "SubscriptionV1",
                                "fields": [
                                    {"name": "topic", "type": "string"},
                                    {"name": "subscription", "type": "string"},
                                ],
                            },
                        },
                    },
                    {"name": "timeout_ms", "type": "long"},
                    {"name": "opened_at_ms", "type": "long"},
                    {"name": "deadline_ms", "type": "long"},
                    {"name": "updated_at_ms", "type": "long"},
                    {"name": "ended_at_ms", "type": "long"},
                    {"name": "timed_out", "type": "boolean"},
                ],
            }
        },
    )
)

if TXN_META.latest != TXN_META_V1:  # a new schema version needs its own direct encoder
    raise RuntimeError(f"TxnMeta v{TXN_META.latest} has no direct encoder in _meta_codec")

CLAIM = REGISTRY.register(
    RecordKind(
        "Claim",
        code=2,
        schemas={
            1: {
                "type": "record",
                "name": "ClaimV1",
                "namespace": "pulsar_txn.log",
                "fields": [
                    {"name": "tc_id", "type": "long"},
                    {"name": "owner_id", "type": "string"},
                    {"name": "owner_url", "type": "string"},
                    {"name": "claimed_at_ms", "type": "long"},
                ],
            }
        },
    )
)

SEQ_HIGH_WATER = REGISTRY.register(
    RecordKind(
        "SeqHighWater",
        code=3,
        schemas={
            1: {
                "type": "record",
                "name": "SeqHighWaterV1",
                "namespace": "pulsar_txn.log",
                "fields": [
                    {"name": "tc_id", "type": "long"},
                    {"name": "epoch", "type": "long"},
                    {"name": "next_seq", "type": "long"},
                ],
            }
        },
    )
)


@dataclass(slots=True)
class TxnMeta:
    """Everything the coordinator knows about one transaction."""

    txn_id: TxnID
    status: TxnStatus
    timeout_ms: int
    opened_at_ms: int
    deadline_ms: int
    updated_at_ms: int
    partitions: list[str] = field(default_factory=list)
    subscriptions: list[tuple[str, str]] = field(default_factory=list)
    ended_at_ms: int = 0
    timed_out: bool = False

    def to_fields(self, epoch: int) -> dict[str, Any]:
        return {
            "tc_id": self.txn_id.most_bits,
            "seq": self.txn_id.least_bits,
            "epoch": epoch,
            "status": self.status.value,
            "partitions": list(self.partitions),
            "subscriptions": [{"topic": t, "subscription": s} for t, s in self.subscriptions],
            "timeout_ms": self.timeout_ms,
            "opened_at_ms": self.opened_at_ms,
            "deadline_ms": self.deadline_ms,
            "updated_at_ms": self.updated_at_ms,
            "ended_at_ms": self.ended_at_ms,
            "timed_out": self.timed_out,
        }

    @classmethod
    def from_fields(cls, f: dict[str, Any]) -> TxnMeta:
        return cls(
            txn_id=TxnID(int(f["tc_id"]), int(f["seq"])),
            status=TxnStatus(f["status"]),
            timeout_ms=int(f["timeout_ms"]),
            opened_at_ms=int(f["opened_at_ms"]),
            deadline_ms=int(f["deadline_ms"]),
            updated_at_ms=int(f["updated_at_ms"]),
            partitions=list(f["partitions"]),
            subscriptions=[(s["topic"], s["subscription"]) for s in f["subscriptions"]],
            ended_at_ms=int(f["ended_at_ms"]),
            timed_out=bool(f["timed_out"]),
        )

    def encode(self, epoch: int) -> bytes:
        """TXN_META at its latest version (v1), without going through fastavro (see _meta_codec)."""
        return encode_txn_meta_v1(self, epoch, _STATUS_INDEX)

    def copy(self) -> TxnMeta:
        return TxnMeta(
            self.txn_id,
            self.status,
            self.timeout_ms,
            self.opened_at_ms,
            self.deadline_ms,
            self.updated_at_ms,
            list(self.partitions),
            list(self.subscriptions),
            self.ended_at_ms,
            self.timed_out,
        )


def txn_key(txn_id: TxnID, epoch: int) -> bytes:
    return f"txn/{txn_id.most_bits}/{txn_id.least_bits}@{epoch}".encode()


def claim_key(tc_id: int, owner_id: str) -> bytes:
    return f"claim/{tc_id}/{owner_id}".encode()


def seq_key(tc_id: int, epoch: int) -> bytes:
    return f"seq/{tc_id}@{epoch}".encode()


def encode_claim(tc_id: int, owner_id: str, owner_url: str, now_ms: int) -> bytes:
    return CLAIM.encode(
        {"tc_id": tc_id, "owner_id": owner_id, "owner_url": owner_url, "claimed_at_ms": now_ms}
    )


def encode_seq_high_water(tc_id: int, epoch: int, next_seq: int) -> bytes:
    return SEQ_HIGH_WATER.encode({"tc_id": tc_id, "epoch": epoch, "next_seq": next_seq})
