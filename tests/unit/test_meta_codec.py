"""The direct TxnMeta encoder writes exactly what fastavro writes for the registered schema."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kafka_store import REGISTRY
from pulsar_txn.coordinator.records import TXN_META, TxnMeta
from pulsar_txn.coordinator.status import TxnStatus
from pulsar_txn.txnid import TxnID

_LONG = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_TEXT = st.text(max_size=40)


@st.composite
def metas(draw: st.DrawFn) -> tuple[TxnMeta, int]:
    meta = TxnMeta(
        TxnID(draw(st.integers(0, 2**31)), draw(st.integers(0, 2**63 - 1))),
        draw(st.sampled_from(list(TxnStatus))),
        draw(_LONG),
        draw(_LONG),
        draw(_LONG),
        draw(_LONG),
        draw(st.lists(_TEXT, max_size=4)),
        draw(st.lists(st.tuples(_TEXT, _TEXT), max_size=3)),
        draw(_LONG),
        draw(st.booleans()),
    )
    return meta, draw(_LONG)


@given(metas())
def test_direct_encoder_matches_fastavro_byte_for_byte(case: tuple[TxnMeta, int]) -> None:
    meta, epoch = case
    direct = meta.encode(epoch)
    assert direct == TXN_META.encode(meta.to_fields(epoch))
    assert TxnMeta.from_fields(REGISTRY.decode_as(TXN_META, direct)) == meta
