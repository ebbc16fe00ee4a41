"""Consumer: Pulsar subscriptions (Exclusive, Failover) on Kafka consumer groups, with plain and
transactional acknowledgement.

A subscription is the consumer group named after it, so Kafka tooling shows its lag. Each assigned
partition keeps a cursor (mark-delete = the group's committed offset; individually acked ranges in
the commit metadata) and a pending-ack state (the fold of the subscription's pending-ack log). Records
come through the transaction-buffer filter, so only committed data is ever delivered.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from kafka_store import (
    GroupNotEmptyError,
    PartitionReader,
    StoreError,
    SubscriptionGroup,
    TopicNotFoundError,
    delete_group,
    describe_group,
    end_offsets,
    group_topics,
    in_callback_thread,
    offsets_for_time,
    read_range,
    watermark_offsets,
)
from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn._future import LazyFuture, settle
from pulsar_txn.buffer.reader import CommittedReader
from pulsar_txn.errors import (
    AlreadyClosed,
    ConfigError,
    ConsumerBusy,
    InvalidTopicName,
    InvalidTxnStatusError,
    NotAllowedError,
    PersistenceError,
    PulsarTxnError,
    Timeout,
    TransactionConflict,
    from_store_error,
)
from pulsar_txn.message import EARLIEST, LATEST, Message, MessageId, new_message_id
from pulsar_txn.naming import TopicName, bad_subscription_name, check_subscription, pending_ack_topic
from pulsar_txn.pendingack.log import PENDING_ACK_TOPIC_CONFIGS, PendingAckFold, encode_pending_ack
from pulsar_txn.pendingack.stale import StalePendingCheck
from pulsar_txn.pendingack.state import AckKind, PendingAckState
from pulsar_txn.pendingack.stats import join_metadata, recover_partition
from pulsar_txn.schema import BytesSchema, Schema
from pulsar_txn.subscription.cursor import Cursor
from pulsar_txn.subscription.unacked import Unacked
from pulsar_txn.transaction import Transaction, TransactionState, joining_failed
from pulsar_txn.txnid import TxnAction, TxnID

if TYPE_CHECKING:
    from pulsar_txn.client import Client

log = logging.getLogger(__name__)

# A subscription's group members are this library's consumers: their Kafka client ids start so (the
# join time after it orders racing subscribers; topic deletion tells them from other groups' members).
CONSUMER_CLIENT_ID_PREFIX = "ptxn-"

TP = tuple[str, int]
T = TypeVar("T")
R = TypeVar("R")


class ConsumerType(StrEnum):
    """Subscription types (Pulsar's ``ConsumerType``). Exclusive and Failover are supported; Shared
    and Key_Shared raise ``NotAllowedError``."""

    Exclusive = "Exclusive"
    Failover = "Failover"
    Shared = "Shared"
    KeyShared = "Key_Shared"


class InitialPosition(StrEnum):
    """Where a new subscription starts (Pulsar's ``InitialPosition``)."""

    Earliest = "Earliest"
    Latest = "Latest"


class SubscriptionIsolationLevel(StrEnum):
    """What a subscription's consumers read (Pulsar's ``SubscriptionIsolationLevel``, PIP-298).
    ``READ_COMMITTED`` (default): plain and committed messages, never past ``max_read_position``.
    ``READ_UNCOMMITTED``: every message up to the partition's end, those of open and aborted
    transactions too (markers never). Give every consumer of a subscription the same level."""

    READ_COMMITTED = "READ_COMMITTED"
    READ_UNCOMMITTED = "READ_UNCOMMITTED"


@dataclass(frozen=True)
class DeadLetterPolicy:
    """After ``max_redeliver_count`` redeliveries a message moves to ``dead_letter_topic`` (default
    ``<topic>-<subscription>-DLQ``) and is acknowledged."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None  # default: "<topic>-<subscription>-DLQ"

    def __post_init__(self) -> None:
        # Pulsar requires at least 1: with 0 every message would go to the DLQ unseen.
        _args.integer(self.max_redeliver_count, "max_redeliver_count", minimum=1)
        if self.dead_letter_topic is not None:
            _args.text(self.dead_letter_topic, "dead_letter_topic")


@dataclass
class _Part:
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


_ACK_BATCH_MAX = 5000  # offsets per PendingAck record
_SESSION_TIMEOUT_MS = 6000  # the group session: how long a silent (or static, closed) member stays
_PA_IDLE_BACKOFF_MS = 200  # the pending-ack log tail fetches at most ~5 times a second
_POLL_RECORDS = 2000  # records taken from the committed reader per poll
_IDLE_FILL_MIN_S = 0.05  # the upkeep thread polls for an application that has not for this long
_SETTLE_S = 10.0  # at most this long, wait for a rebalancing group's assignments before ConsumerBusy
_TRIM_INTERVAL_S = 10.0  # a partition's pending-ack log is trimmed at most this often
_REOPEN_MAX_BACKOFF_S = 5.0  # an assigned partition whose opening failed is retried at least this often
# How soon partitions added to a subscribed topic are assigned: Pulsar's autoUpdatePartitionsInterval
# (librdkafka would look every 5 minutes).
PARTITIONS_REFRESH_MS = 60_000


class _NotReadableYet(NotAllowedError):
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
class _AckBatch:
    registered: Future[None]
    offsets: list[int] = field(default_factory=list)
    written: Future[None] = field(default_factory=Future)
    flush: Callable[[], None] | None = None  # writes the batch now (commit, abort or close)


@dataclass(order=True)
class _Redelivery:
    due: float
    seq: int
    message: Message[Any] = field(compare=False)


@public_errors
class Consumer(Generic[T]):
    """A consumer of a subscription; made by ``Client.subscribe``.

    ``receive`` returns committed messages only; ``acknowledge``/``acknowledge_cumulative`` take a
    ``txn=`` to acknowledge inside a transaction (applied only if it commits)."""

    def __init__(
        self,
        client: Client,
        topics: Sequence[TopicName],
        subscription_name: str,
        *,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.Latest,
        consumer_name: str | None = None,
        ack_timeout_millis: int = 0,
        negative_ack_redelivery_delay_ms: int = 60_000,
        dead_letter_policy: DeadLetterPolicy | None = None,
        subscribe_timeout: float = 30.0,
        instance_id: str | None = None,
        schema: Schema[T] | None = None,
        pending_ack_check_after_ms: int = 60_000,
        subscription_isolation_level: SubscriptionIsolationLevel
        | str = SubscriptionIsolationLevel.READ_COMMITTED,
        pattern: re.Pattern[str] | None = None,
        pattern_auto_discovery_period: float = 60.0,
    ) -> None:
        """``instance_id`` gives the consumer a stable identity (Kafka static membership): a consumer
        restarted after a crash with the same id takes over at once, instead of being refused
        (Exclusive) or waiting for the dead member's session to expire (Failover). Give each live
        consumer of a subscription a different id.

        ``pending_ack_check_after_ms``: a transaction pending here that long, and not this
        consumer's, is looked up in its TC's log and released if the TC aborted it (its ack was
        written after its abort marker; see ``pulsar_txn.pendingack.stale``).

        ``subscription_isolation_level``: ``READ_UNCOMMITTED`` also delivers messages of open and
        aborted transactions (``SubscriptionIsolationLevel``).

        ``pattern`` (given by ``Client.subscribe(pattern=...)``, which found ``topics``): every
        ``pattern_auto_discovery_period`` seconds the consumer looks for topics that match it now
        (Pulsar's pattern consumer): new ones join the subscription at ``initial_position``, deleted
        ones leave it. Either change rebalances the subscription's group, as a change of a Kafka
        regex subscription does; acks of open transactions are handed over first, so those
        transactions still commit."""
        self.schema: Schema[T] = schema if schema is not None else cast("Schema[T]", BytesSchema())
        """The schema ``msg.value()`` decodes with."""
        consumer_type = ConsumerType(consumer_type)
        if consumer_type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise NotAllowedError(
                f"{consumer_type.value} subscriptions are not supported yet; use Exclusive or Failover"
            )
        _args.text(subscription_name, "subscription_name")
        if bad_subscription_name(subscription_name):
            raise NotAllowedError(f"bad subscription name {subscription_name!r}")
        self._left_out: set[str] = set()  # pattern matches without a valid pending-ack log name
        topics = self._subscribable(topics, subscription_name, pattern is not None)
        if not topics:
            raise InvalidTopicName(
                f"subscription {subscription_name!r:.100}: no matching topic has a pending-ack log name"
                " Kafka accepts (see the warnings)"
            )
        self._client = client
        self.topics = list(topics)
        self.subscription = subscription_name
        self.consumer_type = consumer_type
        self._initial = InitialPosition(initial_position)
        self.consumer_name = consumer_name or f"consumer-{uuid.uuid4().hex[:8]}"
        self._ack_timeout = _args.millis(ack_timeout_millis, "ack_timeout_millis") / 1000
        if _args.number(pending_ack_check_after_ms, "pending_ack_check_after_ms") <= 0:
            raise NotAllowedError("pending_ack_check_after_ms must be positive")
        self._stale = StalePendingCheck(
            client.kafka, client._log_topic, pending_ack_check_after_ms / 1000, secret=client._secret
        )
        self._nack_delay = (
            _args.millis(negative_ack_redelivery_delay_ms, "negative_ack_redelivery_delay_ms") / 1000
        )
        if dead_letter_policy is not None:
            _args.instance(dead_letter_policy, DeadLetterPolicy, "dead_letter_policy")
        if consumer_name is not None:
            _args.text(consumer_name, "consumer_name")
        subscribe_timeout = _args.seconds(subscribe_timeout, "subscribe_timeout")
        self._pattern = pattern
        self._discovery_period = _args.seconds(pattern_auto_discovery_period, "pattern_auto_discovery_period")
        self._next_discovery = time.monotonic() + self._discovery_period
        self._dlq = dead_letter_policy
        self._lock = threading.RLock()
        # Reading may block (a poll waits for records): it has locks of its own, so that acks, ends of
        # transactions and upkeep never wait behind a poll. Order: _read_lock, then _lock, then _pa_lock.
        self._read_lock = threading.RLock()  # the committed reader
        self._pa_lock = threading.RLock()  # the pending-ack tail
        # Cursor commits from any thread but the group's (upkeep, seek, close): one at a time, each
        # taking its snapshot under it, so they reach the group in the order of their snapshots.
        # Taken before _lock, never while holding it.
        self._commit_lock = threading.Lock()
        self._txn_parts: dict[TxnID, dict[TP, _Part]] = {}  # open txns we acked in -> where
        self._txn_handles: dict[TxnID, Transaction] = {}  # and their handles (same keys)
        self._parts: dict[TP, _Part] = {}
        self._kafka_topics = {t.kafka_topic: t for t in self.topics}
        self._pa_to_data = {pending_ack_topic(t, subscription_name): k for k, t in self._kafka_topics.items()}
        for t in self.topics:
            client._partition_count(t)  # TopicNotFound early, with a clear message
        try:
            self.isolation_level = SubscriptionIsolationLevel(subscription_isolation_level)
        except ValueError:
            raise ConfigError(
                f"subscription_isolation_level must be one of "
                f"{[m.value for m in SubscriptionIsolationLevel]}, not {subscription_isolation_level!r}"
            ) from None
        self._uncommitted = self.isolation_level is SubscriptionIsolationLevel.READ_UNCOMMITTED
        options = dataclasses.replace(client._buffer_options(), read_uncommitted=self._uncommitted)
        self._reader = CommittedReader(client.kafka, {}, store=client._snapshots(), options=options)
        self._pa_reader: PartitionReader | None = None
        self._incoming: deque[Message[T]] = deque()
        # With the idle gate on (brokers that answer empty fetches at once), the gate closes only in a
        # poll: a consumer the application stopped polling (busy acking, say) would fetch without
        # pause. The upkeep thread polls for it after this long without a poll (see _fill_when_idle).
        backoff_s = client.kafka.idle_fetch_backoff_ms / 1000
        self._idle_fill_s = max(backoff_s, _IDLE_FILL_MIN_S) if backoff_s else 0.0
        self._last_fill = time.monotonic()
        self._redeliveries: list[_Redelivery] = []
        self._seq = itertools.count()
        self._unacked: Unacked[tuple[Message[T], float]] = Unacked()
        self._in_txn: dict[tuple[str, int, int], Message[T]] = {}
        self._cum_txns: set[tuple[TxnID, TP]] = set()  # transactions with a cumulative ack, per partition
        # Which offsets each transaction moved into _in_txn, per partition: an outcome then touches
        # its own messages, not every message held by every transaction in flight.
        self._txn_offsets: dict[TxnID, dict[TP, list[int]]] = {}
        self._redelivery_counts: dict[tuple[str, int, int], int] = {}
        self._pa_topics_ready: set[TP] = set()  # pending-ack log partitions known to exist
        self._retained: dict[TP, _Part] = {}
        # Assigned partitions whose opening failed: (next attempt, back-off), retried on the group thread.
        self._reopen: dict[TP, tuple[float, float]] = {}
        self._ack_batches: dict[tuple[TxnID, TP, AckKind], _AckBatch] = {}
        # Keys of batches being written: acks made meanwhile gather in the next batch, written when
        # the write in flight ends (many acks per record under load, one write at a time per key).
        self._ack_writing: set[tuple[TxnID, TP, AckKind]] = set()
        self._refetch_due: list[tuple[TP, list[int]]] = []  # see _after_outcome; read by the upkeep thread
        self._closed = False
        self._assigned_once = threading.Event()
        # The type's code ends the client id, so that a later consumer can tell an Exclusive one.
        code = _TYPE_CODES[consumer_type]
        client_id = f"{CONSUMER_CLIENT_ID_PREFIX}{time.time_ns()}-{uuid.uuid4().hex[:6]}-{code}"
        self._client_id = client_id
        self._instance_id = instance_id
        self._refuse_if_busy(self._other_members(min(subscribe_timeout, _SETTLE_S)))
        self._group = SubscriptionGroup(
            client.kafka,
            subscription_name,
            [t.kafka_topic for t in self.topics],
            self._on_assign,
            self._on_revoke,
            client_id=client_id,
            instance_id=instance_id,
            session_timeout_ms=_SESSION_TIMEOUT_MS,
            metadata_refresh_ms=PARTITIONS_REFRESH_MS,
            on_lost=self._on_lost,
            on_tick=self._retry_failed_opens,
        )
        self._group.start()
        if not self._assigned_once.wait(subscribe_timeout):
            self._group.stop()
            raise Timeout(f"subscribing {subscription_name!r} got no assignment within {subscribe_timeout}s")
        self._check_exclusive()
        self._maintenance = threading.Thread(
            target=self._maintain, name=f"consumer-{subscription_name}", daemon=True
        )
        self._maintenance.start()

    # ------------------------------------------------------------------ exclusivity
    def _other_members(self, settle_s: float = 0.0) -> list[str]:
        """Client ids of the subscription's other members; a dead predecessor with our instance id
        is not another consumer (it is being replaced). The group is named after the subscription
        alone, so it may also hold consumers of a same-named subscription on other topics (one
        subscription each in Pulsar): a member assigned only partitions of other topics is not ours.
        A member assigned nothing may be ours: while the group rebalances (e.g. just after one of
        its consumers closed) every member is; with ``settle_s``, look again for that long before
        counting such a member (before, reopening a consumer of a name also used on another topic
        got ConsumerBusy for ~3 s)."""
        ours = {t.kafka_topic for t in self.topics}
        deadline = time.monotonic() + settle_s
        while True:
            members = [
                m
                for m in describe_group(self._client.kafka, self.subscription)
                if m.client_id != self._client_id
                and not (self._instance_id and m.instance_id == self._instance_id)
            ]
            counted = [m for m in members if not m.topics or m.topics & ours]
            # Only members that would refuse this consumer are worth waiting for (any member, for an
            # Exclusive one; an Exclusive member, for the others: _refuse_if_busy).
            exclusive = _TYPE_CODES[ConsumerType.Exclusive]
            deciding = [
                m
                for m in counted
                if self.consumer_type is ConsumerType.Exclusive or _type_code(m.client_id) == exclusive
            ]
            if not deciding or any(m.topics for m in deciding) or time.monotonic() >= deadline:
                return [m.client_id for m in counted]
            time.sleep(0.2)

    def _refuse_if_busy(self, others: list[str]) -> None:
        """ConsumerBusy if ``others`` (client ids of the subscription's members) rule this consumer
        out: any member, for an Exclusive one; an Exclusive member, for any other type (Pulsar:
        "Subscription is of different type")."""
        if not others:
            return
        if self.consumer_type is ConsumerType.Exclusive:
            raise ConsumerBusy(f"exclusive subscription {self.subscription!r} already has a consumer")
        if any(_type_code(cid) == _TYPE_CODES[ConsumerType.Exclusive] for cid in others):
            raise ConsumerBusy(
                f"subscription {self.subscription!r} has an Exclusive consumer: a {self.consumer_type.value} "
                "one cannot join it (subscription is of a different type)"
            )

    def _check_exclusive(self) -> None:
        """After joining: two racing subscribers, one of them Exclusive; the one that came later
        (larger join time in its client id) yields."""
        earlier = [cid for cid in self._other_members(_SETTLE_S) if _joined(cid) < _joined(self._client_id)]
        try:
            self._refuse_if_busy(earlier)
        except ConsumerBusy:
            self._group.stop()
            raise

    # ------------------------------------------------------------------ assignment (group thread)
    def _on_assign(self, partitions: list[TP]) -> None:
        try:
            with self._lock:
                held = [tp for tp in partitions if tp in self._parts]
                for tp in held:
                    self._parts[tp].dirty = True  # still ours: keep its state, re-commit it
            self._open_partitions([tp for tp in partitions if tp not in held])
        finally:
            self._assigned_once.set()

    def _open_partitions(self, fresh: list[TP]) -> None:
        """Open each partition, or note it for a retry (a storage error must not leave a partition
        assigned to us in Kafka and read by nobody)."""
        if not fresh:
            return
        try:
            committed = self._group.committed(fresh)
            ends = end_offsets(self._client.kafka, list(committed)) if committed else {}
        except StoreError as exc:
            for tp in fresh:
                self._open_failed(tp, exc)
            return
        for tp, end in ends.items():
            if committed[tp][0] > end:
                # A cursor past the partition's end belongs to a deleted topic's partition: this one is
                # the topic created again under its name (its offsets restart at 0). As for a new
                # subscription, it starts at the initial position; the old cursor would skip its first
                # messages (a broker that keeps a deleted topic's group offsets, or a pattern
                # subscription that found the topic again).
                log.warning(
                    "subscription %s: cursor %d of %s[%d] is past its end %d (the topic was deleted and "
                    "created again); starting at the initial position",
                    self.subscription,
                    committed[tp][0],
                    *tp,
                    end,
                )
                del committed[tp]
        for tp in fresh:
            try:
                self._open_partition(tp, committed.get(tp))
            except (PulsarTxnError, StoreError) as exc:
                self._open_failed(tp, exc)
            else:
                self._reopen.pop(tp, None)

    def _open_failed(self, tp: TP, exc: Exception) -> None:
        backoff = min(_REOPEN_MAX_BACKOFF_S, 2 * self._reopen[tp][1]) if tp in self._reopen else 0.2
        self._reopen[tp] = (time.monotonic() + backoff, backoff)
        log.warning(
            "subscription %s: opening %s[%d] failed (%s); retrying in %.1f s",
            self.subscription,
            *tp,
            exc,
            backoff,
        )

    def _retry_failed_opens(self) -> None:
        """On the group thread (as assignment callbacks are): partitions whose opening failed."""
        if not self._reopen:
            return
        now = time.monotonic()
        due = [tp for tp, (at, _b) in self._reopen.items() if at <= now and tp not in self._parts]
        self._open_partitions(due)

    def _open_partition(self, tp: TP, committed: tuple[int, str | None] | None) -> None:
        topic, partition = tp
        retained = self._retained.pop(tp, None)
        if retained is not None and self._untouched_since(retained, committed):
            # Our last commit before the rebalance failed; what we hold is newer than what Kafka has.
            with self._read_lock, self._lock, self._pa_lock:
                self._parts[tp] = retained
                self._reader.add_partition(topic, partition, retained.cursor.mark_delete)
                if (retained.pa_topic, partition) in self._pa_topics_ready:
                    self._pa().add(retained.pa_topic, partition, retained.fold.next_offset)
            retained.dirty = True
            self._flush_part(retained, in_callback=True)
            return
        default_start = 0
        if committed is None and self._initial is InitialPosition.Latest:
            default_start = self._client._sentinel_offset(
                topic, partition, LATEST, uncommitted=self._uncommitted
            )
        name = self._kafka_topics[topic]
        fold = recover_partition(self._client, name, self.subscription, partition, committed, default_start)
        cursor, pending, pa_topic = fold.state.cursor, fold.state, fold.topic
        self._note_pa_partitions(pa_topic, self._pa_partition_count(pa_topic))
        part = _Part(tp, cursor, pending, fold, pa_topic, committed=committed)
        with self._read_lock, self._lock, self._pa_lock:
            self._parts[tp] = part
            self._reader.add_partition(topic, partition, cursor.mark_delete)
            if (pa_topic, partition) in self._pa_topics_ready:
                self._pa().add(pa_topic, partition, fold.next_offset)
        self._flush_part(part, in_callback=True)
        log.info(
            "%s: %s[%d] from %d (%d acked ranges, %d pending acks)",
            self.subscription,
            topic,
            partition,
            cursor.mark_delete,
            len(cursor.acked),
            pending.pending_count(),
        )

    def _untouched_since(self, retained: _Part, committed: tuple[int, str | None] | None) -> bool:
        """Nobody owned the partition since we lost it: Kafka holds what we last committed (or
        nothing), and the pending-ack log has nothing we have not read but our own writes (e.g. acks
        batched until the revocation). Else another owner's acks are newer than our retained cursor."""
        if committed is not None and committed != retained.committed:
            return False
        pa = (retained.pa_topic, retained.tp[1])
        try:
            if not self._client._admin.topic_exists(pa[0]):
                return True
            start, end = watermark_offsets(self._client.kafka, [pa])[pa]
        except (PulsarTxnError, StoreError):
            return False  # recovering is safe
        # Another owner meanwhile may have trimmed the log past records our fold could still call for
        # (its trim point follows its own state, not ours).
        return start <= retained.fold.trim_point() and retained.fold.read_all_but_own(end)

    def _on_lost(self, partitions: list[TP]) -> None:
        self._on_revoke(partitions, lost=True)

    def _on_revoke(self, partitions: list[TP], *, lost: bool = False) -> None:
        # Acks of open transactions still batched here go to the pending-ack log first, so that the
        # partitions' next owner recovers them as pending. Outside the locks: the writes' callbacks
        # take _lock. A revocation (not a loss) holds the group's rebalance until this returns, so
        # the next owner's recovery comes after these writes: their transactions may still commit.
        revoked = set(partitions)
        for tp in revoked:
            self._reopen.pop(tp, None)
        gone: list[_Part] = []
        self._write_ack_batches(revoked)
        with self._read_lock, self._lock, self._pa_lock:
            for tp in partitions:
                part = self._parts.pop(tp, None)
                if part is None:
                    continue
                gone.append(part)
                committed = self._flush_part(part, force=True, in_callback=True)
                if not committed:
                    self._retained[tp] = part  # reused if the partition comes back to us
                self._reader.remove_partition(*tp)
                if self._pa_reader is not None and (part.pa_topic, tp[1]) in self._pa_topics_ready:
                    self._pa_reader.remove(part.pa_topic, tp[1])
                self._forget_partition(tp)
        self._write_ack_batches(revoked)  # acks made meanwhile, before their partition was dropped
        with self._lock:
            for part in gone:
                part.handed_over = not lost and not part.inflight

    def _forget_partition(self, tp: TP) -> None:
        """Drop everything queued or tracked for a partition (revoked, or sought)."""

        def other(mid: MessageId) -> bool:
            return (mid.topic, mid.partition) != tp

        self._incoming = deque(m for m in self._incoming if other(m.message_id))
        self._redeliveries = [r for r in self._redeliveries if other(r.message.message_id)]
        heapq.heapify(self._redeliveries)
        self._unacked.take_partition(tp)
        self._in_txn = {k: v for k, v in self._in_txn.items() if (k[0], k[1]) != tp}
        self._cum_txns = {k for k in self._cum_txns if k[1] != tp}
        for txn_id in list(self._txn_offsets):
            self._take_held(txn_id, tp)

    def _pa(self) -> PartitionReader:
        if self._pa_reader is None:
            # Always gated: our own transactions' outcomes arrive with their END_TXN, so this reader
            # only picks up others' (timeouts, commits by id elsewhere), where 0.2 s does not matter,
            # and a tail that fetched without pause cost ~20% of a core on a broker that answers empty
            # fetches at once.
            backoff = max(self._client.kafka.idle_fetch_backoff_ms, _PA_IDLE_BACKOFF_MS)
            self._pa_reader = PartitionReader(self._client.kafka, fetch_wait_ms=50, idle_backoff_ms=backoff)
        return self._pa_reader

    # ------------------------------------------------------------------ receiving
    def receive(self, timeout_millis: int | None = None) -> Message[T]:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        wait_ms = _args.millis(timeout_millis, "timeout_millis") if timeout_millis is not None else 1 << 30
        deadline = time.monotonic() + wait_ms / 1000
        polled = False  # receive(0) still polls once: what was fetched meanwhile is ready now
        while True:
            msg = self._next_ready()
            if msg is not None:
                return msg
            remaining = deadline - time.monotonic()
            if remaining <= 0 and polled:
                raise Timeout(f"no message for subscription {self.subscription!r} within {timeout_millis} ms")
            self._fill(max(0.0, min(remaining, 0.1)))
            polled = True

    def batch_receive(self, max_messages: int = 100, timeout_millis: int = 100) -> list[Message[T]]:
        """Up to ``max_messages`` messages, waiting at most ``timeout_millis`` (maybe none)."""
        out: list[Message[T]] = []
        _args.integer(max_messages, "max_messages", minimum=1)
        deadline = time.monotonic() + _args.millis(timeout_millis, "timeout_millis") / 1000
        polled = False
        while len(out) < max_messages:
            try:
                msg = self._next_ready()
            except Exception as exc:
                if not out:
                    raise
                # A failed dead-letter send (that message comes round again): the messages this
                # call already took are delivered, not lost with the exception.
                log.warning("%s: %s; returning the %d messages received", self.subscription, exc, len(out))
                break
            if msg is not None:
                out.append(msg)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 and polled:
                break
            self._fill(max(0.0, min(remaining, 0.05)))
            polled = True
        return out

    def _decode(self, rec: Any) -> Message[T]:
        msg: Message[T] = Message.from_record(rec, schema=self.schema)
        return msg

    def _fill(self, timeout: float) -> None:
        self._last_fill = time.monotonic()
        with self._read_lock:
            with self._lock:
                self._check_open()
                wait = timeout if not self._incoming else 0
                assigned = bool(self._parts)
            # Not under _lock: the poll may wait. Revocations and seeks wait for it (_read_lock), so
            # nothing read here is stale when it is queued.
            records = self._reader.poll(wait, _POLL_RECORDS) if assigned else []
            decoded = [self._decode(r) for r in records]
            with self._lock:
                self._incoming.extend(decoded)
        if not records:
            time.sleep(0.005 if self._parts else timeout)

    def _fill_when_idle(self) -> None:
        """The upkeep thread's poll for an application that has not polled for a while (idle gate
        only): lets the gate close, so an unpolled consumer does not spin on a broker that answers
        empty fetches at once. Takes what it reads into the queue of received messages only while
        that holds less than one poll's worth, so it never holds more than two beyond librdkafka's
        own queue (whose bound stops the fetching). Never waits for the application's poll."""
        if not self._read_lock.acquire(blocking=False):
            return  # the application is polling
        try:
            with self._lock:
                if self._closed or len(self._incoming) >= _POLL_RECORDS or not self._parts:
                    return
            records = self._reader.poll(0, _POLL_RECORDS)
            decoded = [self._decode(r) for r in records]
            with self._lock:
                self._incoming.extend(decoded)
        finally:
            self._last_fill = time.monotonic()
            self._read_lock.release()

    def _next_ready(self) -> Message[T] | None:
        while True:
            dead: list[tuple[Message[T], _Part]] = []
            msg = self._pick(dead)
            if not dead:
                return msg
            # Not under _lock: the dead-letter send is completed by the delivery thread, which also
            # runs callbacks that take _lock (pending-ack writes). If it fails, it raises, and no
            # message was picked (delivered) in this round to be lost with the exception.
            self._dead_letter_all(dead)

    def _pick(self, dead: list[tuple[Message[T], _Part]]) -> Message[T] | None:
        """The next deliverable message, recorded as delivered; None once one is found dead (in
        ``dead``), so that none is picked before the dead-letter send has succeeded."""
        with self._lock:
            now = time.monotonic()
            while self._redeliveries and self._redeliveries[0].due <= now:
                msg = heapq.heappop(self._redeliveries).message
                if self._deliverable(msg, dead):
                    return self._delivered(msg, now)
                if dead:
                    return None
            while self._incoming:
                msg = self._incoming.popleft()
                if self._deliverable(msg, dead):
                    return self._delivered(msg, now)
                if dead:
                    return None
        return None

    def _deliverable(self, msg: Message[T], dead: list[tuple[Message[T], _Part]]) -> bool:
        mid = msg.message_id
        part = self._parts.get((mid.topic, mid.partition))
        if part is None or part.cursor.is_acked(mid.offset) or part.pending.is_pending(mid.offset):
            return False
        key = (mid.topic, mid.partition, mid.offset)
        count = self._redelivery_counts.get(key, 0)
        if self._dlq is not None and count > self._dlq.max_redeliver_count:
            dead.append((msg, part))
            return False
        return True

    def _dead_letter_all(self, dead: list[tuple[Message[T], _Part]]) -> None:
        for i, (msg, part) in enumerate(dead):
            try:
                self._dead_letter(msg, part)
            except BaseException:
                # Not lost: this one and the rest come round again (their counts unchanged).
                with self._lock:
                    for later, _part in dead[i:]:
                        self._requeue(later, 1.0)
                raise

    def _delivered(self, msg: Message[T], now: float) -> Message[T]:
        mid = msg.message_id
        key = (mid.topic, mid.partition, mid.offset)
        count = self._redelivery_counts.get(key, 0)
        if count != msg.redelivery_count:
            msg = dataclasses.replace(msg, redelivery_count=count)
        self._unacked[key] = (msg, now)
        return msg

    def _dead_letter(self, msg: Message[T], part: _Part) -> None:
        assert self._dlq is not None
        name = self._kafka_topics[msg.message_id.topic]
        dlq = self._dlq.dead_letter_topic or f"{name.base}-{self.subscription}-DLQ"
        self._client.create_topic(dlq, 1)
        props = dict(msg.properties)
        props.update({"REAL_TOPIC": str(name.base), "ORIGIN_MESSAGE_ID": str(msg.message_id)})
        # The raw payload with its schema header, so the DLQ decodes with the original schema.
        sent = self._client._dlq_producer(dlq)._send_payload(
            msg.data, msg.schema_header, None, None, props, msg.partition_key, msg.event_timestamp
        )
        try:
            sent.result(self._client.operation_timeout_seconds)
        except TimeoutError:
            raise Timeout(f"dead-letter send of {msg.message_id} to {dlq} not stored in time") from None
        with self._lock:
            self._ack_offset(part, msg.message_id.offset)
        log.info(
            "%s: %s moved to %s after %d redeliveries",
            self.subscription,
            msg.message_id,
            dlq,
            self._dlq.max_redeliver_count,
        )

    # ------------------------------------------------------------------ acknowledging
    def _part_for(self, mid: MessageId) -> _Part:
        part = self._parts.get((mid.topic, mid.partition))
        if part is None:
            if mid.topic not in self._kafka_topics:
                raise NotAllowedError(
                    f"cannot acknowledge {mid}: {mid.topic!r} is not subscribed by {self.subscription!r}"
                )
            raise NotAllowedError(
                f"cannot acknowledge {mid}: partition {mid.topic}[{mid.partition}] is no longer assigned to "
                f"this consumer of {self.subscription!r} (it moved to another consumer, which redelivers "
                "it), or the topic has no such partition"
            )
        return part

    def _readable_part_for(self, mid: MessageId) -> _Part:
        """``_part_for``, refusing an offset at or past the partition's readable end: no message is
        there (yet), and an ack stored for it would swallow the message written there later."""
        part = self._part_for(mid)
        end = self._reader.readable_end(*part.tp)
        if mid.offset >= end:
            raise _NotReadableYet(mid, part.tp, end)
        return part

    def _caught_up(self, refused: _NotReadableYet, ack: Callable[[], R]) -> R:
        """``ack`` refused an id past the readable end this consumer knows: bring that partition's
        read state up to date (outside ``_lock``) and run it once more. The end is only as far as
        this consumer has scanned: an id of a message received before a restart (or elsewhere) is
        at or above it until the next receive, yet readable."""
        if not self._catch_up(refused.tp, refused.mid.offset):
            raise NotAllowedError(str(refused)) from None  # the public error, not our marker class
        try:
            return ack()
        except _NotReadableYet as exc:
            raise NotAllowedError(str(exc)) from None

    def _catch_up(self, tp: TP, offset: int) -> bool:
        deadline = time.monotonic() + self._client.operation_timeout_seconds
        while time.monotonic() < deadline:
            # A receive in another thread may hold the reader: it scans too; look again after it.
            if self._read_lock.acquire(timeout=0.05):
                try:
                    if tp not in self._parts:
                        return False  # revoked meanwhile: the retry refuses it as such
                    return self._reader.catch_up(tp[0], tp[1], offset, deadline)
                except StoreError as exc:
                    log.warning("%s: reading %s[%d] up to %d failed: %s", self.subscription, *tp, offset, exc)
                    return False
                finally:
                    self._read_lock.release()
            if self._reader.readable_end(*tp) > offset:
                return True
        return False

    def acknowledge(
        self,
        message: Message[Any] | MessageId | Sequence[Message[Any] | MessageId],
        txn: Transaction | None = None,
    ) -> None:
        """Acknowledge one message, or several (like Java's ``acknowledge(List<MessageId>)``); with
        ``txn``, as part of that transaction (``TransactionConflict`` if another transaction holds
        one, ``InvalidTxnStatusError`` if ``txn`` is not open). With ``txn`` this returns once the
        pending ack is stored, as Pulsar's broker answers a transactional ack: a commit from anywhere
        (e.g. by TxnID, after this process died) then includes it. ``acknowledge_async`` does not
        wait; the ids of one partition in one call are checked and written together."""
        if txn is None:  # the hot path of plain acks: no future, no wait
            self._ack_plain(self._with_topic(_message_ids(message)))
            return
        _wait_ack(self.acknowledge_async(message, txn), self._client.operation_timeout_seconds)

    def acknowledge_async(
        self,
        message: Message[Any] | MessageId | Sequence[Message[Any] | MessageId],
        txn: Transaction | None = None,
    ) -> Future[None]:
        """``acknowledge`` without waiting (Java's ``acknowledgeAsync``): conflicts and bad ids raise
        here; with ``txn`` the future resolves once the pending ack is stored (transactional acks
        made while one of the transaction's writes is in flight go out together, in one record),
        and fails if it cannot be (the transaction's commit then aborts). Without ``txn`` it is
        done at once (plain acks are made durable in the background, as Pulsar groups them)."""
        mids = self._with_topic(_message_ids(message))
        if txn is not None:
            _args.instance(txn, Transaction, "txn")
            by_partition: dict[tuple[str, int], list[MessageId]] = {}
            for mid in mids:
                by_partition.setdefault((mid.topic, mid.partition), []).append(mid)
            return _all_of([self._ack_in_txn(txn, AckKind.INDIVIDUAL, g) for g in by_partition.values()])
        self._ack_plain(mids)
        return _all_of([])

    def _ack_plain(self, mids: list[MessageId]) -> None:
        try:  # the hot path: no closure unless refused
            self._ack_plain_now(mids)
        except _NotReadableYet as exc:
            self._caught_up(exc, lambda: self._ack_plain_now(mids))

    def _ack_plain_now(self, mids: list[MessageId]) -> None:
        with self._lock:
            parts = [self._readable_part_for(mid) for mid in mids]  # all checked before any applies
            for part, mid in zip(parts, mids, strict=True):
                self._ack_offset(part, mid.offset)

    def acknowledge_cumulative(
        self, message: Message[Any] | MessageId | Sequence[MessageId], txn: Transaction | None = None
    ) -> None:
        """Acknowledge every message of the partition up to and including this one; with ``txn``,
        as part of that transaction, returning once the pending ack is stored."""
        if txn is None:
            self._ack_cumulative_plain(self._with_topic(_message_ids(message)))
            return
        _wait_ack(self.acknowledge_cumulative_async(message, txn), self._client.operation_timeout_seconds)

    def acknowledge_cumulative_async(
        self, message: Message[Any] | MessageId | Sequence[MessageId], txn: Transaction | None = None
    ) -> Future[None]:
        """``acknowledge_cumulative`` without waiting (Java's ``acknowledgeCumulativeAsync``); the
        future as for ``acknowledge_async``."""
        mids = self._with_topic(_message_ids(message))
        if txn is not None:
            _args.instance(txn, Transaction, "txn")
            return _all_of([self._ack_in_txn(txn, AckKind.CUMULATIVE, mids)])
        self._ack_cumulative_plain(mids)
        return _all_of([])

    def _ack_cumulative_plain(self, mids: list[MessageId]) -> None:
        if len(mids) != 1:
            raise NotAllowedError("a cumulative ack takes exactly one message id")
        mid = mids[0]
        try:
            self._ack_cumulative_now(mid)
        except _NotReadableYet as exc:
            self._caught_up(exc, lambda: self._ack_cumulative_now(mid))

    def _ack_cumulative_now(self, mid: MessageId) -> None:
        with self._lock:
            part = self._readable_part_for(mid)
            part.cursor.ack_cumulative(mid.offset)
            part.dirty = True
            self._unacked.take_upto(part.tp, mid.offset)

    def _with_topic(self, mids: list[MessageId]) -> list[MessageId]:
        """Ids as given, an id without a topic (made from numbers, e.g. ``MessageId(partition,
        offset)``) taken as this subscription's topic, as ``seek`` does; refused if it has several."""
        if all(m.topic for m in mids):
            return mids
        if len(self.topics) != 1:
            raise NotAllowedError(
                f"a MessageId without a topic is ambiguous for subscription {self.subscription!r} "
                f"of {len(self.topics)} topics"
            )
        topic = self.topics[0].kafka_topic
        return [m if m.topic else new_message_id(topic, m.partition, m.offset) for m in mids]

    def _ack_offset(self, part: _Part, offset: int) -> None:
        part.cursor.ack(offset)
        part.dirty = True
        key = (part.tp[0], part.tp[1], offset)
        self._unacked.pop(key, None)
        self._redelivery_counts.pop(key, None)

    def _ack_in_txn(self, txn: Transaction, kind: AckKind, mids: Sequence[MessageId]) -> Future[None]:
        """As in Pulsar, every transactional ack is an operation of the transaction: one that fails,
        for whatever reason, makes its commit abort (an application catching the error cannot
        commit the output of messages whose acks did not take). Returns the future of the write
        that stores these acks."""
        try:
            sub_topic = self._txn_ack_topic(kind, mids)
        except PulsarTxnError as exc:
            txn.record_failure(exc)
            raise
        # Counted from here until tracked: a commit beginning meanwhile waits for this ack's write.
        registered = txn.begin_ack(str(sub_topic), self.subscription)
        try:
            return self._ack_counted(txn, kind, mids, registered)
        except PulsarTxnError as exc:
            txn.record_failure(exc)  # before op_finished: a commit waiting on it then sees the failure
            raise
        finally:
            txn.op_finished(None)

    def _txn_ack_topic(self, kind: AckKind, mids: Sequence[MessageId]) -> TopicName:
        """What the transaction registers for these acks (raises if they cannot be made here)."""
        if not mids:
            raise NotAllowedError("nothing to acknowledge")
        if kind is AckKind.CUMULATIVE and len(mids) != 1:
            raise NotAllowedError("a cumulative ack in a transaction takes exactly one message id")
        if len(mids) > 1 and len({(m.topic, m.partition) for m in mids}) != 1:
            raise NotAllowedError("acknowledge messages of one partition per call")
        first = mids[0]
        name = self._kafka_topics.get(first.topic)
        if name is None:
            raise NotAllowedError(
                f"cannot acknowledge {first}: {first.topic!r} is not subscribed by {self.subscription!r}"
            )
        # Like Pulsar's client, a partitioned topic's subscription joins the transaction per partition:
        # the TC then ends it in that partition's pending-ack log only, not in all of them. A partition
        # beyond the cached count is looked up (the topic grew), so a whole-topic registration always
        # means acks in partition 0 only: the TC ends it without looking the log's partitions up again.
        in_partition = name.base.with_partition(first.partition)
        if first.partition > 0 or self._client._partition_count(in_partition) > 1:
            return in_partition
        return name.base

    def _ack_counted(
        self, txn: Transaction, kind: AckKind, mids: Sequence[MessageId], registered: Future[None]
    ) -> Future[None]:
        first = mids[0]
        offsets = [m.offset for m in mids]
        last = max(mids, key=lambda m: m.offset)

        def readable() -> _Part:
            with self._lock:
                return self._readable_part_for(last)

        try:
            part = readable()
        except _NotReadableYet as exc:
            part = self._caught_up(exc, readable)
        # The log must exist before the transaction ends: the TC writes its outcome marker only to an
        # existing pending-ack log, and that marker is what releases these acks here (e.g. on timeout).
        try:
            self._ensure_pa_topic(part)
        except StoreError as exc:
            raise PersistenceError(
                f"cannot create pending-ack log {part.pa_topic}: {exc}", retriable=True
            ) from None
        with self._lock:
            # Again: a rebalance may have revoked (or re-opened) the partition meanwhile. The batch is
            # made under the same lock, so a revocation either writes it or refuses this ack.
            part = self._part_for(first)
            if part.fold.has_ended(txn.txn_id):
                # Its outcome is in the log already (ended elsewhere: another client, a timeout): an
                # ack written now belongs to no outcome and would hold the message pending for good.
                raise InvalidTxnStatusError(
                    f"transaction {txn.txn_id} has ended: its outcome reached subscription "
                    f"{self.subscription!r} on {part.tp[0]}[{part.tp[1]}] before this ack"
                )
            part.pending.check(txn.txn_id, kind, offsets)
            part.pending.apply_ack(txn.txn_id, kind, offsets)
            if kind is AckKind.CUMULATIVE:
                self._cum_txns.add((txn.txn_id, part.tp))
            self._txn_parts.setdefault(txn.txn_id, {})[part.tp] = part
            self._txn_handles[txn.txn_id] = txn
            held = self._txn_offsets.setdefault(txn.txn_id, {}).setdefault(part.tp, [])
            topic, partition = first.topic, first.partition
            take, in_txn = self._unacked.pop, self._in_txn
            if kind is AckKind.CUMULATIVE:
                # Every delivered message up to the position is pending now, not only the position:
                # the ack timeout must not redeliver (and count) them while the transaction is open.
                taken = self._unacked.take_upto((topic, partition), offsets[0])
            else:
                taken = [
                    (key, entry)
                    for key in ((topic, partition, o) for o in offsets)
                    if (entry := take(key, None))
                ]
            for key, entry in taken:
                in_txn[key] = entry[0]
                held.append(key[2])
            now, written = self._batch_ack(txn, part, kind, offsets, registered)
        if now:
            self._flush_batch((txn.txn_id, part.tp, kind), txn, part)
        return written

    def _batch_ack(
        self, txn: Transaction, part: _Part, kind: AckKind, offsets: list[int], registered: Future[None]
    ) -> tuple[bool, Future[None]]:
        """Acks of one transaction on one partition go into one PendingAck record, written at once
        (True: write it now) unless a record of the same transaction, partition and kind is being
        written: then once that write ended, or when the transaction waits for its operations
        (commit/abort), or when the batch grows large. Returns that and the batch's write future.
        Under ``_lock``."""
        key = (txn.txn_id, part.tp, kind)
        batch = self._ack_batches.get(key)
        if batch is not None:
            batch.offsets.extend(offsets)
        else:
            # Made with its offsets in: if the transaction's end has begun (on another thread, while
            # this ack was counted), the hook writes the batch at once and the end waits for it.
            batch = self._ack_batches[key] = _AckBatch(registered, list(offsets))
            batch.flush = flush = lambda: self._flush_batch(key, txn, part)
            txn.track(batch.written)
            txn.add_end_listener(self._txn_ended)
            txn.add_commit_check(self._ownership_check)
            txn.add_flush_hook(flush)
        # As Pulsar's client sends a transactional ack at once: its write overlaps with what follows
        # instead of lengthening the commit, and the caller learns when it is stored.
        now = key not in self._ack_writing or len(batch.offsets) >= _ACK_BATCH_MAX
        return now, batch.written

    def _encoded_ack(
        self, part: _Part, txn_id: TxnID, kind: AckKind, offsets: Sequence[int]
    ) -> tuple[bytes, list[tuple[str, bytes]]]:
        """A PendingAck record for ``part``'s partition of its log (signed with the marker secret)."""
        return encode_pending_ack(
            txn_id,
            kind,
            offsets,
            topic=part.pa_topic,
            partition=part.tp[1],
            secret=self._client._secret,
            owner=part.fold.owner,
        )

    def _flush_batch(self, key: tuple[TxnID, TP, AckKind], txn: Transaction, part: _Part) -> None:
        with self._lock:
            batch = self._ack_batches.pop(key, None)
            if batch is None or not batch.offsets:
                return
            part.inflight.add(batch.written)
            self._ack_writing.add(key)
        value, headers = self._encoded_ack(part, txn.txn_id, key[2], batch.offsets)
        written = batch.written

        def ended() -> Callable[[], None] | None:
            """Under ``_lock``: this write is over. Returns the flush of the acks gathered meanwhile,
            to call once the lock is released (on the appender's delivery thread, which is safe:
            the appender never blocks its own thread for room)."""
            part.inflight.discard(written)
            self._ack_writing.discard(key)
            follower = self._ack_batches.get(key)
            return follower.flush if follower is not None else None

        def failed(exc: BaseException) -> None:
            with self._lock:  # counted down before anyone waiting on ``written`` wakes
                follow = ended()
            try:
                settle(written, exc)
            finally:
                if follow is not None:
                    follow()

        def write(reg: Future[None]) -> None:
            exc = reg.exception()
            if exc is not None:
                failed(joining_failed(exc))
                return
            try:
                self._ensure_pa_topic(part)
            except PulsarTxnError as err:
                failed(err)
                return

            def stored(offset: int | None, error: StoreError | None) -> None:
                if error is not None or offset is None:
                    failed(PersistenceError(f"pending ack write failed: {error}"))
                    return
                with self._lock:
                    part.fold.note_written(txn.txn_id, offset)
                    follow = ended()
                try:
                    settle(written, None)
                finally:
                    if follow is not None:
                        follow()

            self._client._appender().append_cb(
                part.pa_topic, part.tp[1], value, headers=headers, callback=stored
            )

        batch.registered.add_done_callback(write)

    def _pa_partition_count(self, pa_topic: str) -> int:
        try:
            return self._client._admin.partition_count(pa_topic)
        except TopicNotFoundError:
            return 0

    def _note_pa_partitions(self, pa_topic: str, count: int) -> None:
        self._pa_topics_ready.update((pa_topic, p) for p in range(count))

    def _ensure_pa_topic(self, part: _Part) -> None:
        """The part's partition of its pending-ack log exists, and the tail reads it."""
        if (part.pa_topic, part.tp[1]) in self._pa_topics_ready:
            return
        # Named by partition: a partition beyond the cached count makes the client look again (the
        # data topic grew after this consumer learnt its count; the log must grow with it).
        data = self._kafka_topics[part.tp[0]].base.with_partition(part.tp[1])
        count = self._client._partition_count(data)
        if self._client._admin.ensure_topic(part.pa_topic, count, PENDING_ACK_TOPIC_CONFIGS) < count:
            # Partitioned like the data topic (e.g. after the data topic grew).
            self._client._admin.add_partitions(part.pa_topic, count)
        with self._lock, self._pa_lock:
            for tp, p in self._parts.items():
                if (
                    p.pa_topic == part.pa_topic
                    and tp[1] < count
                    and (p.pa_topic, tp[1]) not in self._pa_topics_ready
                ):
                    self._pa().add(p.pa_topic, tp[1], p.fold.next_offset)
            self._note_pa_partitions(part.pa_topic, count)

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"consumer {self.consumer_name} of {self.subscription!r} is closed")

    def negative_acknowledge(self, message: Message[Any] | MessageId) -> None:
        """Redeliver the message after ``negative_ack_redelivery_delay_ms``."""
        self._check_open()
        ids = _message_ids(message)
        if len(ids) != 1:
            raise ConfigError("negative_acknowledge takes one message or message id")
        (mid,) = self._with_topic(ids)
        with self._lock:
            key = (mid.topic, mid.partition, mid.offset)
            entry = self._unacked.pop(key, None)
            if entry is not None:
                self._redeliver(entry[0], self._nack_delay)

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every delivered, unacknowledged message now."""
        self._check_open()
        with self._lock:
            for msg, _at in self._unacked.values():
                self._redeliver(msg, 0)
            self._unacked.clear()

    def _redeliver(self, msg: Message[T], delay: float) -> None:
        mid = msg.message_id
        key = (mid.topic, mid.partition, mid.offset)
        self._redelivery_counts[key] = self._redelivery_counts.get(key, 0) + 1
        self._requeue(msg, delay)

    def _requeue(self, msg: Message[T], delay: float) -> None:
        """Deliver ``msg`` again after ``delay``, its redelivery count as it is."""
        heapq.heappush(self._redeliveries, _Redelivery(time.monotonic() + delay, next(self._seq), msg))

    # ------------------------------------------------------------------ background upkeep
    def _maintain(self) -> None:
        next_flush = 0.0
        while not self._closed:
            try:
                self._apply_outcomes()
                with self._lock:
                    refetch, self._refetch_due = self._refetch_due, []
                for tp, offsets in refetch:
                    self._refetch(tp, offsets)
                now = time.monotonic()
                if self._idle_fill_s and now - self._last_fill >= self._idle_fill_s:
                    self._fill_when_idle()
                if self._ack_timeout > 0:
                    self._expire_unacked(now)
                self._release_stale()
                if self._pattern is not None and now >= self._next_discovery:
                    self._next_discovery = now + self._discovery_period
                    self._discover_topics(self._pattern)
                if now >= next_flush:
                    with self._lock:
                        parts = list(self._parts.values())
                    for part in parts:
                        if part.dirty:
                            self._flush_part(part)
                        elif part.trim_ready > part.trimmed and now >= part.trim_due:
                            self._trim(part, part.trim_ready)  # held back by the interval, now due
                    next_flush = now + 0.1
            except Exception:  # upkeep must go on; the next round retries
                log.exception("subscription %s: upkeep failed", self.subscription)
            time.sleep(0.02)

    def _subscribable(self, topics: Sequence[TopicName], subscription: str, matched: bool) -> list[TopicName]:
        """The topics whose pending-ack log name (``<topic>-<subscription>__transaction_pending_ack``)
        Kafka accepts: with another, a partition could never be opened (retried for good, nothing
        delivered). Named topics: ``InvalidTopicName``; topics a pattern matched are left out, with a
        warning once each, so one long name does not stop the others."""
        out = []
        for topic in topics:
            try:
                check_subscription(str(topic), subscription)
            except InvalidTopicName as exc:
                if not matched:
                    raise
                if str(topic) not in self._left_out:
                    self._left_out.add(str(topic))
                    log.warning("subscription %s: topic left out: %s", subscription, exc)
                continue
            out.append(topic)
        return out

    def _discover_topics(self, pattern: re.Pattern[str]) -> None:
        """Follow the topics that match ``pattern`` now (see ``__init__``); the Kafka names of topics
        once subscribed stay known, so that acks and records of partitions being revoked still map."""
        try:
            matched = self._subscribable(self._client._matching_topics(pattern), self.subscription, True)
            found = {t.kafka_topic: t for t in matched}
        except (PulsarTxnError, StoreError) as exc:  # the broker is away: look again next period
            log.warning(
                "subscription %s: looking for topics matching %r failed: %s",
                self.subscription,
                pattern.pattern,
                exc,
            )
            return
        current = [t.kafka_topic for t in self.topics]
        if not found or set(found) == set(current):
            return  # every matched topic deleted: a Kafka subscription cannot be empty, keep it as is
        added = [t for k, t in sorted(found.items()) if k not in current]
        for t in added:
            try:
                self._client._partition_count(t, refresh=True)
            except (PulsarTxnError, StoreError) as exc:  # listed but not yet described: next period
                log.info("subscription %s: new topic %s not ready: %s", self.subscription, t, exc)
                return
        with self._lock:
            for t in added:
                self._kafka_topics[t.kafka_topic] = t
                self._pa_to_data[pending_ack_topic(t, self.subscription)] = t.kafka_topic
            self.topics = [t for t in self.topics if t.kafka_topic in found] + added
        log.info(
            "subscription %s: pattern %r now matches %s (added %s, removed %s)",
            self.subscription,
            pattern.pattern,
            [str(t) for t in self.topics],
            [str(t) for t in added],
            sorted(set(current) - set(found)),
        )
        self._group.set_topics([t.kafka_topic for t in self.topics])

    def _apply_outcomes(self) -> None:
        with self._pa_lock:  # not under _lock: opening the tail's idle gate may poll for a few ms
            if self._pa_reader is None or not self._pa_topics_ready:
                return
            records = self._pa_reader.poll_batch(1000, 0)
        # A partition revoked (or re-opened) meanwhile: its records are skipped (or applied again,
        # which outcome records tolerate).
        dropped: list[Future[None]] = []
        with self._lock:
            for rec in records:
                part = self._parts.get((self._pa_to_data.get(rec.topic, ""), rec.partition))
                if part is None or part.pa_topic != rec.topic:
                    continue
                try:
                    outcomes = part.fold.apply(rec, live=True)
                except Exception:  # a bug on one record must not drop the others of the batch
                    log.exception(
                        "%s: folding %s[%d]@%d failed",
                        self.subscription,
                        rec.topic,
                        rec.partition,
                        rec.offset,
                    )
                    continue
                for txn_id, action, released in outcomes:
                    part.dirty = True
                    # The same rules as an outcome from END_TXN: a released message that is delivered
                    # and not acked (e.g. below a cumulative ack) stays the application's, no refetch.
                    self._after_outcome(part, txn_id, action, released, dropped)
        _complete(dropped)

    def _release_stale(self) -> None:
        """Release transactions pending here whose TC aborted them (``StalePendingCheck``)."""
        if not self._stale.observing():  # the upkeep loop runs every 20 ms; this need not
            return
        with self._lock:
            # Our own transactions too once their end failed for good (ERROR: e.g. ended elsewhere
            # before an ack written after its outcome): no end listener releases those acks.
            pending = {
                t
                for p in self._parts.values()
                for t in p.pending.pending_txns()
                if t not in self._txn_parts or self._txn_handles[t].state is TransactionState.ERROR
            }
        due = self._stale.due(pending)
        if not due:
            return
        try:
            aborted = self._stale.aborted(due)  # reads Kafka: outside the locks
        except StoreError as exc:
            log.warning("%s: looking up pending transactions failed (retried): %s", self.subscription, exc)
            return
        for txn_id in aborted:
            log.warning(
                "%s: %s was pending here but its TC aborted it (its acks were written after its abort "
                "marker); released",
                self.subscription,
                txn_id,
            )
            self._txn_ended(txn_id, TxnAction.ABORT)

    def release_if_aborted(self, txn_ids: Collection[TxnID]) -> list[TxnID]:
        """Look ``txn_ids`` up in their TC's log now and release those it aborted (or forgot) here,
        without waiting ``pending_ack_check_after_ms``: for a caller that has just aborted them, e.g.
        the pipeline fencing off a previous run (an ack record written after its transaction's abort
        marker is released by nothing else). Returns the ones released."""
        try:
            aborted = self._stale.aborted(txn_ids)
        except StoreError as exc:
            raise from_store_error(exc, "looking up transactions in the transaction log") from None
        for txn_id in aborted:
            self._txn_ended(txn_id, TxnAction.ABORT)
        return aborted

    def _txn_ended(self, txn_id: TxnID, action: TxnAction) -> None:
        """An outcome learnt first-hand: straight from END_TXN of a transaction we acked in (applied
        now, so the caller sees its effect at once; Pulsar applies it before END_TXN returns), or from
        the TC's log (``_release_stale``). On END_TXN's path this runs on the thread that got its
        answer, which other answers wait for; ``_after_outcome`` leaves the reading to the upkeep
        thread."""
        dropped: list[Future[None]] = []
        with self._lock:
            for part in self._parts.values():
                released = part.fold.apply_outcome(txn_id, action)
                part.dirty = True
                self._after_outcome(part, txn_id, action, released, dropped)
        _complete(dropped)

    def _take_held(self, txn_id: TxnID, tp: TP) -> list[int] | None:
        """Remove and return the offsets ``txn_id`` moved into ``_in_txn`` on ``tp``."""
        by_tp = self._txn_offsets.get(txn_id)
        if by_tp is None:
            return None
        held = by_tp.pop(tp, None)
        if not by_tp:
            del self._txn_offsets[txn_id]
        return held

    def _after_outcome(
        self,
        part: _Part,
        txn_id: TxnID,
        action: TxnAction,
        released: Sequence[int],
        dropped: list[Future[None]],
    ) -> None:
        """Commit: forget the messages now acked. Abort: redeliver what we hold; the rest (released,
        never delivered here, e.g. after a restart) is queued for the upkeep thread to read again: a
        Kafka read does not belong under ``_lock``, nor on the thread that got END_TXN's answer."""
        held = self._take_held(txn_id, part.tp)
        self._txn_parts.pop(txn_id, None)
        self._txn_handles.pop(txn_id, None)
        # Acks of the ended txn still batched here are never written: after its marker they would
        # hold the messages pending (and pin the replay start) for good. Whoever waits is done, once
        # the caller has released ``_lock`` (a waiting end goes on from that callback).
        for kind in AckKind:
            batch = self._ack_batches.pop((txn_id, part.tp, kind), None)
            if batch is not None:
                dropped.append(batch.written)
        if action is TxnAction.COMMIT:
            topic, partition = part.tp
            counts = self._redelivery_counts
            for offset in held or ():
                if part.cursor.is_acked(offset):
                    self._in_txn.pop((topic, partition, offset), None)
                    counts.pop((topic, partition, offset), None)
            if (txn_id, part.tp) in self._cum_txns:
                self._cum_txns.discard((txn_id, part.tp))
                # A cumulative commit also acked every lower message still held as unacked here.
                md = part.cursor.mark_delete
                below = [k for k, _e in self._unacked.take_upto((topic, partition), md - 1)]
                below += [k for k in counts if k[0] == topic and k[1] == partition and k[2] < md]
                for k in below:
                    counts.pop(k, None)
            return
        cumulative = (txn_id, part.tp) in self._cum_txns
        self._cum_txns.discard((txn_id, part.tp))
        missing = []
        queued: set[int] | None = None
        for offset in released:
            key = (part.tp[0], part.tp[1], offset)
            msg = self._in_txn.pop(key, None)
            if msg is not None:
                self._redeliver(msg, 0)
            elif key not in self._unacked:  # delivered and unacked: still the application's
                if queued is None:
                    queued = self._queued_offsets(part.tp)
                if offset not in queued:  # read ahead and queued here: delivered from the queue
                    missing.append(offset)
        if cumulative:
            # As Pulsar's pending-ack handle on a cumulative abort: every message of the partition
            # delivered here and not acked comes again (and counts toward max redeliveries), not
            # only the acked position.
            topic, partition = part.tp
            for _key, (msg, _at) in self._unacked.take_partition((topic, partition)):
                self._redeliver(msg, 0)
        if missing:
            self._refetch_due.append((part.tp, missing))

    def _queued_offsets(self, tp: TP) -> set[int]:
        """Offsets of ``tp`` waiting here to be delivered (read ahead, or due for redelivery). Under
        ``_lock``."""
        return {
            m.message_id.offset
            for m in [*self._incoming, *(r.message for r in self._redeliveries)]
            if (m.message_id.topic, m.message_id.partition) == tp
        }

    def _held_here(self, tp: TP, offset: int) -> bool:
        """Whether the application holds the message now (delivered and unacked, or acked in a
        transaction): a refetch must not deliver it a second time. Under ``_lock``."""
        key = (tp[0], tp[1], offset)
        return key in self._unacked or key in self._in_txn

    def _refetch(self, tp: TP, offsets: list[int]) -> None:
        """Messages released by an abort that this process never delivered (e.g. after a restart)."""
        with self._read_lock, self._lock:
            if tp not in self._parts:
                return
            # Offsets the reader has not passed yet, or has queued, will be delivered anyway.
            ahead = self._reader.position(*tp)
            queued = self._queued_offsets(tp)
            wanted = {o for o in offsets if o < ahead and o not in queued}
        if not wanted:
            return
        lo, hi = min(wanted), max(wanted) + 1
        for rec in read_range(self._client.kafka, tp[0], tp[1], lo, hi):
            if rec.offset in wanted:
                with self._read_lock, self._lock:
                    part = self._parts.get(tp)
                    if (
                        part is not None
                        and part.pending.is_pending(rec.offset) is False
                        and not part.cursor.is_acked(rec.offset)
                        # delivered since (it was queued when the abort came): not again
                        and not self._held_here(tp, rec.offset)
                        and self._reader.visible(tp[0], tp[1], rec.offset, rec.headers)
                    ):
                        self._redeliver(self._decode(rec), 0)

    def _expire_unacked(self, now: float) -> None:
        with self._lock:
            expired = [k for k, (_m, at) in self._unacked.items() if now - at >= self._ack_timeout]
            for key in expired:
                entry = self._unacked.pop(key)
                if entry is not None:
                    self._redeliver(entry[0], 0)

    def _flush_part(self, part: _Part, *, force: bool = False, in_callback: bool = False) -> bool:
        """Commit the partition's cursor if it changed (or ``force``); False if the commit failed.

        The group commits what it is handed in the order it is handed over, so the snapshot is taken
        and handed over under ``_commit_lock``: an older cursor is never committed after a newer one
        (before, the upkeep's flush could land after a seek's commit and undo the seek). A rebalance
        callback (``in_callback``: on the group's thread, maybe under ``_lock``) commits at once
        without it, as a commit handed over meanwhile waits for the callback to return: one of a
        revoked partition is then dropped; one of a partition kept may land after this commit, so
        the cursor is committed again after it. Outside callbacks, only a partition still held is
        committed (the upkeep may hold one revoked meanwhile, whose cursor is no longer ours)."""
        if in_callback:
            done = self._hand_over([part], force, held_only=False)
            ok = self._committed_in_time(done)
            with self._lock:
                if ok and self._parts.get(part.tp) is part:
                    part.dirty = True
            return ok
        with self._commit_lock:
            done = self._hand_over([part], force, held_only=True)
        return self._committed_in_time(done)

    def _hand_over(self, parts: Sequence[_Part], force: bool, *, held_only: bool) -> Future[None] | None:
        """Snapshot the cursors and hand them to the group (None: nothing to commit). The returned
        future fails with StoreError if the group refused them."""
        offsets: dict[TP, tuple[int, str]] = {}
        trims: dict[TP, int] = {}
        with self._lock:
            for part in parts:
                if (not part.dirty and not force) or (held_only and self._parts.get(part.tp) is not part):
                    continue
                ranges, dropped = part.cursor.encode_ranges()
                if dropped:
                    log.warning(
                        "%s %s: %d acked ranges too many to persist in the cursor; plain acks there may be "
                        "redelivered after a restart (committed transactions' acks are redone from the "
                        "pending-ack log)",
                        self.subscription,
                        part.tp,
                        dropped,
                    )
                part.fold.forget_committed_below(part.cursor.mark_delete)
                start = part.fold.replay_start(part.cursor.unpersisted_from(dropped))
                # Of the state this cursor holds: recovery reads from here, the trim cuts below it.
                trims[part.tp] = part.fold.trim_point()
                offsets[part.tp] = (part.cursor.mark_delete, join_metadata(start, trims[part.tp], ranges))
                part.dirty = False
        if not offsets:
            return None
        done = self._group.commit_async(offsets)
        by_tp = {p.tp: p for p in parts if p.tp in offsets}

        def landed(fut: Future[None]) -> None:
            failed = fut.exception() is not None
            with self._lock:
                for tp, part in by_tp.items():
                    if failed:
                        part.dirty = True
                    else:
                        part.committed = offsets[tp]
            if not failed:
                for tp, part in by_tp.items():
                    self._trim(part, trims[tp])

        done.add_done_callback(landed)
        return done

    def _trim(self, part: _Part, below: int) -> None:
        """Delete the part's pending-ack log below ``below``, now that a cursor committed to the group
        holds every ack of the records there (at most every ``_TRIM_INTERVAL_S``; never waits)."""
        now = time.monotonic()
        with self._lock:
            if below <= part.trimmed:
                return
            if now < part.trim_due:
                part.trim_ready = max(part.trim_ready, below)
                return
            if (part.pa_topic, part.tp[1]) not in self._pa_topics_ready:
                return  # no log yet (nothing was ever acked in a transaction here)
            before = part.trimmed
            part.trimmed, part.trim_due = below, now + _TRIM_INTERVAL_S
        pa_topic, partition = part.pa_topic, part.tp[1]

        def answered(fut: Future[None]) -> None:
            exc = fut.exception()
            if exc is not None:
                log.warning(
                    "%s: trimming %s[%d] below %d failed: %s",
                    self.subscription,
                    pa_topic,
                    partition,
                    below,
                    exc,
                )
                with self._lock:  # the upkeep tries again once the interval has passed
                    part.trimmed = min(part.trimmed, before)
                    part.trim_ready = max(part.trim_ready, below)
            else:
                log.debug("%s: %s[%d] trimmed below %d", self.subscription, pa_topic, partition, below)

        self._client._admin.delete_records_before(pa_topic, partition, below).add_done_callback(answered)

    def _committed_in_time(self, done: Future[None] | None) -> bool:
        if done is None:
            return True
        try:
            done.result(self._client.kafka.request_timeout_ms / 1000)
        except TimeoutError:
            log.warning("%s: cursor commit timed out (will retry)", self.subscription)
            return False
        except StoreError as exc:
            log.warning("%s: cursor commit failed (will retry): %s", self.subscription, exc)
            return False
        return True

    def _ownership_check(self, txn_id: TxnID) -> Future[None]:
        """A transaction's commit check: this consumer still owns every partition it acked on in
        ``txn_id``, shown by committing their cursors as a member of the group, now that the ack
        records are stored. A consumer paused past its session (or fenced by a newer static member)
        has lost them without noticing; its successor may be processing the same messages, so the
        group refuses the commit and the transaction aborts. Once the commit has landed, a successor
        can only be assigned the partitions later, and then recovers these acks as pending."""
        result: Future[None] = LazyFuture()
        with self._lock:
            parts = list(self._txn_parts.get(txn_id, {}).values())
            held = [p for p in parts if self._parts.get(p.tp) is p]
            lost = [p.tp for p in parts if self._parts.get(p.tp) is not p and not p.handed_over]
        if lost:
            result.set_exception(
                TransactionConflict(
                    f"transaction {txn_id}: subscription {self.subscription!r} lost {lost} before its "
                    "acks there were handed over; another consumer may have processed those messages"
                )
            )
            return result
        with self._commit_lock:
            # Not held_only: a partition revoked or lost since ``held`` was taken must still be
            # committed, so that the group (which refuses partitions it no longer assigns us) decides,
            # instead of being left out of the check.
            done = self._hand_over(held, True, held_only=False)
        if done is None:
            result.set_result(None)
            return result

        def answered(fut: Future[None]) -> None:
            exc = fut.exception()
            if exc is None:
                result.set_result(None)
            elif isinstance(exc, StoreError) and not exc.retriable:
                result.set_exception(
                    TransactionConflict(
                        f"transaction {txn_id}: subscription {self.subscription!r} is no longer this "
                        f"consumer's ({exc}); another consumer may have processed the acked messages"
                    )
                )
            else:
                result.set_exception(
                    PersistenceError(f"transaction {txn_id}: ownership check failed: {exc}", retriable=True)
                )

        done.add_done_callback(answered)
        return result

    # ------------------------------------------------------------------ position and lifecycle
    def seek(self, message_id: MessageId | int) -> None:
        """Reset the subscription's cursor on that partition to ``message_id``; ``EARLIEST`` /
        ``LATEST``: on every partition assigned to this consumer, to its start / to now. An id
        without a topic means the subscription's topic (if it has one). An ``int`` is a publish time
        (ms since the epoch, Pulsar's ``seek(timestamp)``): every assigned partition goes to its
        first message published at or after it.

        Acks beyond the new position are forgotten, as Pulsar's seek does."""
        self._check_open()
        if isinstance(message_id, int) and not isinstance(message_id, bool):
            with self._lock:
                tps = list(self._parts)
            at = _args.publish_time(message_id, "seek's publish time")
            for tp, offset in offsets_for_time(self._client.kafka, tps, at).items():
                self._seek_to(new_message_id(*tp, offset))
            return
        if not isinstance(message_id, MessageId):
            raise ConfigError(f"seek takes a MessageId or a publish time in ms, not {message_id!r}")
        if message_id in (EARLIEST, LATEST):
            with self._lock:
                tps = list(self._parts)
            for tp in tps:
                offset = self._client._sentinel_offset(*tp, message_id, uncommitted=self._uncommitted)
                self._seek_to(new_message_id(*tp, offset))
            return
        if not message_id.topic and len(self.topics) == 1:
            message_id = new_message_id(self.topics[0].kafka_topic, message_id.partition, message_id.offset)
        self._seek_to(message_id, given=True)

    def _seek_to(self, message_id: MessageId, *, given: bool = False) -> None:
        """``given``: an id the application named, checked to lie within the partition (positions
        from EARLIEST / LATEST / a publish time always do, and need no end-offset request each)."""
        tp = (message_id.topic, message_id.partition)
        if given and message_id.offset < 0:
            raise ConfigError(f"cannot seek to {message_id}: a negative offset")
        with self._lock:
            part = self._parts.get(tp)
            if part is None:
                raise NotAllowedError(
                    f"cannot seek to {message_id}: partition {message_id.topic}[{message_id.partition}] "
                    f"is not assigned to this consumer of {self.subscription!r}"
                )
        if given:
            try:
                end = end_offsets(self._client.kafka, [tp])[tp]
            except StoreError as exc:
                raise from_store_error(exc, f"seek to {message_id}") from None
            if message_id.offset > end:
                # As Pulsar refuses a position past the ledger's end: the cursor would skip (and
                # commit past) the messages written there later.
                raise NotAllowedError(f"cannot seek to {message_id}: {tp[0]}[{tp[1]}] ends at offset {end}")
        carried = self._carry_pending_acks(part)
        with self._read_lock, self._lock:
            if self._parts.get(tp) is not part:
                part.fold.carry_abandon()
                raise NotAllowedError(f"cannot seek to {message_id}: the partition was revoked meanwhile")
            part.fold.carry_end(carried)
            part.cursor.reset(message_id.offset)
            part.dirty = True
            self._reader.seek(message_id.topic, message_id.partition, message_id.offset)
            self._forget_partition(part.tp)
        self._flush_part(part)

    def _carry_pending_acks(self, part: _Part) -> dict[TxnID, int]:
        """Before a seek: write the partition's pending acks again at the end of its pending-ack log
        (txn -> offset of its first such record). Recovery replays the log from the oldest pending
        transaction's first record; without this, a transaction open across the seek kept replay
        before the records of transactions that committed before it, and recovery applied those
        commits to the sought cursor again: the messages the seek made deliverable were lost."""
        self._write_ack_batches({part.tp})  # batched acks first: their records exist and are noted
        # Outcomes written meanwhile (a commit by id elsewhere) apply now, before the cursor resets:
        # carried as pending, such a commit would apply after the seek and swallow its messages.
        self._read_pending_acks_to_end(part)
        self._settle_ended_elsewhere(part)
        with self._lock:
            records = part.pending.pending_acks()
            if records:
                part.fold.carry_begin()
        if not records:
            return {}
        try:
            self._ensure_pa_topic(part)
            appender = self._client._appender()
            futures = []
            for txn, kind, offsets in records:
                value, headers = self._encoded_ack(part, txn, kind, offsets)
                futures.append((txn, appender.append(part.pa_topic, part.tp[1], value, headers=headers)))
            carried: dict[TxnID, int] = {}
            for txn, fut in futures:
                offset = fut.result(self._client.operation_timeout_seconds)
                carried[txn] = min(offset, carried.get(txn, offset))
        except (StoreError, PulsarTxnError, TimeoutError) as exc:
            with self._lock:
                part.fold.carry_abandon()  # the cursor stays: so does what its replay start needs
            raise PersistenceError(f"seek of {part.tp}: cannot carry its pending acks over: {exc}") from None
        return carried

    def _settle_ended_elsewhere(self, part: _Part) -> None:
        """Before a seek: transactions pending here that are not this consumer's own and whose
        outcome their TC has decided take it now (a TC whose log cannot be read is skipped, logged:
        its transactions are carried over as before). Their markers may not be in the log yet
        (END_TXN answered after the decision, the marker on its way: the consumer that committed
        applied the outcome, and the next owner found the ack records alone); carried over, such a
        commit would apply to the sought cursor once its marker came, and swallow messages the seek
        made deliverable."""
        with self._lock:
            foreign = [t for t in part.pending.pending_txns() if t not in self._txn_parts]
        if not foreign:
            return
        try:
            outcomes = self._stale.outcomes(foreign, decided=True)  # reads Kafka: outside the locks
        except StoreError as exc:  # no TC log could be read: carried over as before (logged)
            log.warning("%s: seek of %s: pending txns not looked up: %s", self.subscription, part.tp, exc)
            return
        for txn_id, action in outcomes.items():
            self._txn_ended(txn_id, action)

    def _read_pending_acks_to_end(self, part: _Part) -> None:
        """Before a seek with no transaction pending here: fold the partition's pending-ack log to
        its end, so that recovery replays from there. Replay otherwise started where the tail had
        read to, which can lie before the records (acks, then the TC's COMMIT marker) of a transaction
        that committed just before the seek: recovery applied that commit to the sought cursor again,
        and the messages the seek made deliverable were lost."""
        pa = (part.pa_topic, part.tp[1])
        with self._lock, self._pa_lock:
            if pa not in self._pa_topics_ready:
                return  # no log when the partition was opened, and none written since: nothing to skip
        try:
            end = end_offsets(self._client.kafka, [pa])[pa]
        except StoreError as exc:
            raise PersistenceError(
                f"seek of {part.tp}: cannot read its pending-ack log's end: {exc}"
            ) from None
        deadline = time.monotonic() + self._client.operation_timeout_seconds
        while True:
            with self._lock:
                if part.fold.read_all_but_own(end):
                    part.fold.next_offset = max(part.fold.next_offset, end)  # the rest are our own acks
                    return
            if time.monotonic() > deadline:
                raise Timeout(f"seek of {part.tp}: its pending-ack log was not read to its end in time")
            time.sleep(0.01)  # the upkeep thread reads the tail (one reader: records fold in order)

    def stats(self) -> dict[str, Any]:
        """Per-partition cursor and pending-ack counters of this consumer."""
        with self._lock:
            return {
                "subscription": self.subscription,
                "type": self.consumer_type.value,
                "partitions": {
                    f"{tp[0]}-partition-{tp[1]}": {
                        "mark_delete": p.cursor.mark_delete,
                        "acked_ranges": len(p.cursor.acked),
                        **p.pending.stats(),
                    }
                    for tp, p in sorted(self._parts.items())
                },
                "unacked": len(self._unacked),
                "pending_redeliveries": len(self._redeliveries),
            }

    def pending_transactions(self) -> dict[TxnID, int]:
        """Transactions holding pending acks on this consumer's partitions -> how many message ids."""
        with self._lock:
            total: dict[TxnID, int] = {}
            for part in self._parts.values():
                for txn, n in part.pending.pending_txns().items():
                    total[txn] = total.get(txn, 0) + n
            return total

    def assigned_partitions(self) -> list[TP]:
        """The (Kafka topic, partition) pairs this consumer holds now."""
        with self._lock:
            return sorted(self._parts)

    def close(self) -> None:
        """Persist the cursor and leave the subscription (it stays; see ``unsubscribe``)."""
        if self._closed:
            return
        self._write_ack_batches()
        self._closed = True
        self._maintenance.join(5)
        with self._lock:
            parts = list(self._parts.values())
        for part in parts:
            self._flush_part(part)
        self._group.stop()
        with self._read_lock, self._lock, self._pa_lock:
            self._reader.close()
            if self._pa_reader is not None:
                self._pa_reader.close()
        self._client._handle_closed(self)

    def _write_ack_batches(self, tps: Collection[TP] | None = None) -> None:
        """Acks made in still-open transactions must outlive this consumer, or its ownership of the
        partition (Pulsar sends them to the broker at once): write the batched ones (of ``tps``, or
        all) before closing or giving partitions up, so a successor sees them pending."""
        with self._lock:
            batches = [b for k, b in self._ack_batches.items() if tps is None or k[1] in tps]
            flying = [f for p in self._parts.values() if tps is None or p.tp in tps for f in p.inflight]
        if not batches and not flying:
            return
        for batch in batches:
            if batch.flush is not None:
                batch.flush()
        wait([*(b.written for b in batches), *flying], self._client.operation_timeout_seconds)
        for batch in batches:
            exc = batch.written.exception(0) if batch.written.done() else Timeout("not written in time")
            if exc is not None:  # the transaction sees the failure too and cannot commit
                log.warning("%s: transactional acks not written: %s", self.subscription, exc)

    def unsubscribe(self) -> None:
        """Close and delete the subscription (its consumer group and pending-ack logs).
        ``NotAllowedError``, with nothing deleted, if the group also holds the cursors of a
        same-named subscription on other topics (deleting the group would delete those too), or
        if other consumers are connected to it (Pulsar refuses that too); this one stays open then."""
        try:
            members = self._other_members()
        except StoreError as exc:
            raise PersistenceError(f"unsubscribe {self.subscription!r}: {exc}") from None
        if members:
            raise NotAllowedError(
                f"cannot unsubscribe {self.subscription!r}: other consumers are connected ({len(members)})"
            )
        pa_topics = sorted({pending_ack_topic(t, self.subscription) for t in self.topics})
        try:
            # Checked before closing: refused, this consumer stays open (it used to be closed first).
            others = group_topics(self._client.kafka, self.subscription) - {
                t.kafka_topic for t in self.topics
            }
            others &= set(self._client._admin.list_topics())  # a deleted topic's cursor is no one's
        except StoreError as exc:
            raise PersistenceError(f"unsubscribe {self.subscription!r}: {exc}") from None
        if others:
            raise NotAllowedError(
                f"cannot unsubscribe {self.subscription!r}: its Kafka group also holds the cursors "
                f"of {sorted(others)} (a subscription of that name on other topics); unsubscribe "
                "with a consumer of all of them"
            )
        self.close()
        try:
            self._delete_group()
            deleted = [t for t in pa_topics if self._client._admin.topic_exists(t)]
            self._client._admin.delete_topics(deleted)
        except StoreError as exc:
            raise PersistenceError(f"unsubscribe {self.subscription!r}: {exc}") from None
        if deleted:  # a new subscription under the name creates its pending-ack logs again
            self._client._deleted(f"the pending-ack logs of {self.subscription!r} were deleted")

    def _delete_group(self) -> None:
        """Delete the subscription's group. A static member (``instance_id``) does not leave the
        group when it closes (KIP-345): the group empties once its session times out, so the delete
        is retried until then."""
        give_up = time.monotonic() + (_SESSION_TIMEOUT_MS / 1000 + 5 if self._instance_id else 0)
        while True:
            try:
                delete_group(self._client.kafka, self.subscription)
                return
            except GroupNotEmptyError as exc:
                if time.monotonic() < give_up:
                    time.sleep(0.5)
                    continue
                if self._instance_id:
                    raise GroupNotEmptyError(
                        f"{exc}: this consumer's static membership (instance_id={self._instance_id!r}) "
                        "outlives its close until the broker expires its session; unsubscribe again later "
                        "(docs/broker-quirks.md: the embedded broker never expires it)"
                    ) from None
                raise

    def __enter__(self) -> Consumer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _all_of(futures: list[Future[None]]) -> Future[None]:
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


def _wait_ack(written: Future[None], timeout: float) -> None:
    """Until transactional acks are stored (their write's error raised), at most ``timeout``; not on
    a client callback thread, which must not wait for what it completes itself."""
    if in_callback_thread():
        return
    done, _ = wait([written], timeout)
    if not done:
        raise Timeout(f"the pending ack was not stored within {timeout}s")
    written.result()


def _message_ids(message: Message[Any] | MessageId | Sequence[Message[Any] | MessageId]) -> list[MessageId]:
    """The ids an ack call names: one message or id, or a sequence of them (``ConfigError`` for
    anything else)."""
    if isinstance(message, (Message, MessageId)):
        return [message.message_id if isinstance(message, Message) else message]
    if isinstance(message, Sequence) and not isinstance(message, str | bytes):
        ids = [m.message_id if isinstance(m, Message) else m for m in message]
        if all(isinstance(m, MessageId) for m in ids):
            return ids
    raise ConfigError(f"acknowledge takes a Message, a MessageId or a list of them, not {message!r}")


_TYPE_CODES = {ConsumerType.Exclusive: "x", ConsumerType.Failover: "f"}


def _type_code(client_id: str) -> str | None:
    """The consumer type's code at the end of a member's client id (None: made by an older version)."""
    parts = client_id.split("-")
    return parts[3] if len(parts) == 4 else None


def _joined(client_id: str) -> int:
    try:
        return int(client_id.split("-")[1])
    except (IndexError, ValueError):
        return 0


def _complete(futures: list[Future[None]]) -> None:
    """Resolve the write futures of dropped ack batches (outside the consumer's lock)."""
    for fut in futures:
        if not fut.done():
            fut.set_result(None)
