"""What the parts of ``Consumer`` share: its state (declared here, set up by ``Consumer.__init__``),
the records it keeps per partition, and the methods one part calls on another.

``Consumer`` is put together from one class per job (``_membership``, ``_receiving``, ``_acks``,
``_txn_acks``, ``_outcomes``, ``_commits``, ``_seek``), each a ``ConsumerBase``; they share one
lock discipline: ``_read_lock``, then ``_lock``, then ``_pa_lock``; ``_commit_lock`` before
``_lock``, never while holding it."""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kafka_store import PartitionReader, SubscriptionGroup, in_callback_thread
from pulsar_txn._future import LazyFuture, settle
from pulsar_txn.buffer.reader import CommittedReader
from pulsar_txn.errors import AlreadyClosed, ConfigError, NotAllowedError, Timeout
from pulsar_txn.message import Message, MessageId
from pulsar_txn.naming import TopicName
from pulsar_txn.pendingack.log import PendingAckFold
from pulsar_txn.pendingack.stale import StalePendingCheck
from pulsar_txn.pendingack.state import AckKind, PendingAckState
from pulsar_txn.schema import Schema
from pulsar_txn.subscription.cursor import Cursor
from pulsar_txn.subscription.options import (
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    SubscriptionIsolationLevel,
)
from pulsar_txn.subscription.unacked import Unacked
from pulsar_txn.transaction import Transaction
from pulsar_txn.txnid import TxnAction, TxnID

if TYPE_CHECKING:
    from pulsar_txn.client import Client

# Every part logs as the public module: an application's logging setup names "pulsar_txn.consumer".
log = logging.getLogger("pulsar_txn.consumer")

TP = tuple[str, int]
T = TypeVar("T")
R = TypeVar("R")
MessageKey = tuple[str, int, int]  # (Kafka topic, partition, offset)

ACK_BATCH_MAX = 5000  # offsets per PendingAck record
SESSION_TIMEOUT_MS = 6000  # the group session: how long a silent (or static, closed) member stays
PA_IDLE_BACKOFF_MS = 200  # the pending-ack log tail fetches at most ~5 times a second
POLL_RECORDS = 2000  # records taken from the committed reader per poll
IDLE_FILL_MIN_S = 0.05  # the upkeep thread polls for an application that has not for this long
SETTLE_S = 10.0  # at most this long, wait for a rebalancing group's assignments before ConsumerBusy
TRIM_INTERVAL_S = 10.0  # a partition's pending-ack log is trimmed at most this often
REOPEN_MAX_BACKOFF_S = 5.0  # an assigned partition whose opening failed is retried at least this often


@dataclass
class Part:
    tp: TP
    cursor: Cursor
    pending: PendingAckState
    fold: PendingAckFold
    pa_topic: str
    dirty: bool = True
    committed: tuple[int, str | None] | None = None  # what Kafka holds, as far as we know
    # Futures of pending-ack records handed to the producer, not yet stored or failed: a revocation
    # (or close) waits for them, so the next owner recovers their acks.
    inflight: set[Future[None]] = field(default_factory=set)
    # Revoked (not lost) with every ack record stored: the next owner recovers our open
    # transactions' acks as pending, so they may still commit.
    handed_over: bool = False
    trimmed: int = 0  # the pending-ack log is trimmed below this (as far as we asked)
    trim_due: float = 0.0  # monotonic time of the next trim allowed
    trim_ready: int = 0  # a landed cursor's trim point held back by the interval (upkeep issues it)


class NotReadableYet(NotAllowedError):
    """An ack of an offset at or past the readable end this consumer knows (maybe only not scanned
    up to yet: ``Consumer._caught_up``)."""

    def __init__(self, mid: MessageId, tp: TP, end: int) -> None:
        super().__init__(
            f"cannot acknowledge {mid}: no readable message there ({tp[0]}[{tp[1]}] is readable below "
            f"offset {end})"
        )
        self.mid = mid
        self.tp = tp


@dataclass
class AckBatch:
    registered: Future[None]
    offsets: list[int] = field(default_factory=list)
    written: Future[None] = field(default_factory=Future)
    flush: Callable[[], None] | None = None  # writes the batch now (commit, abort or close)


@dataclass(order=True)
class Redelivery:
    due: float
    seq: int
    message: Message[Any] = field(compare=False)


