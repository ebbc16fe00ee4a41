"""Commit/abort markers: control records the TC appends to every partition a transaction touched.

Storage contract (docs/storage-format.md): a marker is a Kafka record with header
``ptxn.ctl = b"marker"``, header ``ptxn.txn`` = the 16-byte TxnID, no key, and a ``TxnMarker`` value.
With a marker secret configured, ``mac`` is HMAC-SHA256 over the marker's identity and placement, so a
marker copied to another partition or forged by a plain producer does not verify; and every message of
a transaction carries header ``ptxn.txn.mac`` (``txn_message_mac``), without which a reader does not
let a transaction open in a partition (a plain producer could otherwise hold readers back for good
with a message of a TxnID its TC never allocated).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from kafka_store import REGISTRY, RecordKind
from kafka_store.errors import CorruptRecordError
from pulsar_txn._record_mac import record_mac
from pulsar_txn.txnid import TxnAction, TxnID

CTL_HEADER = "ptxn.ctl"
TXN_HEADER = "ptxn.txn"
TXN_MAC_HEADER = "ptxn.txn.mac"
MARKER_CTL = b"marker"

TXN_MARKER = REGISTRY.register(
    RecordKind(
        "TxnMarker",
        code=10,
        schemas={
            1: {
                "type": "record",
                "name": "TxnMarkerV1",
                "namespace": "pulsar_txn.buffer",
                "fields": [
                    {"name": "txn_most", "type": "long"},
                    {"name": "txn_least", "type": "long"},
                    {
                        "name": "action",
                        "type": {"type": "enum", "name": "TxnActionV1", "symbols": ["COMMIT", "ABORT"]},
                    },
                    {"name": "low_watermark", "type": "long"},
                    {"name": "written_at_ms", "type": "long"},
                    {"name": "mac", "type": "bytes"},
                ],
            }
        },
    )
)


@dataclass(frozen=True, slots=True)
class TxnMarker:
    txn_id: TxnID
    action: TxnAction
    low_watermark: int  # every txn of this TC with sequence <= low_watermark has ended
    written_at_ms: int
    mac: bytes = b""


def _mac_input(marker: TxnMarker, topic: str, partition: int) -> bytes:
    return b"|".join(
        [
            topic.encode(),
            str(partition).encode(),
            marker.txn_id.to_bytes(),
            marker.action.name.encode(),
            str(marker.low_watermark).encode(),
            str(marker.written_at_ms).encode(),
        ]
    )


def sign(marker: TxnMarker, topic: str, partition: int, secret: bytes) -> TxnMarker:
    mac = hmac.new(secret, _mac_input(marker, topic, partition), hashlib.sha256).digest()
    return TxnMarker(marker.txn_id, marker.action, marker.low_watermark, marker.written_at_ms, mac)


def verify(marker: TxnMarker, topic: str, partition: int, secret: bytes) -> bool:
    expected = hmac.new(secret, _mac_input(marker, topic, partition), hashlib.sha256).digest()
    return hmac.compare_digest(expected, marker.mac)


def txn_message_mac(secret: bytes, txn_raw: bytes, topic: str, partition: int) -> bytes:
    """HMAC-SHA256 binding a transaction (its 16-byte id) to one partition: the same for all of its
    messages there, so a producer computes it once per partition and a reader checks it once, on the
    message that opens the transaction. It authenticates the opening, not the payloads: a plain
    producer can append to an open transaction (as it can write plain messages), never open one."""
    return record_mac(secret, b"txn-message", txn_raw, topic.encode(), str(partition).encode())


def encode_marker(marker: TxnMarker) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The record value and headers of a marker."""
    value = TXN_MARKER.encode(
        {
            "txn_most": marker.txn_id.most_bits,
            "txn_least": marker.txn_id.least_bits,
            "action": marker.action.name,
            "low_watermark": marker.low_watermark,
            "written_at_ms": marker.written_at_ms,
            "mac": marker.mac,
        }
    )
    return value, [(CTL_HEADER, MARKER_CTL), (TXN_HEADER, marker.txn_id.to_bytes())]


def marker_record(
    marker: TxnMarker, topic: str, partition: int, secret: bytes | None
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """Value and headers of ``marker`` as written to ``topic[partition]`` (signed when a secret is set)."""
    if secret is not None:
        marker = sign(marker, topic, partition, secret)
    return encode_marker(marker)


def decode_marker(value: bytes | None) -> TxnMarker:
    """Decode a marker value; raises ``kafka_store.CodecError`` subclasses on bad bytes."""
    f = REGISTRY.decode_as(TXN_MARKER, value)
    try:
        return TxnMarker(
            TxnID(int(f["txn_most"]), int(f["txn_least"])),
            TxnAction[f["action"]],
            int(f["low_watermark"]),
            int(f["written_at_ms"]),
            bytes(f["mac"]),
        )
    except (ValueError, KeyError) as exc:  # well-formed Avro, impossible content (a negative TxnID)
        raise CorruptRecordError(f"marker with impossible fields: {exc}") from None
