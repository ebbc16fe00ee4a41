"""A direct encoder for TxnMeta v1, the coordinator's hottest record (four per transaction).

It writes exactly the bytes fastavro writes for ``TXN_META`` schema version 1 (a unit test compares
the two on generated metas), in a fraction of the time. Decoding, and every other record kind,
stays with fastavro.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka_store.codec import MAGIC

if TYPE_CHECKING:
    from pulsar_txn.coordinator.records import TxnMeta

TXN_META_CODE = 1
TXN_META_V1 = 1
_HEADER = MAGIC + bytes((TXN_META_CODE, TXN_META_V1))


def _long(out: bytearray, value: int) -> None:
    """Avro long: zig-zag, then base-128 varint, least significant group first."""
    n = (value << 1) ^ (value >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _string(out: bytearray, value: str) -> None:
    data = value.encode()
    _long(out, len(data))
    out += data


def encode_txn_meta_v1(meta: TxnMeta, epoch: int, status_index: dict[str, int]) -> bytes:
    out = bytearray(_HEADER)
    txn_id = meta.txn_id
    _long(out, txn_id.most_bits)
    _long(out, txn_id.least_bits)
    _long(out, epoch)
    _long(out, status_index[meta.status.value])
    if meta.partitions:  # an array is one block (count, items) then an empty block; empty: just 0
        _long(out, len(meta.partitions))
        for partition in meta.partitions:
            _string(out, partition)
    out.append(0)
    if meta.subscriptions:
        _long(out, len(meta.subscriptions))
        for topic, subscription in meta.subscriptions:
            _string(out, topic)
            _string(out, subscription)
    out.append(0)
    _long(out, meta.timeout_ms)
    _long(out, meta.opened_at_ms)
    _long(out, meta.deadline_ms)
    _long(out, meta.updated_at_ms)
    _long(out, meta.ended_at_ms)
    out.append(1 if meta.timed_out else 0)
    return bytes(out)