class ConsumerBase(Generic[T]):
    """The state every part of ``Consumer`` works on (set up by ``Consumer.__init__``)."""

    schema: Schema[T]
    topics: list[TopicName]
    subscription: str
    consumer_type: ConsumerType
    consumer_name: str
    isolation_level: SubscriptionIsolationLevel
    _client: Client
    _client_id: str
    _instance_id: str | None
    _initial: InitialPosition
    _uncommitted: bool
    _left_out: set[str]  # pattern matches without a valid pending-ack log name
    _pattern: re.Pattern[str] | None
    _discovery_period: float
    _next_discovery: float
    _ack_timeout: float
    _nack_delay: float
    _dlq: DeadLetterPolicy | None
    _stale: StalePendingCheck
    _lock: threading.RLock
    _read_lock: threading.RLock
    _pa_lock: threading.RLock
    _commit_lock: threading.Lock
    _group: SubscriptionGroup
    _reader: CommittedReader
    _pa_reader: PartitionReader | None
    _parts: dict[TP, Part]
    _retained: dict[TP, Part]
    _reopen: dict[TP, tuple[float, float]]
    _kafka_topics: dict[str, TopicName]
    _base_partitions: dict[str, int]  # Kafka topic -> its partition count when the subscription began on it
    _only_partitions: dict[str, frozenset[int]]  # Kafka topic -> the partitions named, if not all
    _pa_to_data: dict[str, str]
    _pa_topics_ready: set[TP]
    _pa_logs_checked: set[str]  # pending-ack logs whose retention was checked (_check_pa_log)
    _txn_parts: dict[TxnID, dict[TP, Part]]
    _txn_handles: dict[TxnID, Transaction]
    _txn_offsets: dict[TxnID, dict[TP, list[int]]]
    _cum_txns: set[tuple[TxnID, TP]]
    _in_txn: dict[MessageKey, Message[T]]
    _incoming: deque[Message[T]]
    _idle_fill_s: float
    _last_fill: float
    _redeliveries: list[Redelivery]
    _seq: Iterator[int]
    _unacked: Unacked[tuple[Message[T], float]]
    _redelivery_counts: dict[MessageKey, int]
    _ack_batches: dict[tuple[TxnID, TP, AckKind], AckBatch]
    _ack_writing: set[tuple[TxnID, TP, AckKind]]
    _refetch_due: list[tuple[TP, list[int]]]
    _closed: bool
    _assigned_once: threading.Event
    _maintenance: threading.Thread

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"consumer {self.consumer_name} of {self.subscription!r} is closed")

    def _check_subscribed(self, mid: MessageId) -> None:
        """``NotAllowedError`` for an id of a topic, or of a partition of a topic subscribed by
        partition name, that this subscription does not read."""
        named = self._only_partitions.get(mid.topic)
        if mid.topic not in self._kafka_topics or (named is not None and mid.partition not in named):
            what = (
                repr(mid.topic)
                if mid.topic not in self._kafka_topics
                else f"{mid.topic}-partition-{mid.partition}"
            )
            raise NotAllowedError(
                f"cannot acknowledge {mid}: {what} is not subscribed by {self.subscription!r}"
            )

    if TYPE_CHECKING:  # implemented by the other parts

        def _ack_in_txn(self, txn: Transaction, kind: AckKind, mids: Sequence[MessageId]) -> Future[None]: ...
        def _ack_offset(self, part: Part, offset: int) -> None: ...
        def _caught_up(self, refused: NotReadableYet, ack: Callable[[], R]) -> R: ...
        def _decode(self, rec: Any) -> Message[T]: ...
        def _encoded_acks(
            self, part: Part, txn_id: TxnID, kind: AckKind, offsets: Sequence[int]
        ) -> list[tuple[bytes, list[tuple[str, bytes]]]]: ...
        def _ensure_pa_topic(self, part: Part) -> None: ...
        def _flush_part(self, part: Part, *, force: bool = False, in_callback: bool = False) -> bool: ...
        def _forget_partition(self, tp: TP) -> None: ...
        def _note_pa_partitions(self, pa_topic: str, count: int) -> None: ...
        def _check_pa_log(self, pa_topic: str) -> None: ...
        def _ownership_check(self, txn_id: TxnID) -> Future[None]: ...
        def _pa(self) -> PartitionReader: ...
        def _pa_partition_count(self, pa_topic: str) -> int: ...
        def _part_for(self, mid: MessageId) -> Part: ...
        def _readable_part_for(self, mid: MessageId) -> Part: ...
        def _redeliver(self, msg: Message[T], delay: float) -> None: ...
        def _take_held(self, txn_id: TxnID, tp: TP) -> list[int] | None: ...
        def _txn_ended(self, txn_id: TxnID, action: TxnAction) -> None: ...
        def _with_topic(self, mids: list[MessageId]) -> list[MessageId]: ...
        def _write_ack_batches(self, tps: Collection[TP] | None = None) -> None: ...


def all_of(futures: list[Future[None]]) -> Future[None]:
    """The caller's future for ack writes: done when all are, with the first failure. Its own, never
    a write's (shared by every ack of a record, and tracked by the transaction): cancelling it
    changes nothing but itself."""
    out: LazyFuture[None] = LazyFuture()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_f: Future[None]) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        settle(out, next((f.exception() for f in futures if not f.cancelled() and f.exception()), None))

    if not futures:
        out.set_result(None)
    for fut in futures:
        fut.add_done_callback(one_done)
    return out


def wait_ack(written: Future[None], timeout: float) -> None:
    """Until transactional acks are stored (their write's error raised), at most ``timeout``; not on
    a client callback thread, which must not wait for what it completes itself."""
    if in_callback_thread():
        return
    done, _ = wait([written], timeout)
    if not done:
        raise Timeout(f"the pending ack was not stored within {timeout}s")
    written.result()


def message_ids(message: Message[Any] | MessageId | Sequence[Message[Any] | MessageId]) -> list[MessageId]:
    """The ids an ack call names: one message or id, or a sequence of them (``ConfigError`` for
    anything else)."""
    if isinstance(message, (Message, MessageId)):
        return [message.message_id if isinstance(message, Message) else message]
    if isinstance(message, Sequence) and not isinstance(message, str | bytes):
        ids = [m.message_id if isinstance(m, Message) else m for m in message]
        if all(isinstance(m, MessageId) for m in ids):
            return ids
    raise ConfigError(f"acknowledge takes a Message, a MessageId or a list of them, not {message!r}")


def complete_dropped(futures: list[Future[None]]) -> None:
    """Resolve the write futures of dropped ack batches (outside the consumer's lock)."""
    for fut in futures:
        if not fut.done():
            fut.set_result(None)
