"""Ranged and tailing reads of partitions, end offsets, and compacted-topic replay."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from kafka_store._clients import kafka_error_of, make_client, poll_ready
from kafka_store.config import KafkaConfig
from kafka_store.errors import BrokerUnavailableError, StoreError, TopicNotFoundError
from kafka_store.producer import translate_kafka_error

log = logging.getLogger(__name__)

BEGINNING = OFFSET_BEGINNING

MAX_RESPONSE_BYTES = 2_147_483_647
# Once a partition's prefetch queue is over librdkafka's thresholds (queued.min.messages,
# queued.max.messages.kbytes), its next fetch is put off by fetch.queue.backoff.ms, 1 s by default.
# A reader that drains its queue in milliseconds then sits idle for the rest of that second: with a
# backlog in 3 partitions, one partition's records came ~0.9 s after the others'. The check it repeats
# is local (no request).
FETCH_QUEUE_BACKOFF_MS = 10
_POLL_SLICE_S = 0.01  # an idle-gated reader polls in slices this long, to notice when it is caught up
_OPEN_WINDOW_S = 0.01  # at most this long, a call that opens the idle gate polls for it to close again


class StoredRecord(NamedTuple):
    """One Kafka record as read back (a tuple: cheap to build on hot read paths)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]
    """A tuple of (name, value) pairs: tuples of str and bytes only can leave the garbage collector's
    tracking after a few young passes (a list never does; nor does the record itself, a tuple
    subclass)."""
    timestamp_ms: int

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


_NO_HEADERS: Sequence[tuple[str, bytes]] = ()


_new_tuple = tuple.__new__  # builds a StoredRecord without the namedtuple's Python-level __new__


def _last_offsets(
    items: list[Any], records: bool, assigned: dict[tuple[str, int], None]
) -> dict[tuple[str, int], int]:
    """The offset of each partition's last item in ``items`` (client messages, or ``StoredRecord``s
    with ``records``). Items come in offset order per partition: walked from the end, the walk stops
    once every partition in ``assigned`` has been seen, so it looks at a few items, not every one."""
    out: dict[tuple[str, int], int] = {}
    left = len(assigned)
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        if records:
            tp, offset = (item[0], item[1]), item[2]
        else:
            tp, offset = (item.topic() or "", item.partition() or 0), item.offset() or 0
        if tp in out:
            continue
        out[tp] = offset
        if tp in assigned:
            left -= 1
            if not left:
                break
    return out


