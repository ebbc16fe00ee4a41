"""A transaction-buffer snapshot is a cache: one with impossible content is ignored (the partition is
then scanned), never trusted, and never an untyped crash of the reader that loads it."""

import tracemalloc
from typing import Any

import pytest

from kafka_store.reader import StoredRecord
from pulsar_txn.buffer import snapshot as snap


def _v2_fields() -> dict[str, Any]:
    return {
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


def _head(**over: Any) -> bytes:
    return snap.TB_SNAPSHOT.encode({**_v2_fields(), **over}, version=2)


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


def _rec(key: str, value: bytes | None) -> tuple[bytes, StoredRecord]:
    return key.encode(), StoredRecord("__tbs", 0, 0, key.encode(), value, [], 0)


def _aborted_segment(snapshot_id: str, index: int, least: int) -> bytes:
    entry = {"most": 1, "least": least, "offset": least}
    return snap.TB_ABORTED_SEGMENT.encode({"snapshot_id": snapshot_id, "index": index, "aborted": [entry]})


def test_a_version_3_head_of_an_older_build_still_loads_with_its_segments() -> None:
    v3 = {**_v2_fields(), "snapshot_id": "old", "aborted_segments": 1, "state_segments": 0}
    table = dict(
        [
            _rec("t/0", snap.TB_SNAPSHOT.encode(v3, version=3)),
            _rec("t/0/seg/0", _aborted_segment("old", 0, 7)),
        ]
    )
    decoded = snap._decode(table, "t", 0)
    assert decoded is not None and list(decoded[1].values()) == [7]


def _v4_head(snapshot_id: str, refs: list[dict[str, Any]]) -> dict[str, Any]:
    """A version-4 head whose segments are all aborted ones, at ``refs``."""
    return {
        **_v2_fields(),
        "snapshot_id": snapshot_id,
        "aborted_segments": len(refs),
        "state_segments": 0,
        "segment_refs": refs,
    }


def test_a_version_4_head_takes_segments_of_earlier_snapshots_by_their_refs() -> None:
    refs = [{"index": 4, "snapshot_id": "s1"}, {"index": 0, "snapshot_id": "s2"}]
    v4 = _v4_head("s2", refs)
    table = dict(
        [
            _rec("t/0", snap.TB_SNAPSHOT.encode(v4, version=4)),
            _rec("t/0/seg/4", _aborted_segment("s1", 4, 3)),
            _rec("t/0/seg/0", _aborted_segment("s2", 0, 5)),
        ]
    )
    decoded = snap._decode(table, "t", 0)
    assert decoded is not None and sorted(decoded[1].values()) == [3, 5]
    assert [(s.index, s.snapshot_id) for s in decoded[2]["aborted"]] == [(4, "s1"), (0, "s2")]
    # A ref naming another snapshot than the segment's own, or refs that do not add up: ignored.
    bad = {**v4, "segment_refs": [{"index": 4, "snapshot_id": "s9"}, refs[1]]}
    assert (
        snap._decode({**table, **dict([_rec("t/0", snap.TB_SNAPSHOT.encode(bad, version=4))])}, "t", 0)
        is None
    )
    short = {**v4, "segment_refs": refs[:1]}
    assert (
        snap._decode({**table, **dict([_rec("t/0", snap.TB_SNAPSHOT.encode(short, version=4))])}, "t", 0)
        is None
    )


def test_loaded_segments_that_share_a_txn_are_not_taken_over_by_the_next_write() -> None:
    # The next write counts what the segments it takes over hold: with a txn in two of them it would
    # come up one short, and could leave a new abort out of the snapshot (readers would deliver it).
    refs = [{"index": 0, "snapshot_id": "s"}, {"index": 1, "snapshot_id": "s"}]
    v4 = _v4_head("s", refs)
    table = dict(
        [
            _rec("t/0", snap.TB_SNAPSHOT.encode(v4, version=4)),
            _rec("t/0/seg/0", _aborted_segment("s", 0, 3)),
            _rec("t/0/seg/1", _aborted_segment("s", 1, 3)),
        ]
    )
    decoded = snap._decode(table, "t", 0)
    assert decoded is not None and list(decoded[1].values()) == [3]  # the state itself is fine
    assert decoded[2]["aborted"] == []


def test_a_forged_segment_count_is_refused_before_anything_is_allocated_for_it() -> None:
    # A 24-byte head claiming 2**31 - 1 segments made the loader build a list of that many references
    # (about 100 bytes each) before it looked for segment 0: a raw MemoryError, or minutes of work.
    table = {b"t/0": StoredRecord("__tbs", 0, 0, b"t/0", _head(aborted_segments=2**31 - 1), [], 0)}
    tracemalloc.start()
    try:
        assert snap._decode(table, "t", 0) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
