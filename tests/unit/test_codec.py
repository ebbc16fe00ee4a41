import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_store import (
    REGISTRY,
    CodecError,
    CorruptRecordError,
    RecordKind,
    UnknownRecordKindError,
    UnsupportedRecordVersionError,
)
from pulsar_txn.buffer.marker import TxnMarker, decode_marker, encode_marker, sign, verify
from pulsar_txn.coordinator.records import TXN_META, TxnMeta, encode_claim
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.txnid import TxnAction, TxnID


def _meta() -> TxnMeta:
    return TxnMeta(
        TxnID(3, 9), TxnStatus.COMMITTING, 5000, 1, 5001, 2, ["t-partition-0"], [("t", "s")], 0, False
    )


def test_txn_meta_round_trips_through_its_versioned_schema() -> None:
    meta = _meta()
    kind, version, fields = REGISTRY.decode(meta.encode(epoch=77))
    assert (kind, version) == (TXN_META, 1)
    assert fields["epoch"] == 77
    assert TxnMeta.from_fields(fields) == meta


def test_unknown_version_is_rejected_not_misread() -> None:
    data = bytearray(_meta().encode(epoch=1))
    data[3] = 9  # schema version byte
    with pytest.raises(UnsupportedRecordVersionError, match="version 9"):
        REGISTRY.decode(bytes(data))


def test_unknown_kind_and_bad_magic_and_truncation_are_typed_errors() -> None:
    good = _meta().encode(epoch=1)
    with pytest.raises(UnknownRecordKindError):
        REGISTRY.decode(b"PT" + bytes([250, 1]) + good[4:])
    with pytest.raises(CorruptRecordError):
        REGISTRY.decode(b"XX" + good[2:])
    with pytest.raises(CorruptRecordError):
        REGISTRY.decode(good[:-3])
    with pytest.raises(CorruptRecordError):
        REGISTRY.decode(good + b"\x00")
    with pytest.raises(CorruptRecordError):
        REGISTRY.decode(None)


def test_decode_as_rejects_a_record_of_another_kind() -> None:
    with pytest.raises(CorruptRecordError, match="expected a TxnMeta"):
        REGISTRY.decode_as(TXN_META, encode_claim(0, "o", "u", 1))


def test_a_second_kind_cannot_reuse_a_code() -> None:
    with pytest.raises(ValueError):
        REGISTRY.register(RecordKind("Other", code=TXN_META.code, schemas={1: {"type": "string"}}))


@given(st.binary(max_size=200))
def test_decoding_random_bytes_only_raises_codec_errors(data: bytes) -> None:
    try:
        REGISTRY.decode(data)
    except CodecError:
        pass


@given(st.binary(max_size=120))
def test_decoding_random_bodies_behind_a_valid_header_only_raises_codec_errors(body: bytes) -> None:
    try:
        REGISTRY.decode(b"PT" + bytes([TXN_META.code, 1]) + body)
    except CodecError:
        pass


def test_marker_round_trip_and_hmac_binds_it_to_its_partition() -> None:
    marker = TxnMarker(TxnID(1, 2), TxnAction.COMMIT, low_watermark=1, written_at_ms=123)
    signed = sign(marker, "orders", 3, b"secret")
    value, headers = encode_marker(signed)
    assert dict(headers)["ptxn.ctl"] == b"marker"
    assert dict(headers)["ptxn.txn"] == TxnID(1, 2).to_bytes()
    decoded = decode_marker(value)
    assert decoded == signed
    assert verify(decoded, "orders", 3, b"secret")
    assert not verify(decoded, "orders", 4, b"secret")
    assert not verify(decoded, "orders", 3, b"other")
    forged = TxnMarker(TxnID(1, 2), TxnAction.COMMIT, 1, 123, mac=b"\x00" * 32)
    assert not verify(forged, "orders", 3, b"secret")
