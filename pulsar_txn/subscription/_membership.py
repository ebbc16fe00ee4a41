"""Joining the subscription's group: exclusivity checks, partitions assigned (opened and
recovered from the cursor and the pending-ack log), revoked or lost, and a pattern subscription's
topic discovery. Assignment callbacks run on the group's thread."""

from __future__ import annotations

import heapq
import re
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kafka_store import (
    PartitionReader,
    StoreError,
    describe_group,
    end_offsets,
    watermark_offsets,
)
from pulsar_txn.errors import (
    ConsumerBusy,
    InvalidTopicName,
    NotAllowedError,
    PulsarTxnError,
)
from pulsar_txn.message import LATEST, MessageId
from pulsar_txn.naming import TopicName, check_subscription, pending_ack_topic
from pulsar_txn.pendingack.stats import recover_partition, split_metadata
from pulsar_txn.subscription._base import (
    PA_IDLE_BACKOFF_MS,
    REOPEN_MAX_BACKOFF_S,
    SETTLE_S,
    TP,
    ConsumerBase,
    Part,
    T,
    log,
)
from pulsar_txn.subscription.options import (
    TYPE_CODES,
    ConsumerType,
    InitialPosition,
    is_subscriber,
    joined,
    type_code,
)

if TYPE_CHECKING:
    pass


