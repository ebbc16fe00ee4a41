"""Reader: read-committed reading of a topic from a chosen position (Pulsar's Reader)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from kafka_store import StoreError, end_offsets, offsets_for_time, read_range
from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn.buffer.reader import CommittedReader
from pulsar_txn.buffer.state import TxnBufferState
from pulsar_txn.errors import AlreadyClosed, ConfigError, InvalidTopicName, PulsarTxnError, Timeout
from pulsar_txn.message import EARLIEST, LATEST, Message, MessageId
from pulsar_txn.naming import TopicName
from pulsar_txn.schema import BytesSchema, Schema, prepare_all

_POLL_SLICE_S = 0.1
PARTITIONS_REFRESH_S = 60.0  # how often a reader of a whole topic looks for partitions added to it

if TYPE_CHECKING:
    from pulsar_txn.client import Client

log = logging.getLogger(__name__)


T = TypeVar("T")


@public_errors
class Reader(Generic[T]):
    """Reads committed messages of a topic from a position, without a subscription (Pulsar's
    Reader); made by ``Client.create_reader``."""

    def __init__(
        self,
        client: Client,
        topic: str,
        start_message_id: MessageId = EARLIEST,
        schema: Schema[T] | None = None,
        inclusive: bool = False,
    ) -> None:
        """``inclusive``: a reader started at a MessageId reads that message too (Pulsar's
        ``startMessageIdInclusive``); by default it starts after it, as in Pulsar. As in Pulsar, it
        also applies to ``LATEST`` (an inclusive reader starts at the last readable message) and to
        ``seek(message_id)``."""
        self.schema: Schema[T] = schema if schema is not None else cast("Schema[T]", BytesSchema())
        """The schema ``msg.value()`` decodes with."""
        self._client = client
        self.topic = TopicName.parse(topic)
        # Asked again, not cached: the topic may have grown since this client looked it up.
        count = client._partition_count(self.topic, refresh=self.topic.partition is None)
        parts = [self.topic.partition] if self.topic.partition is not None else list(range(count))
        self._tps = [(self.topic.kafka_topic, p) for p in parts]
        self._inclusive = inclusive
        starts: dict[tuple[str, int], int] = {}
        given = None if start_message_id in (EARLIEST, LATEST) else self._partition_of(start_message_id)
        for tp in self._tps:
            if given is None:
                starts[tp] = self._sentinel(tp, start_message_id)
            elif given == tp:
                starts[tp] = start_message_id.offset + (0 if inclusive else 1)
            else:
                starts[tp] = 0
        self._committed = CommittedReader(
            client.kafka, starts, store=client._snapshots(), options=client._buffer_options()
        )
        self._buffer: deque[Message[T]] = deque()
        self._partitions_due = time.monotonic() + PARTITIONS_REFRESH_S
        self._closed = False
        # Held by a poll in progress: close() waits for it (at most one slice, 0.1 s) rather than
        # closing the Kafka consumer under a poll in another thread.
        self._poll_lock = threading.Lock()

    def _partition_of(self, message_id: MessageId) -> tuple[str, int]:
        """The partition read here that ``message_id`` (not a sentinel) names, else ``ConfigError``
        (an id of another topic or partition used to start this reader at an unrelated position)."""
        _args.position(message_id.partition, message_id.offset, f"message id {message_id}")
        topic = message_id.topic or self.topic.kafka_topic
        if topic != self.topic.kafka_topic:
            try:  # a Pulsar name (persistent://..., e.g. from a compat id) of this topic
                topic = TopicName.parse(topic).kafka_topic
            except InvalidTopicName:
                pass  # refused below
        tp = (topic, message_id.partition)
        if tp not in self._tps:
            raise ConfigError(f"{message_id} is not a partition of {self.topic} read here")
        return tp

    def _sentinel(self, tp: tuple[str, int], position: MessageId) -> int:
        """Where ``EARLIEST`` / ``LATEST`` start reading ``tp``; an inclusive reader's ``LATEST`` is
        the last readable message (Pulsar: latest + inclusive reads the last message)."""
        if position == LATEST and self._inclusive:
            last = _last_readable(self._client, tp[0], tp[1])
            if last is not None:
                return last
        return self._client._sentinel_offset(*tp, position)

    def read_next(self, timeout_millis: int | None = None) -> Message[T]:
        """The next committed message; raises ``Timeout`` if none arrives in time (``None``: 30 s,
        as the asyncio reader)."""
        timeout = (
            _args.millis(timeout_millis, "timeout_millis") if timeout_millis is not None else 30_000
        ) / 1000
        if not self._fill(timeout):
            raise Timeout(f"no committed message on {self.topic} within {timeout}s")
        return self._buffer.popleft()

    def has_message_available(self) -> bool:
        """Whether ``read_next`` has a committed message to return: one is here already, or a
        partition's last readable message (``get_last_message_id``) lies at or after where this
        reader is. As in Pulsar, the answer compares positions, so it does not depend on how fast
        records arrive: after True, ``read_next`` returns a message (fetching it may take a moment)."""
        if self._fill(0.0):
            return True
        ends = end_offsets(self._client.kafka, self._tps)
        for tp in self._tps:
            position = self._committed.position(*tp)
            if position >= ends.get(tp, 0):
                continue  # nothing at all past us (the common, caught-up case: one request)
            # The reader's own state, if it has seen the partition to its end; else a snapshot + scan.
            state = self._committed.state(*tp)
            last = _last_readable(self._client, *tp, state if state.scanned_to >= ends[tp] else None)
            if last is not None and last >= position:
                return True
        return False

    def _fill(self, timeout: float) -> bool:
        """Whether a message is ready, waiting up to ``timeout`` for one to arrive (nothing is
        handed out: the async reader takes it only if its caller still waits)."""
        self._check_open()
        deadline = time.monotonic() + timeout
        while True:
            # Also while waiting: a long read_next() found partitions added meanwhile only once it
            # had timed out (review of session 44).
            if self.topic.partition is None and time.monotonic() >= self._partitions_due:
                self._add_new_partitions()
            if self._buffer:
                break
            # In slices: a close() from another thread ends the wait (AlreadyClosed), as a
            # consumer's close ends a receive, instead of leaving it until its timeout.
            remaining = deadline - time.monotonic()
            with self._poll_lock:
                self._check_open()
                records = self._committed.poll(max(0.0, min(remaining, _POLL_SLICE_S)))
            received = [Message.from_record(r, schema=self.schema) for r in records]
            prepare_all(self.schema, received)
            self._buffer.extend(received)
            if remaining <= 0:
                break
        return bool(self._buffer)

    def _add_new_partitions(self) -> None:
        """Read partitions added to the topic since (as Pulsar's readers of partitioned topics do,
        and our producers and consumers: every ``PARTITIONS_REFRESH_S``), each from its start: all
        of a new partition was written after this reader began. A failed look-up keeps what is read
        and tries again at the next due time."""
        self._partitions_due = time.monotonic() + PARTITIONS_REFRESH_S
        try:
            count = self._client._partition_count(self.topic, refresh=True)
        except (PulsarTxnError, StoreError) as exc:
            log.info("reader of %s: partition count not refreshed: %s", self.topic, exc)
            return
        for p in range(len(self._tps), count):
            tp = (self.topic.kafka_topic, p)
            with self._poll_lock:
                self._check_open()
                try:
                    self._committed.add_partition(*tp, 0)
                except StoreError as exc:  # nothing was added: the next due time tries again
                    log.info("reader of %s: partition %d not opened yet: %s", self.topic, p, exc)
                    return
            self._tps.append(tp)
            log.info("reader of %s: reading partition %d, added to the topic", self.topic, p)

    def seek(self, message_id: MessageId | int) -> None:
        """Read that partition again from ``message_id``; ``EARLIEST`` / ``LATEST``: every partition
        from its start / from now on. An id without a topic means this reader's topic. An ``int`` is
        a publish time (ms since the epoch): every partition from its first message published at or
        after it."""
        self._check_open()
        if isinstance(message_id, int) and not isinstance(message_id, bool):
            self._buffer.clear()
            at = _args.publish_time(message_id, "seek's publish time")
            for tp, offset in offsets_for_time(self._client.kafka, self._tps, at).items():
                self._committed.seek(*tp, offset)
            return
        if not isinstance(message_id, MessageId):
            raise ConfigError(f"seek takes a MessageId or a publish time in ms, not {message_id!r}")
        if message_id in (EARLIEST, LATEST):
            self._buffer.clear()
            for tp in self._tps:
                self._committed.seek(*tp, self._sentinel(tp, message_id))
            return
        tp = self._partition_of(message_id)
        # Only that partition's messages go: those of the others are read past already.
        self._buffer = deque(m for m in self._buffer if (m.message_id.topic, m.message_id.partition) != tp)
        # Pulsar: startMessageIdInclusive "also applies for any cursor reset operation like seek".
        self._committed.seek(*tp, message_id.offset + (0 if self._inclusive else 1))

    def close(self) -> None:
        """Stop reading and release the Kafka connections; reading after this raises
        ``NotAllowedError``."""
        self._closed = True
        self._client._handle_closed(self)
        with self._poll_lock:
            self._buffer.clear()
            self._committed.close()

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"reader of {self.topic} is closed")


def last_message_ids(client: Client, topic: str) -> dict[int, MessageId | None]:
    """Per partition, the last readable message: below maxReadPosition, markers and aborted messages
    excluded (None where nothing is readable)."""
    name = TopicName.parse(topic)
    if name.partition is not None:
        parts = [name.partition]
    else:  # asked again, not cached: the topic may have grown since this client looked it up
        parts = list(range(client._partition_count(name, refresh=True)))
    result: dict[int, MessageId | None] = {}
    for p in parts:
        offset = _last_readable(client, name.kafka_topic, p)
        result[p] = None if offset is None else MessageId(name.kafka_topic, p, offset)
    return result


def _last_readable(
    client: Client, topic: str, partition: int, state: TxnBufferState | None = None
) -> int | None:
    """The offset of the partition's last readable message (None if it has none); ``state``: the
    partition's TB state if the caller has a current one."""
    if state is None:
        state = client._buffer_state(topic, partition)
    end, step = state.max_read_position, 64
    while end > 0:  # walk back in growing windows until a visible record turns up
        start = max(0, end - step)
        records = read_range(client.kafka, topic, partition, start, end)
        visible = [r for r in records if state.is_visible(r.offset, r.headers)]
        if visible:
            return visible[-1].offset
        end, step = start, step * 4
    return None
