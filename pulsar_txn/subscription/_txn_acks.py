"""Acks inside a transaction: Pulsar's conflict rules, ADD_SUBSCRIPTION_TO_TXN once per
subscription partition, and batched PendingAck records written to the subscription's pending-ack log."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING

from kafka_store import (
    StoreError,
    TopicNotFoundError,
)
from pulsar_txn._future import settle
from pulsar_txn.errors import (
    InvalidTxnStatusError,
    NotAllowedError,
    PersistenceError,
    PulsarTxnError,
    Timeout,
    store_failure,
)
from pulsar_txn.message import Message, MessageId
from pulsar_txn.naming import TopicName
from pulsar_txn.pendingack.log import PENDING_ACK_TOPIC_CONFIGS, encode_pending_ack
from pulsar_txn.pendingack.state import AckKind
from pulsar_txn.subscription._base import (
    ACK_BATCH_MAX,
    TP,
    AckBatch,
    ConsumerBase,
    MessageKey,
    NotReadableYet,
    Part,
    T,
    log,
)
from pulsar_txn.transaction import Transaction, joining_failed
from pulsar_txn.txnid import TxnID

if TYPE_CHECKING:
    pass


class TxnAcking(ConsumerBase[T]):
    """The consumer's txn acks (a part of ``Consumer``)."""

    def _ack_in_txn(self, txn: Transaction, kind: AckKind, mids: Sequence[MessageId]) -> Future[None]:
        """As in Pulsar, every transactional ack is an operation of the transaction: one that fails,
        for whatever reason, makes its commit abort (an application catching the error cannot
        commit the output of messages whose acks did not take). Returns the future of the write
        that stores these acks."""
        try:
            sub_topic = self._txn_ack_topic(kind, mids)
        except PulsarTxnError as exc:
            # Refused outright once the end has begun (InvalidTxnStatusError): an ack made after
            # commit() must not turn it into an abort of everything before.
            txn.record_failure(exc, "acknowledge")
            raise
        # Counted from here until tracked: a commit beginning meanwhile waits for this ack's write.
        registered = txn.begin_ack(str(sub_topic), self.subscription)
        try:
            return self._ack_counted(txn, kind, mids, registered)
        except PulsarTxnError as exc:
            txn.record_failure(exc, None)  # before op_finished: a commit waiting on it sees the failure
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
        self._check_subscribed(first)  # before the transaction registers a partition it never reads
        name = self._kafka_topics[first.topic]
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

        def readable() -> Part:
            with self._lock:
                return self._readable_part_for(last)

        try:
            part = readable()
        except NotReadableYet as exc:
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
                position = offsets[0]
                taken = self._unacked.take_upto((topic, partition), position)
                taken += self._take_queued(part.tp, lambda o: o <= position)
            else:
                taken = [
                    (key, entry)
                    for key in ((topic, partition, o) for o in offsets)
                    if (entry := take(key, None))
                ]
                if len(taken) < len(offsets):
                    rest = set(offsets).difference(key[2] for key, _entry in taken)
                    taken += self._take_queued(part.tp, rest.__contains__)
            for key, entry in taken:
                in_txn[key] = entry[0]
            if kind is AckKind.CUMULATIVE:
                held.extend(key[2] for key, _entry in taken)
            else:
                # Every offset acked, not only those taken from the unacked: a nacked one waits for
                # redelivery instead, and a commit must drop its redelivery count too.
                held.extend(offsets)
            now, written = self._batch_ack(txn, part, kind, offsets, registered)
        if now:
            self._flush_batch((txn.txn_id, part.tp, kind), txn, part)
        return written

    def _take_queued(
        self, tp: TP, acked: Callable[[int], bool]
    ) -> list[tuple[MessageKey, tuple[Message[T], float]]]:
        """Messages of ``tp`` waiting for redelivery (nacked, or past their ack timeout) that a
        transaction acks now: held with its other messages, so that an abort gives them back in
        offset order with them. Before, the queued one was dropped when due (pending) and fetched
        again from Kafka after the abort's other messages. Under ``_lock``."""
        if not self._redeliveries:
            return []
        found = [
            r
            for r in self._redeliveries
            if (r.message.message_id.topic, r.message.message_id.partition) == tp
            and acked(r.message.message_id.offset)
        ]
        if found:
            gone = {id(r) for r in found}
            self._redeliveries[:] = [r for r in self._redeliveries if id(r) not in gone]
            heapq.heapify(self._redeliveries)
        return [((tp[0], tp[1], r.message.message_id.offset), (r.message, 0.0)) for r in found]

    def _batch_ack(
        self, txn: Transaction, part: Part, kind: AckKind, offsets: list[int], registered: Future[None]
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
            batch = self._ack_batches[key] = AckBatch(registered, list(offsets))
            batch.flush = flush = lambda: self._flush_batch(key, txn, part)
            txn.track(batch.written)
            txn.add_end_listener(self._txn_ended)
            txn.add_commit_check(self._ownership_check)
            txn.add_flush_hook(flush)
        # As Pulsar's client sends a transactional ack at once: its write overlaps with what follows
        # instead of lengthening the commit, and the caller learns when it is stored.
        now = key not in self._ack_writing or len(batch.offsets) >= ACK_BATCH_MAX
        return now, batch.written

    def _encoded_acks(
        self, part: Part, txn_id: TxnID, kind: AckKind, offsets: Sequence[int]
    ) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
        """PendingAck records for ``part``'s partition of its log (signed with the marker secret), at
        most ``ACK_BATCH_MAX`` offsets each: one record of a whole large ack list passed Kafka's record
        size limit (from ~330,000 offsets) and could never be stored."""
        return [
            encode_pending_ack(
                txn_id,
                kind,
                offsets[i : i + ACK_BATCH_MAX],
                topic=part.pa_topic,
                partition=part.tp[1],
                secret=self._client._secret,
                owner=part.fold.owner,
            )
            for i in range(0, len(offsets), ACK_BATCH_MAX)
        ]

    def _flush_batch(self, key: tuple[TxnID, TP, AckKind], txn: Transaction, part: Part) -> None:
        with self._lock:
            batch = self._ack_batches.pop(key, None)
            if batch is None or not batch.offsets:
                return
            part.inflight.add(batch.written)
            self._ack_writing.add(key)
        records = self._encoded_acks(part, txn.txn_id, key[2], batch.offsets)
        left = [len(records)]  # records whose write has not ended yet
        lost: list[PulsarTxnError] = []  # the first failed write's error
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
                with self._lock:
                    if error is None and offset is not None:
                        part.fold.note_written(txn.txn_id, offset)
                    elif not lost:
                        lost.append(store_failure(error, f"pending ack write to {part.pa_topic} failed"))
                    left[0] -= 1
                    if left[0]:
                        return  # the batch's write is over once each of its records' is
                    follow = ended()
                try:
                    settle(written, lost[0] if lost else None)
                finally:
                    if follow is not None:
                        follow()

            appender = self._client._appender()
            for value, headers in records:  # in order, one partition: stored in this order
                appender.append_cb(part.pa_topic, part.tp[1], value, headers=headers, callback=stored)

        batch.registered.add_done_callback(write)

    def _pa_partition_count(self, pa_topic: str) -> int:
        try:
            return self._client._admin.partition_count(pa_topic)
        except TopicNotFoundError:
            return 0

    def _note_pa_partitions(self, pa_topic: str, count: int) -> None:
        self._pa_topics_ready.update((pa_topic, p) for p in range(count))

    def _check_pa_log(self, pa_topic: str) -> None:
        """Once per log, not under the consumer's locks (a round trip). A log found made beforehand
        (auto-creation, an operator, a build before session 30) may keep the broker's retention,
        which deletes ack records of transactions still open: their messages came back and a
        committed ack was undone. Its retention is turned off, as for a log made here; a broker
        that refuses is logged."""
        if pa_topic in self._pa_logs_checked:
            return
        self._pa_logs_checked.add(pa_topic)
        self._client._admin.align_owned(
            pa_topic,
            PENDING_ACK_TOPIC_CONFIGS,
            f"subscription {self.subscription!r}'s pending-ack log",
            "ack records it deleted before may have brought their messages back",
        )

    def _ensure_pa_topic(self, part: Part) -> None:
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
        self._check_pa_log(part.pa_topic)
        with self._lock, self._pa_lock:
            for tp, p in self._parts.items():
                if (
                    p.pa_topic == part.pa_topic
                    and tp[1] < count
                    and (p.pa_topic, tp[1]) not in self._pa_topics_ready
                ):
                    self._pa().add(p.pa_topic, tp[1], p.fold.next_offset)
            self._note_pa_partitions(part.pa_topic, count)

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
