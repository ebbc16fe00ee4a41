"""Consumer: Pulsar subscriptions (Exclusive, Failover) on Kafka consumer groups, with plain and
transactional acknowledgement.

A subscription is the consumer group named after it, so Kafka tooling shows its lag. Each assigned
partition keeps a cursor (mark-delete = the group's committed offset; individually acked ranges in
the commit metadata) and a pending-ack state (the fold of the subscription's pending-ack log). Records
come through the transaction-buffer filter, so only committed data is ever delivered.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from kafka_store import (
    GroupNotEmptyError,
    StoreError,
    SubscriptionGroup,
    delete_group,
    group_offsets,
    group_topics,
)
from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn.buffer.reader import CommittedReader
from pulsar_txn.errors import (
    ConfigError,
    InvalidTopicName,
    NotAllowedError,
    PersistenceError,
    Timeout,
    TopicNotFound,
)
from pulsar_txn.naming import TopicName, bad_subscription_name, pending_ack_topic
from pulsar_txn.pendingack.stale import StalePendingCheck
from pulsar_txn.schema import BytesSchema, Schema
from pulsar_txn.subscription._acks import Acking
from pulsar_txn.subscription._base import (
    IDLE_FILL_MIN_S,
    SESSION_TIMEOUT_MS,
    SETTLE_S,
    TP,
    T,
    log,
)
from pulsar_txn.subscription._commits import CursorCommits
from pulsar_txn.subscription._membership import Membership
from pulsar_txn.subscription._outcomes import Outcomes
from pulsar_txn.subscription._receiving import Receiving
from pulsar_txn.subscription._seek import Seeking
from pulsar_txn.subscription._txn_acks import TxnAcking
from pulsar_txn.subscription.options import (
    CONSUMER_CLIENT_ID_PREFIX,
    TYPE_CODES,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    SubscriptionIsolationLevel,
)
from pulsar_txn.subscription.unacked import Unacked
from pulsar_txn.txnid import TxnID

if TYPE_CHECKING:
    from pulsar_txn.client import Client

__all__ = [
    "Consumer",
    "ConsumerType",
    "DeadLetterPolicy",
    "InitialPosition",
    "SubscriptionIsolationLevel",
]


# How soon partitions added to a subscribed topic are assigned: Pulsar's autoUpdatePartitionsInterval
# (librdkafka would look every 5 minutes).
PARTITIONS_REFRESH_MS = 60_000


@public_errors
class Consumer(
    Membership[T], Receiving[T], Acking[T], TxnAcking[T], Outcomes[T], CursorCommits[T], Seeking[T]
):
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
        service = client._reserved_groups.get(subscription_name)
        if service is not None:
            raise NotAllowedError(
                f"subscription name {subscription_name!r} is reserved: it is the consumer group of the"
                f" deployment's {service}"
            )
        self._left_out = set()  # pattern matches without a valid pending-ack log name
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
        if 0 < self._ack_timeout < 1:  # Pulsar's MIN_ACK_TIMEOUT_MILLIS, checked as its builder does
            raise ConfigError(f"ack_timeout_millis is 0 (off) or at least 1000, not {ack_timeout_millis}")
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
        if instance_id is not None:
            _args.group_instance_id(instance_id, "instance_id")
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
        self._txn_parts = {}  # open txns we acked in -> where
        self._txn_handles = {}  # and their handles (same keys)
        self._parts = {}
        self._kafka_topics = {t.kafka_topic: t for t in self.topics}
        # A subscription on ``t-partition-N`` (its own topic in Pulsar) takes only that partition of
        # what the group assigns: Kafka groups assign whole topics.
        whole = {t.kafka_topic for t in self.topics if t.partition is None}
        named: dict[str, set[int]] = {}
        for t in self.topics:
            if t.partition is not None and t.kafka_topic not in whole:
                named.setdefault(t.kafka_topic, set()).add(t.partition)
        self._only_partitions = {k: frozenset(v) for k, v in named.items()}
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
        self._pa_reader = None
        self._incoming = deque()
        # With the idle gate on (brokers that answer empty fetches at once), the gate closes only in a
        # poll: a consumer the application stopped polling (busy acking, say) would fetch without
        # pause. The upkeep thread polls for it after this long without a poll (see _fill_when_idle).
        backoff_s = client.kafka.idle_fetch_backoff_ms / 1000
        self._idle_fill_s = max(backoff_s, IDLE_FILL_MIN_S) if backoff_s else 0.0
        self._last_fill = time.monotonic()
        self._redeliveries = []
        self._seq = itertools.count()
        self._unacked = Unacked()
        self._in_txn = {}
        self._cum_txns = set()  # transactions with a cumulative ack, per partition
        # Which offsets each transaction moved into _in_txn, per partition: an outcome then touches
        # its own messages, not every message held by every transaction in flight.
        self._txn_offsets = {}
        self._redelivery_counts = {}
        self._pa_topics_ready = set()  # pending-ack log partitions known to exist
        self._pa_logs_checked = set()
        self._retained = {}
        self._base_partitions = {}
        # Assigned partitions whose opening failed: (next attempt, back-off), retried on the group thread.
        self._reopen = {}
        self._ack_batches = {}
        # Keys of batches being written: acks made meanwhile gather in the next batch, written when
        # the write in flight ends (many acks per record under load, one write at a time per key).
        self._ack_writing = set()
        self._refetch_due = []  # see _after_outcome; read by the upkeep thread
        self._closed = False
        self._assigned_once = threading.Event()
        # The type's code ends the client id, so that a later consumer can tell an Exclusive one.
        code = TYPE_CODES[consumer_type]
        client_id = f"{CONSUMER_CLIENT_ID_PREFIX}{time.time_ns()}-{uuid.uuid4().hex[:6]}-{code}"
        self._client_id = client_id
        self._instance_id = instance_id
        self._refuse_if_busy(self._other_members(min(subscribe_timeout, SETTLE_S)))
        self._group = SubscriptionGroup(
            client.kafka,
            subscription_name,
            list(dict.fromkeys(t.kafka_topic for t in self.topics)),  # partitions by name: one topic
            self._on_assign,
            self._on_revoke,
            client_id=client_id,
            instance_id=instance_id,
            session_timeout_ms=SESSION_TIMEOUT_MS,
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
        # No lock: copying a dict's keys is atomic under the GIL, and the asyncio consumer calls
        # this on its event loop, which must not wait for a lock a recovery may hold for seconds.
        return sorted(list(self._parts))

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

    def unsubscribe(self) -> None:
        """Close and delete the subscription (its consumer group and pending-ack logs).
        ``NotAllowedError``, with nothing deleted, if the group also holds the cursors of a
        same-named subscription on other topics or, for a subscription on ``t-partition-N``, on
        other partitions of ``t`` (deleting the group would delete those too), or if other consumers
        are connected to it (Pulsar refuses that too); this one stays open then."""
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
            unnamed = self._unnamed_cursors()
        except StoreError as exc:
            raise PersistenceError(f"unsubscribe {self.subscription!r}: {exc}") from None
        if others:
            raise NotAllowedError(
                f"cannot unsubscribe {self.subscription!r}: its Kafka group also holds the cursors "
                f"of {sorted(others)} (a subscription of that name on other topics); unsubscribe "
                "with a consumer of all of them"
            )
        if unnamed:
            # In Pulsar t-partition-N is a topic of its own; here its subscription shares the group
            # (and the pending-ack log) with the topic's other partitions: deleting them took the
            # cursors of the other partitions' same-named subscriptions too (review, session 40).
            raise NotAllowedError(
                f"cannot unsubscribe {self.subscription!r}: its Kafka group also holds the cursors of "
                f"{[f'{t}-partition-{p}' for t, p in unnamed][:10]} (the subscription of that name on "
                "other partitions of the topic); unsubscribe with a consumer of the whole topic"
            )
        self.close()  # commits the cursor, committed transactional acks included
        try:
            # The pending-ack logs first, the group (the cursor) last: a process killed between the
            # two leaves the subscription as it was (its cursor; only acks of transactions still
            # open are gone with their log). The other way round, a subscription made again under
            # the name took the old one's transactional acks from the leftover log without its plain
            # ones: messages nobody acked there were never delivered (session 39's crash review).
            deleted = [t for t in pa_topics if self._client._admin.topic_exists(t)]
            self._client._admin.delete_topics(deleted)
            self._delete_group()
        except StoreError as exc:
            raise PersistenceError(f"unsubscribe {self.subscription!r}: {exc}") from None
        if deleted:  # a new subscription under the name creates its pending-ack logs again
            self._client._deleted(f"the pending-ack logs of {self.subscription!r} were deleted")

    def _unnamed_cursors(self) -> list[tuple[str, int]]:
        """Partitions of a topic this consumer subscribed by partition name (``t-partition-N``) that
        it did not name, and that have a cursor in the group."""
        wanted: list[tuple[str, int]] = []
        for topic, named in self._only_partitions.items():
            try:
                count = self._client._partition_count(self._kafka_topics[topic], refresh=True)
            except TopicNotFound:  # deleted: its cursors went with it
                continue
            wanted += [(topic, p) for p in range(count) if p not in named]
        return sorted(group_offsets(self._client.kafka, self.subscription, wanted))

    def _delete_group(self) -> None:
        """Delete the subscription's group. A static member (``instance_id``) does not leave the
        group when it closes (KIP-345): the group empties once its session times out, so the delete
        is retried until then."""
        give_up = time.monotonic() + (SESSION_TIMEOUT_MS / 1000 + 5 if self._instance_id else 0)
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
