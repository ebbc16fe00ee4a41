"""Driver side: which partitions, which offset ranges, and the TB facts each range needs.

A range ``[start, end)`` of a partition never ends past the partition's ``maxReadPosition``, computed
by ``pulsar_txn.buffer`` (latest snapshot + scan of the tail, ``load_state`` / ``scan``). Below
``maxReadPosition`` every transaction has ended, so the visibility of each record there is final: the
executor only needs the partition's aborted TxnIDs (pruned to the log-start offset) and the discarded
offset ranges that meet ``[start, end)``; both ship inside the input partition.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from kafka_store import (
    ClientConfigError,
    KafkaConfig,
    PartitionReader,
    StoreError,
    TopicAdmin,
    TopicNotFoundError,
)
from pulsar_txn.buffer.reader import (
    UNKNOWN_NUM_TCS,
    BufferOptions,
    discover_num_tcs,
    end_held,
    load_state,
    scan,
)
from pulsar_txn.buffer.snapshot import SnapshotStore, still_the_partition
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.errors import ConfigError, DataLossError, PulsarTxnError, TopicNotFound, from_store_error
from pulsar_txn.naming import is_data_topic
from spark._options import EARLIEST, LATEST, OffsetSpec, SourceOptions, TopicPartition, parse_assign

log = logging.getLogger(__name__)
_SAME_CHECK_EVERY_S = 30.0  # a kept TB state whose partition's end has not moved is checked this often
_LOOKUP_EVERY_S = (
    5.0  # at most this often per partition: a TC log lookup for transactions held below the log start
)


class RangePartition(InputPartition):
    """One Spark task: records ``[start, end)`` of one Kafka partition (picklable)."""

    def __init__(
        self,
        options: SourceOptions,
        topic: str,
        partition: int,
        start: int,
        end: int,
        aborted: list[bytes],
        discarded: list[list[int]],
        anchor: tuple[int, int, int] | None = None,
    ) -> None:
        super().__init__((topic, partition, start, end))
        self.options = options
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.aborted = aborted  # 16-byte TxnIDs of the partition's aborted txns
        self.discarded = discarded  # never-delivered offset ranges [first, last] meeting the range
        # (scanned_to, offset, fingerprint) of the state these facts come from: the task checks the
        # partition is still that one (not deleted and created again since planning).
        self.anchor = anchor


def resolve_partitions(
    opts: SourceOptions, kafka: KafkaConfig, *, skip_missing: bool = False
) -> list[TopicPartition]:
    """The topic-partitions named by subscribe / subscribePattern / assign, sorted. A ``subscribe``
    topic that does not exist is ``TopicNotFound``, or (``skip_missing``: a running stream, whose
    caller reports the partitions gone) left out."""
    kind, value = opts.subscription
    admin = TopicAdmin(kafka)
    try:
        if kind == "assign":  # a partition or topic named twice is read once, as Spark's Kafka source
            return sorted(set(parse_assign(value)))
        if kind == "subscribe":
            topics = [t.strip() for t in value.split(",") if t.strip()]
        else:
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise ConfigError(f"option subscribePattern={value!r}: {exc}") from None
            topics = [t for t in admin.list_topics() if pattern.fullmatch(t) and is_data_topic(t)]
        out: set[TopicPartition] = set()
        for topic in dict.fromkeys(topics):
            try:
                count = admin.partition_count(topic)
            except TopicNotFoundError:
                if not skip_missing:
                    raise
                continue
            out.update((topic, p) for p in range(count))
        return sorted(out)
    except StoreError as exc:
        raise _typed(exc) from None


def _typed(exc: StoreError) -> PulsarTxnError:
    """The application-facing error for a storage error while planning (a bad ``kafka.*`` option
    names the options; a missing topic is ``TopicNotFound``)."""
    if isinstance(exc, TopicNotFoundError):
        return TopicNotFound(str(exc))
    return from_store_error(exc, "kafka.* options" if isinstance(exc, ClientConfigError) else "")


def watermarks(
    kafka: KafkaConfig, tps: list[TopicPartition], reader: PartitionReader | None = None
) -> dict[TopicPartition, tuple[int, int]]:
    """(log-start offset, end offset) of each partition."""
    own = reader is None
    try:
        reader = reader or PartitionReader(kafka)
        try:
            return {tp: reader.watermarks(*tp) for tp in tps}
        finally:
            if own:
                reader.close()
    except StoreError as exc:  # a dead broker is ConnectError (retriable), a missing topic not
        raise _typed(exc) from None


@dataclass
class Bounds:
    low: int  # log-start offset
    limit: int  # maxReadPosition (or the end offset when the transaction filter is off)
    end: int  # end offset (high watermark)


class Planner:
    """Per-partition TB states, loaded once and advanced by scanning at each planning call."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.kafka = opts.kafka_config()
        self._buffer_options: BufferOptions | None = None  # the TC count is learnt on first use
        self._tcs_known = False
        self._store = (
            SnapshotStore(self.kafka, topic=opts.snapshot_topic)
            if opts.transaction_filter and opts.snapshot_topic
            else None
        )
        self.states: dict[TopicPartition, TxnBufferState] = {}
        self._reader: PartitionReader | None = None
        self._next_lookup: dict[TopicPartition, float] = {}  # held_below's TC lookups, rate-limited
        self._same_checked: dict[TopicPartition, tuple[int, float]] = {}  # end seen, next check due

    def _buffer(self) -> BufferOptions:
        """Fold options with the cluster's TC count: unknown (every TxnID taken as real) until the
        transaction log exists."""
        if self._buffer_options is None:
            num_tcs = self.opts.num_tcs or discover_num_tcs(self.kafka, self.opts.log_topic)
            self._tcs_known = num_tcs is not None
            self._buffer_options = BufferOptions(
                num_tcs=num_tcs or UNKNOWN_NUM_TCS, marker_secret=self.opts.marker_secret
            )
        return self._buffer_options

    def _learn_tc_count(self) -> None:
        """Once per planning call while the TC count is unknown: ask again, and once the log exists,
        drop the states folded without it (loaded again as the TB service folds them: records naming
        a TC beyond the count are discarded, not held open)."""
        if self._buffer_options is not None and not self._tcs_known:
            self._buffer_options = None
            if self._buffer().num_tcs != UNKNOWN_NUM_TCS:
                self.states.clear()

    def partitions(self, *, skip_missing: bool = False) -> list[TopicPartition]:
        return resolve_partitions(self.opts, self.kafka, skip_missing=skip_missing)

    def state(
        self, tp: TopicPartition, at_least: int | None = None, end: int | None = None
    ) -> TxnBufferState:
        """The TB state of ``tp`` scanned to ``end`` (default: the end offset now); a cached state that
        already covers ``at_least`` is reused as it is."""
        state = self.states.get(tp)
        try:
            if state is None:
                state, _ = load_state(self.kafka, *tp, store=self._store, options=self._buffer(), end=end)
                self.states[tp] = state
            elif (at_least is None or state.scanned_to < at_least) and (
                end is None or state.scanned_to < end
            ):
                scan(state, self.kafka, end)
        except StoreError as exc:
            raise _typed(exc) from None
        return state

    def watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        if self._reader is None:
            self._reader = PartitionReader(self.kafka)  # kept: planning calls come every micro-batch
        return watermarks(self.kafka, tps, self._reader)

    def bounds(self, tps: list[TopicPartition]) -> dict[TopicPartition, Bounds]:
        """Log-start offset and read limit (maxReadPosition) of each partition, now."""
        marks = self.watermarks(tps)
        if not self.opts.transaction_filter:
            return {tp: Bounds(low, high, high) for tp, (low, high) in marks.items()}
        self._learn_tc_count()
        out = {}
        for tp, (low, high) in marks.items():
            kept = self.states.get(tp)
            if kept is not None and not self._same_partition(tp, kept, high):
                del self.states[tp]  # loaded again from the partition now under the name
            state = self.state(tp, end=high)  # scans only what was appended since the last call
            if low > 0:
                state.prune(low)
                self._end_deleted(tp, state, low)
            out[tp] = Bounds(low, state.max_read_position, high)
        return out

    def _same_partition(self, tp: TopicPartition, state: TxnBufferState, high: int) -> bool:
        """Whether ``tp`` is still the partition ``state`` (kept from an earlier planning call) was
        folded from. A topic deleted and created again under its name restarts at offset 0: scanning
        the kept state on would skip the new records below its ``scanned_to``, the first message of
        an open transaction among them, and deliver what that transaction holds back. A stream's
        offsets past that point are of the old partition too: with ``failOnDataLoss`` that is a
        ``DataLossError``; without, the state is loaded again and the stream goes on from its offsets
        (the new partition's records below them are not read).

        The check reads the record at the state's anchor: done when the partition's end moved since
        the last check (the scan that follows reads there anyway), else at most every
        ``_SAME_CHECK_EVERY_S``; a partition that ends below what the state scanned fails it at once."""
        last = self._same_checked.get(tp)
        now = time.monotonic()
        if high >= state.scanned_to and last is not None and last[0] == high and now < last[1]:
            return True
        self._same_checked[tp] = (high, now + _SAME_CHECK_EVERY_S)
        if self._reader is None:
            self._reader = PartitionReader(self.kafka)
        timeout = self.kafka.request_timeout_ms / 1000
        same = still_the_partition(
            self._reader, *tp, state.scanned_to, state.anchor(), timeout, what="kept TB state"
        )
        if same is not False:
            return True  # None: the broker did not answer; the scan that follows reports it
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{tp[0]}[{tp[1]}] was deleted and created again while the query read it: records of "
                "the old partition may be lost, and the new one's below the query's offsets are not "
                "read (set failOnDataLoss=false to go on)"
            )
        log.warning("%s[%d] was deleted and created again; its TB state is loaded again", *tp)
        return False

    def _end_deleted(self, tp: TopicPartition, state: TxnBufferState, low: int) -> None:
        """A transaction open here whose first message retention deleted may have had its marker
        deleted too, unread: it would hold the stream back for ever. Its TC knows (looked up at most
        every ``_LOOKUP_EVERY_S`` per partition, while there is such a transaction)."""
        held = state.held_below(low)
        now = time.monotonic()
        if not held or now < self._next_lookup.get(tp, 0.0):
            return
        self._next_lookup[tp] = now + _LOOKUP_EVERY_S

        def fold_to_end() -> bool:
            try:
                scan(state, self.kafka, self.watermarks([tp])[tp][1])
            except StoreError as exc:
                raise _typed(exc) from None
            return True

        end_held(self.kafka, self.opts.log_topic, state, held, low, fold_to_end)

    def resolve(self, spec: OffsetSpec, bounds: dict[TopicPartition, Bounds]) -> dict[TopicPartition, int]:
        """Offsets per partition from ``earliest`` / ``latest`` / per-partition JSON, which must name
        every partition read, as Spark's Kafka source requires."""
        if isinstance(spec, dict):
            missing = sorted(set(bounds) - set(spec))
            if missing:
                raise ConfigError(
                    f"offsets JSON must name every partition read; missing {missing} "
                    "(use -2 for earliest, -1 for latest)"
                )
        out = {}
        for tp, b in bounds.items():
            if spec == "earliest":
                want = EARLIEST
            elif spec == "latest":
                want = LATEST
            else:
                assert isinstance(spec, dict)
                want = spec[tp]
            out[tp] = b.low if want == EARLIEST else b.limit if want == LATEST else want
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - set(bounds))
            if unknown:
                raise ConfigError(f"offsets given for partitions that are not read: {unknown}")
        return out

    def went_back(self, tp: TopicPartition, offset: int, now_at: int, what: str) -> None:
        """``tp``'s ``what`` is ``now_at``, below the query's ``offset``. Neither a partition's end
        offset nor its maxReadPosition ever goes back, so the partition was replaced (the topic deleted
        and created again) since the query got there: a ``DataLossError``, as Spark's Kafka source
        reports offsets that went back, or (``failOnDataLoss=false``) a warning."""
        text = (
            f"{tp[0]}[{tp[1]}]: {what} is {now_at}, below the query's offset {offset}: the topic was "
            "deleted and created again; records may have been missed"
        )
        self._lost(text, "go on", "going on from the new partition")

    def _lost(self, text: str, instead: str, then: str) -> None:
        """Records may have been missed (``text`` says how): a ``DataLossError`` naming what
        ``failOnDataLoss=false`` does (``instead``), or with it a warning of what the query does now
        (``then``)."""
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{text} (set failOnDataLoss=false to {instead})")
        log.warning("%s; %s", text, then)

    def vanished(self, tps: list[TopicPartition]) -> None:
        """A running stream's partitions ``tps`` are gone (their topic deleted): what the query had
        not read of them is lost. A ``DataLossError``, as Spark's Kafka source reports partitions
        that are gone, or (``failOnDataLoss=false``) a warning; the query reads on without them."""
        names = ", ".join(f"{t}[{p}]" for t, p in tps)
        text = f"{names}: gone (the topic was deleted); records not read yet may have been missed"
        self._lost(text, "go on", "going on without them")

    def past_end(self, tp: TopicPartition, start: int, end: int) -> int:
        """A ``startingOffsets`` offset past the partition's end offset: a ``DataLossError``, as
        Spark's Kafka source reports it once it plans there, or (``failOnDataLoss=false``) a warning
        and the end offset, where Spark's source goes on from."""
        text = f"{tp[0]}[{tp[1]}]: startingOffsets {start} is past the partition's end offset {end}"
        self._lost(text, "start at the end", "starting at the end")
        return end

    def check_start(self, tp: TopicPartition, start: int, low: int) -> int:
        """A start below the log-start offset lost records to retention: fail, or skip ahead."""
        if start >= low:
            return start
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{tp[0]}[{tp[1]}]: offsets {start}..{low - 1} were deleted before they were read "
                "(set failOnDataLoss=false to skip them)"
            )
        log.warning("%s[%d]: offsets %d..%d are gone; skipping them", tp[0], tp[1], start, low - 1)
        return low

    def batch_range(
        self,
        tp: TopicPartition,
        starts: dict[TopicPartition, int],
        ends: dict[TopicPartition, int],
        bounds: dict[TopicPartition, Bounds],
    ) -> tuple[int, int]:
        """A batch read's ``[start, end)`` of ``tp``: the end capped at maxReadPosition. An ending
        offset given in JSON below the start is a ``ConfigError``, as Spark's Kafka source fails on it
        ("beginning offset is after the ending offset"); an end capped below the start reads nothing."""
        end = min(ends[tp], bounds[tp].limit)  # never past maxReadPosition
        if ends[tp] > end:
            log.info("%s[%d]: endingOffsets %d capped at maxReadPosition %d", *tp, ends[tp], end)
        start = self.check_start(tp, starts[tp], bounds[tp].low)
        asked = self.opts.ending.get(tp) if isinstance(self.opts.ending, dict) else None
        if asked is not None and asked >= 0 and asked < start:
            raise ConfigError(f"{tp[0]}[{tp[1]}]: endingOffsets {asked} is below the starting offset {start}")
        return start, end

    def batch_ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """Each partition's ``[start, end)`` of a batch read with these options, now (``batch_range``
        for every partition read, in order)."""
        tps = self.partitions()
        bounds = self.bounds(tps)
        starts = self.resolve(self.opts.starting, bounds)
        ends = self.resolve(self.opts.ending, bounds)
        return {tp: self.batch_range(tp, starts, ends, bounds) for tp in tps}

    def range_partition(self, tp: TopicPartition, start: int, end: int) -> RangePartition:
        """The input partition for ``[start, end)``; ``end`` must not pass maxReadPosition."""
        aborted: list[bytes] = []
        discarded: list[list[int]] = []
        anchor = None
        if self.opts.transaction_filter:
            state = self.state(tp, at_least=end)
            # Every aborted txn, not only those whose abort marker is at or after ``start``: a late
            # message of an aborted txn (after its marker) is dropped through this set alone.
            aborted = sorted(t.to_bytes() for t in state.aborted)
            discarded = [list(r) for r in state.discarded if r[1] >= start and r[0] < end]
            anchor = (state.scanned_to, *state.anchor())
        return RangePartition(self.opts, tp[0], tp[1], start, end, aborted, discarded, anchor)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._store is not None:
            self._store.close()