class PartitionReader:
    """An assign-only consumer (no group membership, never commits) for ranged and tailing reads."""

    def __init__(
        self,
        config: KafkaConfig,
        *,
        fetch_wait_ms: int = 10,
        idle_backoff_ms: int = 0,
        extra: dict[str, Any] | None = None,
    ):
        """``idle_backoff_ms`` > 0: a tailing reader whose polls come back empty pauses its
        partitions and fetches again only after that long (see ``KafkaConfig.idle_fetch_backoff_ms``).
        Only for readers whose owner does not pause and resume partitions itself."""
        conf: dict[str, Any] = config.client_conf()
        conf.update(
            {
                "group.id": f"{config.client_id}-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": fetch_wait_ms,
                "fetch.min.bytes": 1,
                "auto.offset.reset": "earliest",
                # Brokers that ignore fetch.max.bytes answer with the whole partition at once; without
                # this librdkafka rejects responses over 100 MB and retries forever (docs/broker-quirks.md).
                "receive.message.max.bytes": MAX_RESPONSE_BYTES,
                "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            }
        )
        conf.update(extra or {})
        self._conf = conf
        self._timeout = config.request_timeout_ms / 1000
        self._consumer: Consumer | None = None
        self._eof: dict[tuple[str, int], int] = {}
        self._idle_backoff = idle_backoff_ms / 1000
        self._idle_since: float | None = None  # partitions paused by the idle gate since then
        self._eof_seen: dict[tuple[str, int], int] = {}  # end-of-partition events since the gate opened
        self._next: dict[tuple[str, int], int] = {}  # the gate's record of where reading goes on
        # The assignment as this reader made it: asking the client (``assignment()``) is a round trip
        # to its main thread (~9 us when that thread is idle, more when busy), and the idle gate
        # needs it at every poll.
        self._assigned: dict[tuple[str, int], None] = {}
        self._make_lock = threading.Lock()

    @property
    def consumer(self) -> Consumer:
        consumer = self._consumer
        if consumer is None:
            with self._make_lock:  # two threads' first uses must not make two clients
                if self._consumer is None:
                    self._consumer = make_client(Consumer, self._conf, "Kafka consumer")
                consumer = self._consumer
        return consumer

    def assign(self, positions: dict[tuple[str, int], int]) -> None:
        tps = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        self.consumer.assign(tps)
        self._assigned = dict.fromkeys(positions)
        # librdkafka keeps a partition's pause flag across unassign and assign: one paused by the idle
        # gate before would stay paused for good.
        self.consumer.resume(tps)
        self._eof.clear()
        self._idle_since = None  # a fresh assignment fetches at once
        self._eof_seen.clear()
        self._next = dict(positions)

    def add(self, topic: str, partition: int, offset: int) -> None:
        try:
            self.consumer.incremental_assign([TopicPartition(topic, partition, offset)])
        except KafkaException as exc:  # e.g. assigned already
            raise _translate(exc, f"assignment of {topic}[{partition}]") from None
        self._assigned[(topic, partition)] = None
        self._eof.pop((topic, partition), None)
        self._next[(topic, partition)] = offset
        if self._idle_since is not None:
            self.pause([(topic, partition)])  # joins the idle gate's state; resumed with the others
        else:
            # librdkafka keeps the pause flag across unassign and assign: a partition removed while
            # the gate was closed would come back paused, and be fetched never again.
            self.resume([(topic, partition)])

    def unassign(self) -> None:
        """Stop fetching everything. An assigned partition stays fetched whether or not anyone
        polls, and at its end on a broker that answers empty fetches at once that is a busy loop."""
        if self._consumer is not None:
            self._consumer.unassign()
        self._assigned.clear()
        self._eof.clear()
        self._eof_seen.clear()
        self._next.clear()

    def remove(self, topic: str, partition: int) -> None:
        try:
            self.consumer.incremental_unassign([TopicPartition(topic, partition)])
        except KafkaException as exc:  # e.g. not assigned
            raise _translate(exc, f"unassignment of {topic}[{partition}]") from None
        self._assigned.pop((topic, partition), None)
        self._next.pop((topic, partition), None)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read ``topic[partition]`` from ``offset`` next (the partition must be assigned)."""
        try:
            self.consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as exc:
            raise _translate(exc, f"seek of {topic}[{partition}] to {offset}") from None
        self._next[(topic, partition)] = offset
        self._eof.pop((topic, partition), None)

    def pause(self, partitions: list[tuple[str, int]]) -> None:
        """Stop fetching these partitions (an idle consumer would otherwise poll the broker)."""
        if partitions:
            self.consumer.pause([TopicPartition(t, p) for t, p in partitions])

    def resume(self, partitions: list[tuple[str, int]]) -> None:
        if partitions:
            self.consumer.resume([TopicPartition(t, p) for t, p in partitions])

    def at_eof(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._eof

    def rearm_ends(self, partitions: list[tuple[str, int]]) -> None:
        """Have these partitions report their end anew: librdkafka reports an end once per arrival
        there, so a partition that got nothing new since would never report it again. Each is sought
        to where it reads next as this reader keeps it (nothing skipped or read twice: not the
        client's position, see ``_on_error``), and ``at_eof`` holds again only once a fetch made
        after this call has reached the end."""
        for topic, partition in partitions:
            offset = self._next.get((topic, partition), OFFSET_INVALID)
            if offset >= 0 or offset == OFFSET_BEGINNING:  # the beginning is sought again as such
                self.seek(topic, partition, offset)

    def eof_offset(self, topic: str, partition: int) -> int | None:
        """The end offset seen when the reader last reached the end of the partition (None if not)."""
        return self._eof.get((topic, partition))

    def poll_batch(self, max_records: int = 1000, timeout: float = 0.1) -> list[StoredRecord]:
        """Records in offset order per partition; empty on timeout. Records end-of-partition events."""
        return self._poll_messages(max_records, timeout, True)

    def poll_messages(self, max_records: int = 1000, timeout: float = 0.1) -> list[Any]:
        """Like ``poll_batch`` but the client's own message objects (``offset()``, ``key()``,
        ``value()``, ``headers()``, ``timestamp()``), for bulk readers that build columns without a
        record object per message (the Spark source). Errors are handled as in ``poll_batch``."""
        return self._poll_messages(max_records, timeout, False)

    def _poll_messages(self, max_records: int, timeout: float, records: bool) -> list[Any]:
        """Client messages, or (``records``) ``StoredRecord``s."""
        if not self._idle_backoff:
            out = self._poll_now(max_records, timeout, records)
            if out:  # where reading goes on (rearm_ends): not the client's position (see _on_error)
                self._note_next(out, records)
            return out
        # The idle gate: fetch in short open windows, paused in between while nothing arrives.
        deadline = time.monotonic() + timeout
        wait_until = deadline
        settling = False  # this call opened the gate: poll on until it can close again
        got: list[Any] = []
        while True:
            now = time.monotonic()
            if self._idle_since is not None:
                reopen = self._idle_since + self._idle_backoff
                if reopen > deadline:
                    if deadline > now:
                        time.sleep(deadline - now)
                    return []
                if reopen > now:
                    time.sleep(reopen - now)
                self._set_idle_gate(False)
                # Poll on briefly (even for a caller that does not wait) so the ends reported by the
                # fetch after the seek can close the gate in this call: an open gate fetches without
                # pause on a broker that answers empty fetches at once, until the caller polls again.
                settling = True
                wait_until = max(deadline, time.monotonic() + _OPEN_WINDOW_S)
            out = self._poll_now(
                max_records - len(got), min(max(wait_until - time.monotonic(), 0.0), _POLL_SLICE_S), records
            )
            self._note_next(out, records)
            got.extend(out)
            # Pause once every partition has reported, since the gate opened, an end we have consumed
            # up to: then nothing fetched can be waiting, however slow the broker is. Checked after
            # records too: a reader that gets a few new records at every poll must still pause.
            assignment = self._assigned
            if assignment and all(
                tp in self._eof_seen and self._eof_seen[tp] <= self._next.get(tp, -1) for tp in assignment
            ):
                self._set_idle_gate(True)
                if got:
                    return got
            if (got and not settling) or len(got) >= max_records or time.monotonic() >= wait_until:
                return got

    def _note_next(self, out: list[Any], records: bool) -> None:
        for tp, offset in _last_offsets(out, records, self._assigned).items():
            self._next[tp] = max(self._next.get(tp, 0), offset + 1)  # never back below an end reached

    @property
    def idle_gate_closed(self) -> bool:
        """True while the idle gate keeps the partitions paused (only with ``idle_backoff_ms``)."""
        return self._idle_since is not None

    def _set_idle_gate(self, closed: bool) -> None:
        assignment = list(self._assigned)
        if closed:
            self.pause(assignment)
            self._idle_since = time.monotonic()
        else:
            # Pausing drops what was fetched but not consumed, and resuming fetches on from where
            # the fetcher was: seek back to what we consumed up to, so nothing is skipped.
            self.resume(assignment)
            seek = [TopicPartition(t, p, self._next[(t, p)]) for t, p in assignment if (t, p) in self._next]
            for tp in seek:
                if tp.offset != OFFSET_INVALID:  # logical ones (beginning) are sought again as such
                    self.consumer.seek(tp)
            self._idle_since = None
            self._eof_seen.clear()

    def _poll_now(self, max_records: int, timeout: float, records: bool) -> list[Any]:
        msgs = poll_ready(self.consumer, max_records, timeout)
        out: list[Any] = []
        add = out.append
        # Each client message is let go once converted: a batch of thousands kept whole while its
        # records were built outlived young collections and was promoted to the oldest generation,
        # whose growth then set off full collections (~20% of a read-committed read's CPU).
        msgs.reverse()
        take = msgs.pop
        for _ in range(len(msgs)):
            msg = take()
            if msg.error() is not None:
                self._on_error(msg)
            elif records:
                # Kept to plain loops and C calls: this runs once per record read.
                headers = msg.headers()
                if headers:
                    # A tuple, not the client's list: a tuple of tuples, str and bytes only can be
                    # untracked by the garbage collector.
                    headers = tuple(headers)
                    for _name, value in headers:
                        if value is None:  # rare (foreign producers); readers treat b"" as no value
                            headers = tuple((k, v if v is not None else b"") for k, v in headers)
                            break
                else:
                    headers = _NO_HEADERS
                add(
                    _new_tuple(
                        StoredRecord,
                        (
                            msg.topic(),
                            msg.partition(),
                            msg.offset(),
                            msg.key(),
                            msg.value(),
                            headers,
                            msg.timestamp()[1],
                        ),
                    )
                )
            else:
                add(msg)
        if out and self._eof:
            for tp, offset in _last_offsets(out, records, self._assigned).items():
                end = self._eof.get(tp)
                if end is not None and end <= offset:  # data at or past a recorded end: it is stale
                    del self._eof[tp]
        return out

    def _on_error(self, msg: Any) -> None:
        """An error event of the client's: an end of partition is recorded, the rest raised or
        logged."""
        err = msg.error()
        if err.code() == KafkaError._PARTITION_EOF:
            tp = (msg.topic() or "", msg.partition() or 0)
            end = msg.offset() or 0
            self._eof[tp] = end
            # Reading goes on from the end: offsets below it that no record was delivered for (below
            # the log start, trailing control records) must not keep the gate open for good (the end
            # event comes after the partition's records). Kept here, not read from the client:
            # librdkafka before 2.16 (#4844) puts its position one past the end once consume()
            # returns the end event, and a seek there skipped the next record written.
            self._next[tp] = max(self._next.get(tp, end), end)
            if self._idle_backoff:
                self._eof_seen[tp] = end
        elif err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
            raise TopicNotFoundError(f"read {msg.topic()}[{msg.partition()}]: {err.str()}")
        elif err.fatal():
            raise translate_kafka_error(err, "read")
        else:
            log.debug("consumer error (will retry): %s", err.str())

    def watermarks(self, topic: str, partition: int, timeout: float | None = None) -> tuple[int, int]:
        """(log start, end); ``timeout`` per attempt (default: the request timeout)."""
        wait = self._timeout if timeout is None else timeout
        for last_try in (False, True):
            try:
                low, high = self.consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=wait, cached=False
                )
            except KafkaException as exc:
                what = f"watermarks of {topic}[{partition}]"
                error = self._lookup_error(exc, topic, partition, what, wait)
                if isinstance(error, _StaleMetadata) and not last_try:
                    continue  # a partition added since this client's metadata: the listing refreshed it
                raise error from None
            return int(low), int(high)
        raise AssertionError("unreachable")  # pragma: no cover

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose record timestamp is at or after ``timestamp_ms`` (Kafka's
        ListOffsets by time); the partition's end if there is none."""
        try:
            found = self.consumer.offsets_for_times(
                [TopicPartition(topic, partition, timestamp_ms)], timeout=self._timeout
            )
        except KafkaException as exc:
            what = f"offset for time {timestamp_ms} of {topic}[{partition}]"
            raise self._lookup_error(exc, topic, partition, what) from None
        tp = found[0]
        if tp.error is not None:
            raise StoreError(f"offset for time {timestamp_ms} of {topic}[{partition}]: {tp.error}")
        return int(tp.offset) if tp.offset >= 0 else self.watermarks(topic, partition)[1]

    def _lookup_error(
        self, exc: KafkaException, topic: str, partition: int, what: str, timeout: float | None = None
    ) -> StoreError:
        """``_translate``, except that librdkafka's local "unknown partition/topic", which it also
        says when no broker has answered yet (no metadata), is checked against the cluster's topic
        list: a dead broker is not a missing topic."""
        error = _translate(exc, what)
        err = kafka_error_of(exc)
        if err is None or err.code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
            return error
        try:
            # All topics: naming one may create it.
            meta = self.consumer.list_topics(timeout=self._timeout if timeout is None else timeout)
        except KafkaException as listing:
            return BrokerUnavailableError(f"{what}: {err.str()}; the cluster did not answer ({listing})")
        found = meta.topics.get(topic)
        if found is None or found.error is not None or partition not in found.partitions:
            return error
        return _StaleMetadata(f"{what}: {err.str()} (the topic exists; its leader did not answer)")

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class _StaleMetadata(BrokerUnavailableError):
    """The cluster lists the partition this client called unknown: its metadata predated the
    partition (added since) or no broker had answered yet. Asking again may succeed."""


def _translate(exc: KafkaException, what: str) -> StoreError:
    err = kafka_error_of(exc)
    if err is None:
        return StoreError(f"{what}: {exc}")
    if err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        return BrokerUnavailableError(f"{what}: {err.str()}")
    return translate_kafka_error(err, what)


def offsets_for_time(
    config: KafkaConfig, partitions: Iterable[tuple[str, int]], timestamp_ms: int
) -> dict[tuple[str, int], int]:
    """Per partition, the first offset with a timestamp at or after ``timestamp_ms`` (else its end)."""
    reader = PartitionReader(config)
    try:
        return {tp: reader.offset_for_time(*tp, timestamp_ms) for tp in partitions}
    finally:
        reader.close()


def end_offsets(config: KafkaConfig, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    return {tp: high for tp, (_low, high) in watermark_offsets(config, partitions).items()}


def watermark_offsets(
    config: KafkaConfig, partitions: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, int]]:
    """Per partition, (log start, end): retention or DeleteRecords moves the start up."""
    reader = PartitionReader(config)
    try:
        return {tp: reader.watermarks(*tp) for tp in partitions}
    finally:
        reader.close()


def read_range(
    config: KafkaConfig,
    topic: str,
    partition: int,
    start: int = 0,
    end: int | None = None,
    *,
    batch: int = 2000,
    timeout: float = 30.0,
) -> Iterator[StoredRecord]:
    """Records with ``start <= offset < end`` (``end`` defaults to the end offset at call time).

    Compaction leaves gaps in offsets; reading stops at ``end`` or at the partition's end,
    whichever comes first, so a gap never causes a hang. Raises ``BrokerUnavailableError`` if no
    progress is made for ``timeout`` seconds.
    """
    reader = PartitionReader(config)
    try:
        low, high = reader.watermarks(topic, partition)
        stop = high if end is None else min(end, high)
        if max(start, low) >= stop:
            return
        reader.assign({(topic, partition): max(start, low)})
        last_progress = time.monotonic()
        while True:
            records = reader.poll_batch(batch, 0.2)
            for rec in records:
                if rec.offset >= stop:
                    return
                yield rec
                if rec.offset + 1 >= stop:
                    return
            if records:
                last_progress = time.monotonic()
            elif reader.at_eof(topic, partition):
                return
            elif time.monotonic() - last_progress > timeout:
                raise BrokerUnavailableError(f"no progress reading {topic}[{partition}] for {timeout}s")
    finally:
        reader.close()


def replay_compacted(
    config: KafkaConfig, topic: str, partition: int, *, timeout: float = 30.0
) -> dict[bytes, StoredRecord]:
    """The topic partition as a table: the latest record per key, tombstoned keys removed."""
    table: dict[bytes, StoredRecord] = {}
    for rec in read_range(config, topic, partition, 0, None, timeout=timeout):
        if rec.key is None:
            continue
        if rec.value is None:
            table.pop(rec.key, None)
        else:
            table[rec.key] = rec
    return table
