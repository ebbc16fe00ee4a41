"""Plain acknowledgement (individual and cumulative) and the public ack calls, which hand
transactional acks to ``TxnAcking``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from kafka_store import (
    StoreError,
)
from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn.errors import (
    NotAllowedError,
)
from pulsar_txn.message import Message, MessageId, new_message_id
from pulsar_txn.pendingack.state import AckKind
from pulsar_txn.subscription._base import (
    TP,
    ConsumerBase,
    NotReadableYet,
    Part,
    R,
    T,
    all_of,
    log,
    message_ids,
    wait_ack,
)
from pulsar_txn.transaction import Transaction

if TYPE_CHECKING:
    pass


@public_errors
class Acking(ConsumerBase[T]):
    """The consumer's acks (a part of ``Consumer``)."""

    def _part_for(self, mid: MessageId) -> Part:
        part = self._parts.get((mid.topic, mid.partition))
        if part is None:
            self._check_open()  # closing gave every partition up: say so, not "moved to another consumer"
            self._check_subscribed(mid)
            raise NotAllowedError(
                f"cannot acknowledge {mid}: partition {mid.topic}[{mid.partition}] is no longer assigned to "
                f"this consumer of {self.subscription!r} (it moved to another consumer, which redelivers "
                "it), or the topic has no such partition"
            )
        return part

    def _readable_part_for(self, mid: MessageId) -> Part:
        """``_part_for``, refusing an offset at or past the partition's readable end: no message is
        there (yet), and an ack stored for it would swallow the message written there later."""
        part = self._part_for(mid)
        end = self._reader.readable_end(*part.tp)
        if mid.offset >= end:
            raise NotReadableYet(mid, part.tp, end)
        return part

    def _caught_up(self, refused: NotReadableYet, ack: Callable[[], R]) -> R:
        """``ack`` refused an id past the readable end this consumer knows: bring that partition's
        read state up to date (outside ``_lock``) and run it once more. The end is only as far as
        this consumer has scanned: an id of a message received before a restart (or elsewhere) is
        at or above it until the next receive, yet readable."""
        if not self._catch_up(refused.tp, refused.mid.offset):
            raise NotAllowedError(str(refused)) from None  # the public error, not our marker class
        try:
            return ack()
        except NotReadableYet as exc:
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
            self._ack_plain(self._with_topic(message_ids(message)))
            return
        wait_ack(self.acknowledge_async(message, txn), self._client.operation_timeout_seconds)

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
        mids = self._with_topic(message_ids(message))
        if txn is not None:
            _args.instance(txn, Transaction, "txn")
            by_partition: dict[tuple[str, int], list[MessageId]] = {}
            for mid in mids:
                by_partition.setdefault((mid.topic, mid.partition), []).append(mid)
            return all_of([self._ack_in_txn(txn, AckKind.INDIVIDUAL, g) for g in by_partition.values()])
        self._ack_plain(mids)
        return all_of([])

    def _ack_plain(self, mids: list[MessageId]) -> None:
        try:  # the hot path: no closure unless refused
            self._ack_plain_now(mids)
        except NotReadableYet as exc:
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
            self._ack_cumulative_plain(self._with_topic(message_ids(message)))
            return
        wait_ack(self.acknowledge_cumulative_async(message, txn), self._client.operation_timeout_seconds)

    def acknowledge_cumulative_async(
        self, message: Message[Any] | MessageId | Sequence[MessageId], txn: Transaction | None = None
    ) -> Future[None]:
        """``acknowledge_cumulative`` without waiting (Java's ``acknowledgeCumulativeAsync``); the
        future as for ``acknowledge_async``."""
        mids = self._with_topic(message_ids(message))
        if txn is not None:
            _args.instance(txn, Transaction, "txn")
            return all_of([self._ack_in_txn(txn, AckKind.CUMULATIVE, mids)])
        self._ack_cumulative_plain(mids)
        return all_of([])

    def _ack_cumulative_plain(self, mids: list[MessageId]) -> None:
        if len(mids) != 1:
            raise NotAllowedError("a cumulative ack takes exactly one message id")
        mid = mids[0]
        try:
            self._ack_cumulative_now(mid)
        except NotReadableYet as exc:
            self._caught_up(exc, lambda: self._ack_cumulative_now(mid))

    def _ack_cumulative_now(self, mid: MessageId) -> None:
        with self._lock:
            part = self._readable_part_for(mid)
            part.cursor.ack_cumulative(mid.offset)
            part.dirty = True
            self._unacked.take_upto(part.tp, mid.offset)
            # Acked messages' redelivery counts go, as an individual ack's do: a message delivered
            # again after a seek back starts from 0 (kept, one nack could send it to the DLQ unseen).
            counts = self._redelivery_counts
            for key in [
                k for k in counts if k[0] == mid.topic and k[1] == mid.partition and k[2] <= mid.offset
            ]:
                del counts[key]

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

    def _ack_offset(self, part: Part, offset: int) -> None:
        part.cursor.ack(offset)
        part.dirty = True
        key = (part.tp[0], part.tp[1], offset)
        self._unacked.pop(key, None)
        self._redelivery_counts.pop(key, None)
