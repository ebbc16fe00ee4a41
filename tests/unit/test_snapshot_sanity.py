"""A transaction-buffer snapshot is a cache: one with impossible content is ignored (the partition is
then scanned), never trusted, and never an untyped crash of the reader that loads it."""

from typing import Any

import pytest

from kafka_store.reader import StoredRecord
from pulsar_txn.buffer import snapshot as snap


def _head(**over: Any) -> bytes:
    head: dict[str, Any] = {
        "topic": "t",
        "partition": 0,
        "snapshot_id": "x",
        "scanned_to": 0,
        "taken_at_ms": 0,
        "ongoing": [],
        "aborted": [],
        "aborted_segments": 0,
        "ended": [],
        "lwm": {},
        "discarded": [],
        "counters": {},
        "anchor_offset": -1,
        "anchor_fingerprint": 0,
    }
    head.update(over)
    return snap.TB_SNAPSHOT.encode(head, version=2)


@pytest.mark.parametrize(
    "value",
    [
        _head(ongoing=[{"most": -1, "least": 0, "offset": 0}]),
        _head(discarded=[[1, 2, 3]]),
        _head(lwm={"tc0": 5}),
        _head(ended=[{"most": 0, "least": -5, "committed": True}]),
        _head(scanned_to=-3),
        _head(aborted=[{"most": -2, "least": 1, "offset": 4}]),
    ],
    ids=[
        "negative-ongoing-txn",
        "discarded-triple",
        "lwm-key-not-a-number",
        "negative-ended-txn",
        "negative-scanned-to",
        "negative-aborted-txn",
    ],
)
def test_a_well_formed_snapshot_with_impossible_content_is_refused_with_an_error_load_ignores(
    value: bytes,
) -> None:
    table = {b"t/0": StoredRecord("__tbs", 0, 0, b"t/0", value, [], 0)}
    decoded = snap._decode(table, "t", 0)
    if decoded is None:
        return  # ignored at decoding
    # Else building the state raises one of the errors SnapshotStore.load_many turns into "no snapshot".
    with pytest.raises((ValueError, TypeError, KeyError)):
        snap._state_of(decoded[0], decoded[1], "t", 0, 1 << 16, None)


def test_a_sane_snapshot_still_loads() -> None:
    table = {b"t/0": StoredRecord("__tbs", 0, 0, b"t/0", _head(scanned_to=7), [], 0)}
    decoded = snap._decode(table, "t", 0)
    assert decoded is not None
    assert snap._state_of(decoded[0], decoded[1], "t", 0, 1 << 16, None).scanned_to == 7
