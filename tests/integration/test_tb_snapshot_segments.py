"""Large transaction-buffer states still snapshot: sets too big for one record go into segment
records tied to the head (docs/storage-format.md, "TB snapshots")."""

from __future__ import annotations

from contextlib import closing

import pytest

from kafka_store import Appender, KafkaConfig, RecordTooLargeError, TopicAdmin, end_offsets, replay_compacted
from pulsar_txn.buffer import snapshot as snapshot_module
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.txnid import TxnID


def _big_state(
    topic: str, *, ended: int, ongoing: int = 0, aborted: int = 0, discarded: int = 0
) -> TxnBufferState:
    state = TxnBufferState(topic, 0, num_tcs=4)
    state.scanned_to = 0  # the data topic is empty: the load's partition check passes
    base = 1_000_000_000  # five-byte varints: ~7 bytes per ended entry
    state.ended = {TxnID(i % 4, base + i): bool(i % 3) for i in range(ended)}
    for i in range(ongoing):
        txn = TxnID(1, 2 * base + i)
        state.ongoing[txn] = i
        state._oldest.append((i, txn))
    state.aborted = {TxnID(2, 3 * base + i): i for i in range(aborted)}
    state.discarded = [[10 * i, 10 * i + 3] for i in range(discarded)]
    state.lwm = {0: 5, 3: 7}
    return state


def _same(a: TxnBufferState, b: TxnBufferState) -> bool:
    return (
        a.ended == b.ended
        and a.ongoing == b.ongoing
        and a.aborted == b.aborted
        and a.discarded == b.discarded
        and a.lwm == b.lwm
        and a.max_read_position == b.max_read_position
    )


