"""Transaction-buffer snapshots on the compacted ``__transaction_buffer_snapshot`` topic.

A snapshot is a cache of ``TxnBufferState`` at ``scanned_to``. Head record key ``<topic>/<partition>``;
when the aborted set is large it goes into segment records ``<topic>/<partition>/seg/<i>`` written
before the head and tied to it by ``snapshot_id``; when the other sets (ongoing, ended, discarded)
together are large, they follow as state segments (head version 3), so no record outgrows the
broker's record limit. A head whose segments are missing is ignored (the reader falls back to an
older snapshot-free scan), never half-trusted.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from kafka_store import (
    REGISTRY,
    Appender,
    BrokerUnavailableError,
    CodecError,
    KafkaConfig,
    PartitionReader,
    RecordKind,
    StoredRecord,
    StoreError,
    TopicAdmin,
    TopicNotFoundError,
    replay_compacted,
)
from pulsar_txn._record_mac import has_valid_mac, record_mac
from pulsar_txn.buffer._segments import NewSegment, Planned, StoredSegment, free_indexes, plan_segments
from pulsar_txn.buffer.state import BufferCounters, TxnBufferState, record_fingerprint
from pulsar_txn.txnid import TxnID

log = logging.getLogger(__name__)

DEFAULT_SNAPSHOT_TOPIC = "__transaction_buffer_snapshot"
_FULL_REWRITE_EVERY = 16  # every 16th segmented snapshot of a partition writes all its segments


def _array_of(record: str, last: str, last_type: str) -> dict[str, Any]:
    """An array of TxnID records (most, least, and one more field), named ``record``."""
    fields = [
        {"name": "most", "type": "long"},
        {"name": "least", "type": "long"},
        {"name": last, "type": last_type},
    ]
    return {"type": "array", "items": {"type": "record", "name": record, "fields": fields}}


_TXN_OFFSET = _array_of("TxnOffsetV1", "offset", "long")["items"]
_DISCARDED = {"type": "array", "items": {"type": "array", "items": "long"}}

_TB_SNAPSHOT_V1_FIELDS: list[dict[str, Any]] = [
    {"name": "topic", "type": "string"},
    {"name": "partition", "type": "int"},
    {"name": "snapshot_id", "type": "string"},
    {"name": "scanned_to", "type": "long"},
    {"name": "taken_at_ms", "type": "long"},
    {"name": "ongoing", "type": {"type": "array", "items": _TXN_OFFSET}},
    {"name": "aborted", "type": {"type": "array", "items": "pulsar_txn.buffer.TxnOffsetV1"}},
    {"name": "aborted_segments", "type": "int"},
    {"name": "ended", "type": _array_of("EndedTxnV1", "committed", "boolean")},
    {"name": "lwm", "type": {"type": "map", "values": "long"}},
    {"name": "discarded", "type": _DISCARDED},
    {"name": "counters", "type": {"type": "map", "values": "long"}},
]

# v2 adds the anchor: the offset and fingerprint of the last record folded in, so that a load can tell
# whether the partition is still the one the snapshot was taken of (docs/storage-format.md).
TB_SNAPSHOT = REGISTRY.register(
    RecordKind(
        "TbSnapshot",
        code=11,
        schemas={
            1: {
                "type": "record",
                "name": "TbSnapshotV1",
                "namespace": "pulsar_txn.buffer",
                "fields": _TB_SNAPSHOT_V1_FIELDS,
            },
            2: {
                "type": "record",
                "name": "TbSnapshotV2",
                "namespace": "pulsar_txn.buffer",
                "fields": [
                    *_TB_SNAPSHOT_V1_FIELDS,
                    {"name": "anchor_offset", "type": "long"},
                    {"name": "anchor_fingerprint", "type": "long"},
                ],
            },
            # v3: ongoing, ended and discarded moved to ``state_segments`` TbStateSegment records
            # (keyed after the aborted segments); written only then, so older readers keep loading
            # the usual snapshots.
            3: {
                "type": "record",
                "name": "TbSnapshotV3",
                "namespace": "pulsar_txn.buffer",
                "fields": [
                    *_TB_SNAPSHOT_V1_FIELDS,
                    {"name": "anchor_offset", "type": "long"},
                    {"name": "anchor_fingerprint", "type": "long"},
                    {"name": "state_segments", "type": "int"},
                ],
            },
            # v4: segments are taken over from earlier snapshots (only changed ones are written, as
            # Pulsar's segmented snapshots): ``segment_refs`` names the key index and the snapshot_id
            # of each, the aborted segments first, then the state segments. Written whenever there
            # are segments; builds without it ignore such a head and scan instead.
            4: {
                "type": "record",
                "name": "TbSnapshotV4",
                "namespace": "pulsar_txn.buffer",
                "fields": [
                    *_TB_SNAPSHOT_V1_FIELDS,
                    {"name": "anchor_offset", "type": "long"},
                    {"name": "anchor_fingerprint", "type": "long"},
                    {"name": "state_segments", "type": "int"},
                    {
                        "name": "segment_refs",
                        "type": {
                            "type": "array",
                            "items": {
                                "type": "record",
                                "name": "SegmentRefV1",
                                "fields": [
                                    {"name": "index", "type": "int"},
                                    {"name": "snapshot_id", "type": "string"},
                                ],
                            },
                        },
                    },
                ],
            },
        },
    )
)

TB_ABORTED_SEGMENT = REGISTRY.register(
    RecordKind(
        "TbAbortedSegment",
        code=12,
        schemas={
            1: {
                "type": "record",
                "name": "TbAbortedSegmentV1",
                "namespace": "pulsar_txn.buffer",
                "fields": [
                    {"name": "snapshot_id", "type": "string"},
                    {"name": "index", "type": "int"},
                    {"name": "aborted", "type": _array_of("SegTxnOffsetV1", "offset", "long")},
                ],
            }
        },
    )
)


TB_STATE_SEGMENT = REGISTRY.register(
    RecordKind(
        "TbStateSegment",
        code=13,
        schemas={
            1: {
                "type": "record",
                "name": "TbStateSegmentV1",
                "namespace": "pulsar_txn.buffer",
                "fields": [
                    {"name": "snapshot_id", "type": "string"},
                    {"name": "index", "type": "int"},
                    {"name": "ongoing", "type": _array_of("StateSegTxnOffsetV1", "offset", "long")},
                    {"name": "ended", "type": _array_of("StateSegEndedTxnV1", "committed", "boolean")},
                    {"name": "discarded", "type": _DISCARDED},
                ],
            }
        },
    )
)
_STATE_SETS = ("ongoing", "ended", "discarded")


def _ended(items: dict[TxnID, bool]) -> list[dict[str, Any]]:
    return [{"most": t.most_bits, "least": t.least_bits, "committed": c} for t, c in items.items()]


def _from_ended(items: list[dict[str, Any]]) -> dict[TxnID, bool]:
    return {TxnID(int(e["most"]), int(e["least"])): bool(e["committed"]) for e in items}


def _txn_offsets(items: dict[TxnID, int]) -> list[dict[str, int]]:
    return [{"most": t.most_bits, "least": t.least_bits, "offset": o} for t, o in items.items()]


def _from_txn_offsets(items: list[dict[str, Any]]) -> dict[TxnID, int]:
    return {TxnID(int(i["most"]), int(i["least"])): int(i["offset"]) for i in items}


SNAPSHOT_MAC_HEADER = "ptxn-snapshot-mac"
"""With marker authentication on, every snapshot record carries an HMAC-SHA256 (marker secret) over
its key and value: a snapshot is trusted state (what is open, what aborted), so one a plain Kafka
producer forged would otherwise reveal uncommitted data as a forged marker would."""


def _signed(secret: bytes | None, key: bytes, value: bytes) -> list[tuple[str, bytes]] | None:
    return None if secret is None else [(SNAPSHOT_MAC_HEADER, record_mac(secret, key, value))]


def _authentic(rec: StoredRecord, secret: bytes | None) -> bool:
    if secret is None:
        return True
    return (
        rec.key is not None
        and rec.value is not None
        and has_valid_mac(rec.headers, SNAPSHOT_MAC_HEADER, record_mac(secret, rec.key, rec.value))
    )


class SnapshotStore:
    """Reads and writes TB snapshots. No I/O until a method is called."""

    def __init__(
        self,
        kafka: KafkaConfig,
        *,
        topic: str = DEFAULT_SNAPSHOT_TOPIC,
        partitions: int = 8,
        segment_size: int = 10_000,
        appender: Appender | None = None,
    ) -> None:
        self._kafka = kafka
        self.topic = topic
        self._partitions = partitions
        self._segment_size = segment_size
        self._appender = appender
        self._owns_appender = appender is None
        # Per partition, the segment indexes live in the topic (written here, or found by a load):
        # a snapshot with fewer segments tombstones the others.
        self._segments_written: dict[tuple[str, int], set[int]] = {}
        # Per partition, the aborted and ended segments of the last snapshot written or loaded, by set
        # name (the next one takes them over where they did not change).
        self._taken: dict[tuple[str, int], dict[str, list[StoredSegment]]] = {}
        self._writes: dict[tuple[str, int], int] = {}  # segmented snapshots written, per partition
        self._ready = False

    def ensure_topic(self) -> None:
        if not self._ready:
            # Kafka never compacts the active segment: with the default 1 GB one, every load would
            # replay all snapshots written since the last roll (as for the TC log, coordinator/service).
            self._partitions = TopicAdmin(self._kafka).ensure_topic(
                self.topic,
                self._partitions,
                {"cleanup.policy": "compact", "segment.bytes": str(_SEGMENT_BYTES)},
            )
            self._ready = True

    def _existing(self) -> bool:
        """Whether the snapshot topic exists (and its partition count is known here)."""
        if not self._ready:
            try:
                self._partitions = TopicAdmin(self._kafka).partition_count(self.topic)
            except TopicNotFoundError:
                return False
            self._ready = True
        return True

    def _partition_for(self, topic: str, partition: int) -> int:
        return zlib.crc32(f"{topic}/{partition}".encode()) % self._partitions

    def _app(self) -> Appender:
        if self._appender is None:
            self._appender = Appender(self._kafka)
        return self._appender

    def write(self, state: TxnBufferState) -> Future[int]:
        """Append a snapshot of ``state`` and wait for it; the (done) future gives the head record's
        offset. Aborted segments whose content this store wrote or loaded before are taken over, not
        written again (``_segments.py``). New segments go to keys the last head does not use, and the
        keys it used that this one does not are tombstoned once this head is stored: until then, the
        last head loads whole."""
        self.ensure_topic()
        tp = (state.topic, state.partition)
        out = _SegmentWriter(self._app(), self.topic, self._partition_for(*tp), state)
        size = self._segment_size
        ongoing = _txn_offsets(state.ongoing)
        discarded = [list(r) for r in state.discarded]
        split = len(ongoing) + len(state.ended) + len(discarded) > size  # state sets in segments
        taken: dict[str, list[StoredSegment]] = {}
        if len(state.aborted) > size or split:
            writes = self._writes[tp] = self._writes.get(tp, 0) + 1
            # Now and then all of them again: a segment key overwritten behind this store's back (a
            # former owner's late snapshot) would otherwise keep every later head unloadable.
            taken = self._taken.get(tp, {}) if writes % _FULL_REWRITE_EVERY else {}
        plans: dict[str, list[Planned]] = {}
        if len(state.aborted) > size:
            plans["aborted"] = plan_segments(taken.get("aborted", ()), state.aborted, size)
        if split and state.ended:
            plans["ended"] = plan_segments(taken.get("ended", ()), state.ended, size)
        live_before = self._segments_written.get(tp, set())
        reused = {p.index for plan in plans.values() for p in plan if isinstance(p, StoredSegment)}
        free = free_indexes(live_before | reused)
        stored: dict[str, list[StoredSegment]] = {}
        for name, plan in plans.items():
            stored[name] = []
            for seg in plan:
                if isinstance(seg, NewSegment):
                    index = next(free)
                    if name == "aborted":
                        out.append(TB_ABORTED_SEGMENT, index, aborted=_txn_offsets(seg.entries))
                    else:
                        ended = _ended(seg.entries)
                        out.append(TB_STATE_SEGMENT, index, ongoing=[], ended=ended, discarded=[])
                    seg = StoredSegment(index, out.snapshot_id, seg.entries)
                stored[name].append(seg)
        state_refs = [(seg.index, seg.snapshot_id) for seg in stored.get("ended", ())]
        sets: dict[str, list[Any]] = {name: [] for name in _STATE_SETS}
        if split:
            # Each set in chunks of its own, after the aborted segments: one transaction left open
            # for hours keeps every transaction ended meanwhile in ``ended`` (see state.py); those
            # chunks are taken over like the aborted ones.
            for name, items in (("ongoing", ongoing), ("discarded", discarded)):  # discarded stays sorted
                for start in range(0, len(items), size):
                    chunk = {n: items[start : start + size] if n == name else [] for n in sets}
                    index = next(free)
                    out.append(TB_STATE_SEGMENT, index, **chunk)
                    state_refs.append((index, out.snapshot_id))
        else:
            sets = {"ongoing": ongoing, "ended": _ended(state.ended), "discarded": discarded}
        aborted_stored = stored.get("aborted", [])
        inline = {} if "aborted" in plans else dict(state.aborted)
        timeout = self._kafka.request_timeout_ms / 1000 + 30  # the appender's own deadline
        try:
            out.wait_segments(timeout)
        except BaseException:
            self._taken.pop(tp, None)  # some may be stored after all: trust none of them
            self._segments_written[tp] = live_before | out.indexes  # tombstoned by the next write
            raise
        refs = [(seg.index, seg.snapshot_id) for seg in aborted_stored] + state_refs
        live = {index for index, _id in refs}
        anchor_offset, anchor_fingerprint = state.anchor()
        head: dict[str, Any] = {
            "topic": state.topic,
            "partition": state.partition,
            "snapshot_id": out.snapshot_id,
            "scanned_to": state.scanned_to,
            "taken_at_ms": int(time.time() * 1000),
            "aborted": _txn_offsets(inline),
            "aborted_segments": len(aborted_stored),
            **sets,
            "lwm": {str(k): v for k, v in state.lwm.items()},
            "counters": _counters_of(state),
            "anchor_offset": anchor_offset,
            "anchor_fingerprint": anchor_fingerprint,
        }
        if refs:
            head |= {
                "state_segments": len(state_refs),
                "segment_refs": [{"index": i, "snapshot_id": sid} for i, sid in refs],
            }
            written = out.head(TB_SNAPSHOT.encode(head, version=4))
        else:
            written = out.head(TB_SNAPSHOT.encode(head, version=2))  # readable by builds without segments
        self._segments_written[tp] = live_before | live  # until the tombstones below are stored
        try:
            written.result(timeout)
        except BaseException:
            # The last head may still be the latest: keep every key it uses. The segments written
            # for this one stay known as written (their keys hold them).
            self._taken[tp] = stored
            return written
        self._taken[tp] = stored
        self._tombstone(tp, out, sorted(live_before - live), timeout)
        return written

    def _tombstone(
        self, tp: tuple[str, int], out: _SegmentWriter, indexes: list[int], timeout: float
    ) -> None:
        """Tombstone segment keys no head uses any more; those that fail stay listed as written, so
        the next snapshot tombstones them."""
        pending = [(index, out.tombstone(index)) for index in indexes]
        done: set[int] = set()
        for index, fut in pending:
            try:
                fut.result(timeout)
                done.add(index)
            except Exception as exc:  # only leaves a stale key behind, for the next write to remove
                log.warning("snapshot of %s/%d: tombstone of segment %d failed: %s", *tp, index, exc)
        self._segments_written[tp] -= done

    def forget(self, topic: str, partitions: Iterable[int]) -> int:
        """Tombstone every snapshot record (heads and segments) of these partitions of
        ``topic``, for a deleted topic; returns how many were written. Compaction then drops them."""
        self.ensure_topic()
        parts = list(partitions)
        by_snap: dict[int, list[str]] = {}
        for p in parts:
            by_snap.setdefault(self._partition_for(topic, p), []).append(f"{topic}/{p}")
        app = self._app()
        written: list[Future[int]] = []
        for snap_partition, bases in by_snap.items():
            for key in replay_compacted(self._kafka, self.topic, snap_partition):
                name = key.decode(errors="replace")
                if any(name == b or name.startswith(f"{b}/seg/") for b in bases):
                    written.append(app.append(self.topic, snap_partition, None, key=key))
        timeout = self._kafka.request_timeout_ms / 1000 + 30  # the appender's own delivery deadline
        for fut in written:
            try:
                fut.result(timeout)
            except TimeoutError:
                raise BrokerUnavailableError.no_answer(f"tombstones in {self.topic}", timeout) from None
        for p in parts:
            self._uncache((topic, p))
        return len(written)

    def drop_cached(self, exists: Callable[[str], bool]) -> int:
        """Forget what this store keeps in memory about partitions of topics that no longer
        ``exists`` (no I/O); how many it forgot. A writer's cache otherwise keeps every deleted
        topic it wrote a snapshot of (its partitions are often revoked before the deletion is seen)."""
        gone = {tp for cache in self._caches() for tp in cache if not exists(tp[0])}
        for tp in gone:
            self._uncache(tp)
        return len(gone)

    def _caches(self) -> tuple[dict[tuple[str, int], Any], ...]:
        """What this store keeps in memory per partition."""
        return (self._segments_written, self._taken, self._writes)

    def _uncache(self, tp: tuple[str, int]) -> None:
        for cache in self._caches():
            cache.pop(tp, None)

    def load(
        self, topic: str, partition: int, *, num_tcs: int = 1 << 16, marker_secret: bytes | None = None
    ) -> tuple[TxnBufferState, int] | None:
        """The latest complete snapshot as a state and its taken-at time (ms), or None."""
        return self.load_many([(topic, partition)], num_tcs=num_tcs, marker_secret=marker_secret)[
            (topic, partition)
        ]

    def load_many(
        self,
        partitions: Iterable[tuple[str, int]],
        *,
        num_tcs: int = 1 << 16,
        marker_secret: bytes | None = None,
    ) -> dict[tuple[str, int], tuple[TxnBufferState, int] | None]:
        """``load`` for many partitions at once: each snapshot-topic partition is replayed once, and
        one consumer checks every snapshot against its partition (a TB service taking hundreds of
        partitions made two consumers and a replay per partition, seconds per dozen). Reading never
        creates the snapshot topic (a reader may lack the right to, or have the name wrong): without
        it there is no snapshot."""
        partitions = list(partitions)
        if not self._existing():
            return dict.fromkeys(partitions)
        tables: dict[int, dict[bytes, StoredRecord]] = {}
        out: dict[tuple[str, int], tuple[TxnBufferState, int] | None] = {}
        reader: PartitionReader | None = None
        try:
            for topic, partition in partitions:
                snap_partition = self._partition_for(topic, partition)
                table = tables.get(snap_partition)
                if table is None:
                    table = tables[snap_partition] = replay_compacted(self._kafka, self.topic, snap_partition)
                # Whatever becomes of the head, the next write tombstones every segment key there is
                # (those of an ignored snapshot, e.g. one whose writer died before its head, too).
                self._segments_written[(topic, partition)] = _segment_indexes(table, topic, partition)
                self._taken.pop((topic, partition), None)  # set again if this one loads
                decoded = _decode(table, topic, partition, marker_secret)
                if decoded is None:
                    out[(topic, partition)] = None
                    continue
                head, aborted, taken = decoded
                scanned_to = int(head["scanned_to"])
                anchor = (int(head.get("anchor_offset", -1)), int(head.get("anchor_fingerprint", 0)))
                if reader is None:
                    reader = PartitionReader(self._kafka)
                if (
                    still_the_partition(
                        reader, topic, partition, scanned_to, anchor, self._kafka.request_timeout_ms / 1000
                    )
                    is not True
                ):
                    out[(topic, partition)] = None
                    continue
                try:
                    # Well-formed Avro can still hold what no state has (a negative TxnID, a
                    # malformed pair): a snapshot is a cache, so such a one is ignored, not trusted.
                    state = _state_of(head, aborted, topic, partition, num_tcs, marker_secret)
                except (ValueError, TypeError, KeyError) as exc:
                    log.warning("snapshot of %s/%d ignored: %s", topic, partition, exc)
                    out[(topic, partition)] = None
                    continue
                out[(topic, partition)] = (state, int(head["taken_at_ms"]))
                self._taken[(topic, partition)] = taken
        finally:
            if reader is not None:
                reader.close()
        return out

    def matches(
        self, reader: PartitionReader, topic: str, partition: int, offset: int, fingerprint: int
    ) -> bool | None:
        """Whether the partition now under this name still holds the record (``offset``,
        ``fingerprint``) a fold read: the TB service asks before each snapshot. None: unknown (the
        broker did not answer), which is no sign of a recreated topic."""
        return still_the_partition(
            reader, topic, partition, offset + 1, (offset, fingerprint), self._kafka.request_timeout_ms / 1000
        )

    def close(self) -> None:
        if self._owns_appender and self._appender is not None:
            self._appender.close()
            self._appender = None


def _segment_indexes(table: dict[bytes, StoredRecord], topic: str, partition: int) -> set[int]:
    """The segment indexes among the live keys of ``topic[partition]`` (only those: a stray key such
    as ``.../seg/99999999999`` must not make a write tombstone every index below it)."""
    prefix = f"{topic}/{partition}/seg/".encode()
    indexes = (key[len(prefix) :] for key in table if key.startswith(prefix))
    return {int(i) for i in indexes if i.isdigit()}


class _SegmentWriter:
    """Appends one snapshot's records: segments keyed ``<base>/seg/<i>``, then the head."""

    def __init__(self, app: Appender, topic: str, partition: int, state: TxnBufferState) -> None:
        self._app = app
        self._topic = topic
        self._partition = partition
        self._base = f"{state.topic}/{state.partition}"
        self._secret = state.marker_secret
        self.snapshot_id = uuid.uuid4().hex
        self._segments: list[Future[int]] = []
        self.indexes: set[int] = set()  # the keys segments were appended to

    def _append(self, key: bytes, value: bytes | None) -> Future[int]:
        headers = _signed(self._secret, key, value) if value is not None else None
        return self._app.append(self._topic, self._partition, value, key=key, headers=headers)

    def append(self, kind: RecordKind, index: int, **sets: list[Any]) -> None:
        value = kind.encode({"snapshot_id": self.snapshot_id, "index": index, **sets})
        self.indexes.add(index)
        self._segments.append(self._append(f"{self._base}/seg/{index}".encode(), value))

    def wait_segments(self, timeout: float) -> None:
        """Until every segment is stored; raises the first failure (a head must never be written for
        segments that are not there: it would replace the last good snapshot with one that never
        loads)."""
        for fut in self._segments:
            try:
                fut.result(timeout)
            except TimeoutError:
                raise BrokerUnavailableError.no_answer(
                    f"snapshot segments of {self._base}", timeout
                ) from None

    def tombstone(self, index: int) -> Future[int]:
        return self._append(f"{self._base}/seg/{index}".encode(), None)

    def head(self, value: bytes) -> Future[int]:
        return self._append(self._base.encode(), value)