class Membership(ConsumerBase[T]):
    """The consumer's membership (a part of ``Consumer``)."""

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
            # Another application's member counts wherever it reads (_refuse_if_busy refuses it).
            counted = [
                m for m in members if not m.topics or m.topics & ours or not is_subscriber(m.client_id)
            ]
            # Only members that would refuse this consumer are worth waiting for (any member, for an
            # Exclusive one; an Exclusive member, for the others: _refuse_if_busy).
            exclusive = TYPE_CODES[ConsumerType.Exclusive]
            deciding = [
                m
                for m in counted
                if self.consumer_type is ConsumerType.Exclusive or type_code(m.client_id) == exclusive
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
        foreign = [cid for cid in others if not is_subscriber(cid)]
        if foreign:
            # Another application's (or the deployment's own services') consumer group: joining it
            # would share its partitions with that application.
            raise NotAllowedError(
                f"subscription {self.subscription!r}: its Kafka consumer group is used by another"
                f" application (client ids {', '.join(sorted(foreign)[:3])!s:.300})"
            )
        if self.consumer_type is ConsumerType.Exclusive:
            raise ConsumerBusy(f"exclusive subscription {self.subscription!r} already has a consumer")
        if any(type_code(cid) == TYPE_CODES[ConsumerType.Exclusive] for cid in others):
            raise ConsumerBusy(
                f"subscription {self.subscription!r} has an Exclusive consumer: a {self.consumer_type.value} "
                "one cannot join it (subscription is of a different type)"
            )

    def _check_exclusive(self) -> None:
        """After joining: two racing subscribers, one of them Exclusive; the one that came later
        (larger join time in its client id) yields."""
        earlier = [cid for cid in self._other_members(SETTLE_S) if joined(cid) < joined(self._client_id)]
        try:
            self._refuse_if_busy(earlier)
        except PulsarTxnError:
            self._group.stop()
            raise

    def _on_assign(self, partitions: list[TP]) -> None:
        only = self._only_partitions
        if only:  # partitions of a topic subscribed by partition name that were not named: not read
            partitions = [tp for tp in partitions if tp[0] not in only or tp[1] in only[tp[0]]]
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
        try:
            added = self._added_partitions(fresh, committed)
        except (PulsarTxnError, StoreError) as exc:
            for tp in fresh:
                self._open_failed(tp, exc)
            return
        for tp in fresh:
            try:
                self._open_partition(tp, committed.get(tp), tp in added)
            except (PulsarTxnError, StoreError) as exc:
                self._open_failed(tp, exc)
            else:
                self._reopen.pop(tp, None)

    def _added_partitions(self, fresh: list[TP], committed: dict[TP, tuple[int, str | None]]) -> set[TP]:
        """Partitions among ``fresh`` added to their topic after the subscription began on it (at or
        above the partition count its cursors record): with no cursor yet, they start at their
        beginning, not at ``Latest``, as Pulsar copies a subscription onto added partitions at the
        earliest position. Before, a ``Latest`` subscription skipped what producers had written to
        them before this consumer was assigned them. Also learns each topic's count for the
        cursors' metadata: the one its cursors record, else (a new subscription, or cursors written
        before session 44) the count now."""
        for topic in {t for t, _ in fresh} - self._base_partitions.keys():
            count = self._client._partition_count(self._kafka_topics[topic], refresh=True)
            cursors = self._group.committed([(topic, p) for p in range(count)])
            known = [split_metadata(md).partitions for _, md in cursors.values()]
            self._base_partitions[topic] = min([n for n in known if n is not None], default=count)
        if self._initial is not InitialPosition.Latest:
            return set()
        return {tp for tp in fresh if tp not in committed and tp[1] >= self._base_partitions[tp[0]]}

    def _open_failed(self, tp: TP, exc: Exception) -> None:
        backoff = min(REOPEN_MAX_BACKOFF_S, 2 * self._reopen[tp][1]) if tp in self._reopen else 0.2
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

    def _open_partition(self, tp: TP, committed: tuple[int, str | None] | None, added: bool = False) -> None:
        """``added``: a partition added since the subscription began (``_added_partitions``)."""
        topic, partition = tp
        retained = self._retained.pop(tp, None)
        if retained is not None and self._untouched_since(retained, committed):
            # Our last commit before the rebalance failed; what we hold is newer than what Kafka has.
            with self._read_lock, self._lock, self._pa_lock:
                try:
                    self._reader.add_partition(topic, partition, retained.cursor.mark_delete)
                except BaseException:
                    self._retained[tp] = retained  # newer than Kafka's cursor: kept for the retry
                    raise
                self._parts[tp] = retained
                if (retained.pa_topic, partition) in self._pa_topics_ready:
                    self._pa().add(retained.pa_topic, partition, retained.fold.next_offset)
            retained.dirty = True
            self._flush_part(retained, in_callback=True)
            return
        default_start = 0
        if committed is None and self._initial is InitialPosition.Latest and not added:
            default_start = self._client._sentinel_offset(
                topic, partition, LATEST, uncommitted=self._uncommitted
            )
        name = self._kafka_topics[topic]
        fold = recover_partition(self._client, name, self.subscription, partition, committed, default_start)
        cursor, pending, pa_topic = fold.state.cursor, fold.state, fold.topic
        pa_partitions = self._pa_partition_count(pa_topic)
        if pa_partitions:
            self._check_pa_log(pa_topic)
        self._note_pa_partitions(pa_topic, pa_partitions)
        part = Part(tp, cursor, pending, fold, pa_topic, committed=committed)
        # Under every lock, the consumer's too, although the reader's opening may read (a snapshot,
        # the watermarks): acks read the reader's state under the consumer lock alone (session 38
        # tried without it; a review found an ack opening the partition a second time meanwhile).
        with self._read_lock, self._lock, self._pa_lock:
            self._reader.add_partition(topic, partition, cursor.mark_delete)
            self._parts[tp] = part
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

    def _untouched_since(self, retained: Part, committed: tuple[int, str | None] | None) -> bool:
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
        gone: list[Part] = []
        self._write_ack_batches(revoked)
        with self._read_lock, self._lock, self._pa_lock:
            for tp in partitions:
                part = self._parts.pop(tp, None)
                if part is None:
                    continue
                gone.append(part)
                # A lost partition (the group dropped us: session expired, broker gone) is another
                # member's already: Kafka refuses our commit, and with the broker gone waiting for
                # the refusal held every receive behind these locks for a request timeout.
                committed = not lost and self._flush_part(part, force=True, in_callback=True)
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
            backoff = max(self._client.kafka.idle_fetch_backoff_ms, PA_IDLE_BACKOFF_MS)
            self._pa_reader = PartitionReader(self._client.kafka, fetch_wait_ms=50, idle_backoff_ms=backoff)
        return self._pa_reader

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