def test_a_snapshot_whose_ended_set_exceeds_one_record_is_written_and_loads_whole(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    # One transaction left open pins its TC's low watermark: every transaction ended in the partition
    # meanwhile stays in ``ended``. 300,000 entries are ~2 MB: the head alone was over the broker's and
    # the producer's 1 MB record limit, so every snapshot of the partition failed.
    topic = f"tbseg-{uid}"
    admin.ensure_topic(topic, 1)
    store = SnapshotStore(kafka, topic=f"__tbs-{uid}", partitions=1)
    with closing(store):
        state = _big_state(topic, ended=300_000, ongoing=3)
        store.write(state).result(60)
        loaded = store.load(topic, 0, num_tcs=4)
        assert loaded is not None
        assert _same(loaded[0], state)
        assert loaded[0].max_read_position == 0  # the oldest ongoing txn's first offset came back


def test_every_large_set_goes_to_segments_and_a_smaller_snapshot_tombstones_the_stale_ones(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"tbseg2-{uid}"
    snap_topic = f"__tbs2-{uid}"
    admin.ensure_topic(topic, 1)
    store = SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)
    with closing(store):
        big = _big_state(topic, ended=450, ongoing=250, aborted=320, discarded=130)
        store.write(big).result(30)
        loaded = store.load(topic, 0, num_tcs=4)
        assert loaded is not None and _same(loaded[0], big)
        keys = set(replay_compacted(kafka, snap_topic, 0))
        # aborted: 4 segments, then ongoing 3 + ended 5 + discarded 2
        assert {f"{topic}/0/seg/{i}".encode() for i in range(14)} <= keys

        small = _big_state(topic, ended=5, aborted=2)
        store.write(small).result(30)
        loaded = store.load(topic, 0, num_tcs=4)
        assert loaded is not None and _same(loaded[0], small)
        live = set(replay_compacted(kafka, snap_topic, 0))
        assert not any(k.startswith(f"{topic}/0/seg/".encode()) for k in live)  # all tombstoned

    # A fresh store (another process) that loaded the big snapshot tombstones all its segments too.
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as again:
        again.write(big).result(30)
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as fresh:
        assert fresh.load(topic, 0, num_tcs=4) is not None
        fresh.write(small).result(30)
        live = set(replay_compacted(kafka, snap_topic, 0))
        assert not any(k.startswith(f"{topic}/0/seg/".encode()) for k in live)


def test_a_head_whose_state_segment_is_missing_is_ignored(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"tbseg3-{uid}"
    snap_topic = f"__tbs3-{uid}"
    admin.ensure_topic(topic, 1)
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as store:
        store.write(_big_state(topic, ended=250)).result(30)
        # Drop one ended segment as compaction of a half-written snapshot could leave it missing.
        store._app().append(snap_topic, 0, None, key=f"{topic}/0/seg/1".encode()).result(30)
        assert store.load(topic, 0, num_tcs=4) is None


def test_a_segment_that_fails_stops_the_head_so_the_last_good_snapshot_stays(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    # The head was appended whatever became of its segments, and write() reported success: a 1.2 MB
    # segment was refused, the head replaced the last good snapshot, and nothing loaded any more.
    topic = f"tbseg4-{uid}"
    admin.ensure_topic(topic, 1)
    n = 70_000
    with closing(SnapshotStore(kafka, topic=f"__tbs4-{uid}", partitions=1, segment_size=n)) as store:
        good = _big_state(topic, ended=10, aborted=10)
        store.write(good).result(30)
        big = TxnBufferState(topic, 0, num_tcs=4)
        big.aborted = {TxnID(1, (1 << 62) + i): (1 << 40) + i for i in range(n + 1)}  # ~17 bytes each: 1.2 MB
        with pytest.raises(RecordTooLargeError):
            store.write(big).result(60)
        assert (topic, 0) not in store._taken  # the next write trusts no segment key
        loaded = store.load(topic, 0, num_tcs=4)
        assert loaded is not None and _same(loaded[0], good)


class _Killed(BaseException):
    pass


def test_segments_of_a_snapshot_whose_head_never_came_are_tombstoned_by_the_next_writer(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"tbseg5-{uid}"
    snap_topic = f"__tbs5-{uid}"
    admin.ensure_topic(topic, 1)
    prefix = f"{topic}/0/seg/".encode()
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as first:
        first.write(_big_state(topic, ended=1000)).result(30)  # 10 state segments

        def killed(self: object, value: bytes) -> None:  # SIGKILL after the segments, before the head
            raise _Killed

        with monkeypatch.context() as patch:
            patch.setattr(snapshot_module._SegmentWriter, "head", killed)
            with pytest.raises(_Killed):
                first.write(_big_state(topic, ended=1000))
    # The killed write put its segments at keys the last head does not use (since session 31): the
    # next writer still loads that head whole. Its own, smaller snapshot must tombstone all 20
    # segment keys, the orphans too (it counted only a loaded head's segments once).
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as second:
        loaded = second.load(topic, 0, num_tcs=4)
        assert loaded is not None and len(loaded[0].ended) == 1000
        second.write(_big_state(topic, ended=5)).result(30)
        loaded = second.load(topic, 0, num_tcs=4)
        assert loaded is not None and len(loaded[0].ended) == 5
    live = [k for k in replay_compacted(kafka, snap_topic, 0) if k.startswith(prefix)]
    assert live == []


def test_a_stray_segment_key_makes_a_write_tombstone_that_key_only(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    # The count of live segments was "highest index + 1": one junk key .../seg/2000000 made the next
    # write append two million tombstones (.../seg/99999999999 would stall the TB service for good).
    topic = f"tbseg6-{uid}"
    snap_topic = f"__tbs6-{uid}"
    admin.ensure_topic(topic, 1)
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1)) as store:
        store.ensure_topic()
        store._app().append(snap_topic, 0, b"junk", key=f"{topic}/0/seg/2000000".encode()).result(30)
        assert store.load(topic, 0, num_tcs=4) is None
        store.write(_big_state(topic, ended=5)).result(30)
        assert store._segments_written[(topic, 0)] == set()
    live = replay_compacted(kafka, snap_topic, 0)
    assert not any(k.startswith(f"{topic}/0/seg/".encode()) for k in live)


def _snapshot_records(kafka: KafkaConfig, snap_topic: str) -> int:
    return end_offsets(kafka, [(snap_topic, 0)])[(snap_topic, 0)]


def _live_segments(kafka: KafkaConfig, snap_topic: str, topic: str) -> set[int]:
    prefix = f"{topic}/0/seg/".encode()
    return {int(k[len(prefix) :]) for k in replay_compacted(kafka, snap_topic, 0) if k.startswith(prefix)}


def test_a_snapshot_writes_only_the_aborted_segments_that_changed(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    # Every snapshot wrote the whole aborted set again: a partition with 1M aborted transactions in
    # its retained data wrote ~100 segments (MBs) every 5 s (Pulsar's segmented snapshots, PIP-196,
    # write only new segments).
    topic = f"tbseg7-{uid}"
    snap_topic = f"__tbs7-{uid}"
    admin.ensure_topic(topic, 1)
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as store:
        state = _big_state(topic, ended=5, aborted=1000)
        store.write(state).result(30)
        assert _live_segments(kafka, snap_topic, topic) == set(range(10))

        before = _snapshot_records(kafka, snap_topic)
        state.aborted |= {TxnID(3, i): 5000 + i for i in range(50)}  # new aborts
        store.write(state).result(30)
        assert _snapshot_records(kafka, snap_topic) - before == 2  # one new segment + the head
        loaded = store.load(topic, 0, num_tcs=4)
        assert loaded is not None and _same(loaded[0], state)

        before = _snapshot_records(kafka, snap_topic)
        cut = 3 * 1_000_000_000 + 150
        state.aborted = {t: o for t, o in state.aborted.items() if t.least_bits >= cut or t.most_bits == 3}
        store.write(state).result(30)
        # segment 1 cut in half (written anew, at key 11), the head, then tombstones of keys 0 and 1
        assert _snapshot_records(kafka, snap_topic) - before == 4
        assert _live_segments(kafka, snap_topic, topic) == set(range(2, 12))
        loaded = store.load(topic, 0, num_tcs=4)
        assert loaded is not None and _same(loaded[0], state)

    # Another process that loaded the snapshot takes its segments over as well.
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as fresh:
        assert fresh.load(topic, 0, num_tcs=4) is not None
        before = _snapshot_records(kafka, snap_topic)
        state.aborted[TxnID(3, 999)] = 9999
        fresh.write(state).result(30)
        assert _snapshot_records(kafka, snap_topic) - before == 3  # last segment anew, head, tombstone
        loaded = fresh.load(topic, 0, num_tcs=4)
        assert loaded is not None and _same(loaded[0], state)


def test_a_snapshot_writes_only_the_ended_chunks_that_changed(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    # One transaction open for hours pins its TC's low watermark: every transaction ended meanwhile
    # stays in ``ended``, and each snapshot wrote all of it again (~2 MB at 300,000 entries).
    topic = f"tbseg10-{uid}"
    snap_topic = f"__tbs10-{uid}"
    admin.ensure_topic(topic, 1)
    with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as store:
        state = _big_state(topic, ended=1000, ongoing=1)
        store.write(state).result(30)  # 10 ended chunks + 1 ongoing chunk + the head
        before = _snapshot_records(kafka, snap_topic)
        state.ended |= {TxnID(1, 5_000_000_000 + i): True for i in range(20)}
        store.write(state).result(30)
        # the new ended chunk, the ongoing chunk (always written), the head, the old ongoing key's tombstone
        assert _snapshot_records(kafka, snap_topic) - before == 4
        with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as probe:
            loaded = probe.load(topic, 0, num_tcs=4)
            assert loaded is not None and _same(loaded[0], state)
            assert len(probe._taken[(topic, 0)]["ended"]) == 11  # a new owner takes them over too


def test_a_segment_overwritten_by_another_writer_is_written_again_by_the_next_full_snapshot(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A former owner's late snapshot overwrites segment keys this store takes over: its heads then
    # name segments that are not there any more, and load as nothing until a full rewrite. (Loads go
    # through another store: a load resets what this one remembers, as the TB service never does.)
    monkeypatch.setattr(snapshot_module, "_FULL_REWRITE_EVERY", 4)
    topic = f"tbseg8-{uid}"
    snap_topic = f"__tbs8-{uid}"
    admin.ensure_topic(topic, 1)

    def loads() -> bool:
        with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as probe:
            loaded = probe.load(topic, 0, num_tcs=4)
            return loaded is not None and _same(loaded[0], state)

    with (
        closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as ours,
        closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as former,
    ):
        state = _big_state(topic, ended=5, aborted=300)
        ours.write(state).result(30)  # write 1: all three segments, keys 0-2
        former.write(_big_state(topic, ended=5, aborted=250)).result(30)  # keys 0-2 again
        for write in (2, 3):
            state.aborted[TxnID(3, write)] = write
            ours.write(state).result(30)  # takes keys 0-2 over: now the former owner's
            assert not loads(), write
        state.aborted[TxnID(3, 4)] = 4
        ours.write(state).result(30)  # write 4: every segment again
        assert loads()


def test_a_head_that_fails_leaves_the_last_good_snapshot_whole(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    # The keys the new head no longer used were tombstoned whether or not it was stored (and changed
    # segments were written over their old keys): a failed head left the last good one naming
    # segments that were gone, and the partition had no snapshot until the next write succeeded.
    topic = f"tbseg9-{uid}"
    snap_topic = f"__tbs9-{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka, max_record_bytes=4000)
    try:
        with closing(
            SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100, appender=appender)
        ) as store:
            good = _big_state(topic, ended=5, aborted=500)
            store.write(good).result(30)
            bad = _big_state(topic, ended=5, aborted=500)
            bad.prune(150)  # segment 0 emptied, segment 1 cut
            bad.lwm = {i: 10**12 for i in range(2000)}  # and a head over the record limit
            with pytest.raises(RecordTooLargeError):
                store.write(bad).result(30)
        with closing(SnapshotStore(kafka, topic=snap_topic, partitions=1, segment_size=100)) as probe:
            loaded = probe.load(topic, 0, num_tcs=4)
            assert loaded is not None and _same(loaded[0], good)
    finally:
        appender.close()