def _segments(
    table: dict[bytes, StoredRecord],
    base: str,
    refs: list[tuple[int, str]],
    marker_secret: bytes | None,
    kind: RecordKind,
) -> list[dict[str, Any]] | None:
    """The head's segments of ``kind`` at ``refs`` (key index, snapshot_id), decoded; None (logged) if
    one is missing, not authentic, or of another snapshot. Decoding errors propagate (``_decode``
    ignores the snapshot)."""
    out = []
    for index, snapshot_id in refs:
        rec = table.get(f"{base}/seg/{index}".encode())
        if rec is None:
            log.warning("snapshot of %s misses segment %d; ignoring it", base, index)
            return None
        if not _authentic(rec, marker_secret):
            log.warning("snapshot of %s: segment %d failed authentication; ignoring it", base, index)
            return None
        seg = REGISTRY.decode_as(kind, rec.value)
        if seg["snapshot_id"] != snapshot_id or int(seg["index"]) != index:
            log.warning("snapshot of %s has a segment of another snapshot at %d; ignoring it", base, index)
            return None
        out.append(seg)
    return out


def _segment_refs(head: dict[str, Any], stored: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The (key index, snapshot_id) of the head's aborted segments and of its state segments.
    ``stored``: how many records the snapshot table holds (each segment is one of them)."""
    aborted, states = int(head["aborted_segments"]), int(head.get("state_segments", 0))
    if aborted < 0 or states < 0:
        raise ValueError(f"negative segment count ({aborted}, {states})")
    if aborted + states > stored:  # before any allocation by a count a forged head may give
        raise ValueError(f"{aborted} + {states} segments, but only {stored} snapshot records")
    listed = head.get("segment_refs")
    if listed is None:  # versions 1-3: the head's own segments at 0, 1, 2, ...
        own = [(i, str(head["snapshot_id"])) for i in range(aborted + states)]
    else:
        own = [(int(r["index"]), str(r["snapshot_id"])) for r in listed]
        if len(own) != aborted + states:
            raise ValueError(f"{len(own)} segment refs for {aborted} + {states} segments")
    return own[:aborted], own[aborted:]


def _decode(
    table: dict[bytes, StoredRecord], topic: str, partition: int, marker_secret: bytes | None = None
) -> tuple[dict[str, Any], dict[TxnID, int], dict[str, list[StoredSegment]]] | None:
    """The snapshot head of ``topic[partition]``, its whole aborted set (segments joined) and its
    aborted and ended segments as stored (by set name), or None if there is none or it is
    incomplete, unreadable, of another partition or (with ``marker_secret``) not authentic."""
    base = f"{topic}/{partition}"
    head_rec = table.get(base.encode())
    if head_rec is None:
        return None
    if not _authentic(head_rec, marker_secret):
        log.warning(
            "snapshot of %s failed authentication (forged, or written without the secret); ignored", base
        )
        return None
    try:
        head = REGISTRY.decode_as(TB_SNAPSHOT, head_rec.value)
        if head["topic"] != topic or int(head["partition"]) != partition:
            log.warning("snapshot under %s is of %s/%s; ignoring it", base, head["topic"], head["partition"])
            return None
        aborted = _from_txn_offsets(head["aborted"])
        aborted_refs, state_refs = _segment_refs(head, len(table))
        segments = _segments(table, base, aborted_refs, marker_secret, TB_ABORTED_SEGMENT)
        if segments is None:
            return None
        stored: list[StoredSegment] = []
        for (index, snapshot_id), seg in zip(aborted_refs, segments, strict=True):
            entries = _from_txn_offsets(seg["aborted"])
            aborted.update(entries)
            stored.append(StoredSegment(index, snapshot_id, entries))
        segments = _segments(table, base, state_refs, marker_secret, TB_STATE_SEGMENT)
        if segments is None:
            return None
        ended: list[StoredSegment] = []  # the chunks of ``ended`` alone (the others are never taken over)
        for (index, snapshot_id), seg in zip(state_refs, segments, strict=True):
            for name in _STATE_SETS:  # in order: the discarded ranges stay sorted
                head[name].extend(seg[name])
            if seg["ended"] and not seg["ongoing"] and not seg["discarded"]:
                ended.append(StoredSegment(index, snapshot_id, _from_ended(seg["ended"])))
        # Each set's distinct entries held in segments: a txn in two segments makes the segments
        # hold more, and the next write (which counts what they hold) takes none of them over.
        distinct = {
            "aborted": len(aborted) - len(head["aborted"]),
            "ended": len({(e["most"], e["least"]) for e in head["ended"]}),
        }
        taken = {
            name: segs if sum(len(s.entries) for s in segs) <= distinct[name] else []
            for name, segs in (("aborted", stored), ("ended", ended))
        }
    except (CodecError, ValueError, TypeError, KeyError) as exc:  # InvalidTxnID is a ValueError
        log.warning("unreadable snapshot of %s ignored: %s", base, exc)
        return None
    return head, aborted, taken


def _state_of(
    head: dict[str, Any],
    aborted: dict[TxnID, int],
    topic: str,
    partition: int,
    num_tcs: int,
    marker_secret: bytes | None,
) -> TxnBufferState:
    state = TxnBufferState(topic, partition, num_tcs=num_tcs, marker_secret=marker_secret)
    state.scanned_to = int(head["scanned_to"])
    if state.scanned_to < 0:
        raise ValueError(f"scanned_to {state.scanned_to} is negative")
    state.set_anchor(int(head.get("anchor_offset", -1)), int(head.get("anchor_fingerprint", 0)))
    for t, o in _from_txn_offsets(head["ongoing"]).items():
        state.ongoing[t] = o
        state._oldest.append((o, t))
    state._oldest.sort()
    state.aborted = aborted
    state.ended = _from_ended(head["ended"])
    state.lwm = {int(k): int(v) for k, v in head["lwm"].items()}
    state.discarded = [[int(a), int(b)] for a, b in head["discarded"]]
    counters = BufferCounters()
    for name, value in head["counters"].items():
        if hasattr(counters, name):
            setattr(counters, name, int(value))
    state.counters = counters
    armed = head["counters"].get(_TXN_AUTH_FROM)
    if state.txn_auth_from == 0 and armed != 0:
        # This reader checks openings from the partition's start; the snapshot was folded accepting
        # unsigned ones (an earlier build, or unsigned_txn_history): a forged one may be among its
        # open transactions. Not trusted: the partition is folded from its start instead.
        raise ValueError("folded without checking every transaction's opening message")
    state.txn_auth_from = int(armed) if armed is not None else None
    return state


# Where a snapshot keeps ``txn_auth_from`` (when set): in its counters map, which builds before
# session 38 load without it (they take only the counters they know), so no new schema version.
_TXN_AUTH_FROM = "txn_auth_from"


def _counters_of(state: TxnBufferState) -> dict[str, int]:
    counters = state.counters.as_dict()
    if state.txn_auth_from is not None:
        counters[_TXN_AUTH_FROM] = state.txn_auth_from
    return counters


_SEGMENT_BYTES = 100 * 1024 * 1024


def still_the_partition(
    reader: PartitionReader,
    topic: str,
    partition: int,
    scanned_to: int,
    anchor: tuple[int, int],
    timeout: float,
    what: str = "snapshot",
) -> bool | None:
    """Whether the partition is still the one a state (a snapshot, or a state kept in memory) was
    folded from (None: could not tell, the broker did not answer; a loader then ignores the
    snapshot). A topic deleted and created again under its name starts at offset 0 again: its
    partition is shorter than what the state scanned, or holds another record at the state's anchor.
    Trusting the old state would skip the new records below ``scanned_to`` (open transactions
    included)."""
    base = f"{what} of {topic}/{partition}"
    try:
        low, high = reader.watermarks(topic, partition)
        if high < scanned_to:
            log.warning(
                "%s scanned to %d but the partition ends at %d (deleted and created again?); not trusted",
                base,
                scanned_to,
                high,
            )
            return False
        offset, fingerprint = anchor
        if offset < low:  # no anchor (a v1 snapshot, or nothing folded in), or retention removed it
            return True
        rec = _record_at(reader, topic, partition, offset, timeout)
    except StoreError as exc:
        log.warning("%s not checked against the partition (%s)", base, exc)
        return None
    if rec is None:
        # Retention is handled above, and data topics are not compacted: no record at the
        # anchor (e.g. a Kafka transaction's control record of a topic created again under the
        # name) cannot be told from another partition, so the snapshot is not trusted.
        log.warning(
            "%s: no record at its anchor offset %d (deleted and created again?); not trusted",
            base,
            offset,
        )
        return False
    if record_fingerprint(rec.headers, rec.value) != fingerprint:
        log.warning(
            "%s: another record at its anchor offset %d (deleted and created again?); not trusted",
            base,
            offset,
        )
        return False
    return True


def _record_at(
    reader: PartitionReader, topic: str, partition: int, offset: int, timeout: float
) -> StoredRecord | None:
    """The record at ``offset``; None if there is none (compaction removed it)."""
    reader.assign({(topic, partition): offset})
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in reader.poll_batch(1, 0.2):
                return rec if rec.offset == offset else None
            if reader.at_eof(topic, partition):
                return None
        raise BrokerUnavailableError(f"no answer reading {topic}[{partition}]@{offset} in {timeout:g} s")
    finally:
        # The TB service keeps its probe reader open between snapshots: a partition left assigned
        # would be fetched at its end for good (session 22: ~40% of a core, and as much in the broker).
        reader.unassign()
