"""Where an ending transaction is applied: its produced partitions and its acked subscriptions.

``TxnEndpoints`` is the seam between the coordinator and the transaction buffer / pending-ack
components. ``KafkaTxnEndpoints`` is the implementation on Kafka: it appends one marker per partition
(the transaction buffer reads them) and one outcome marker per pending-ack log partition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from kafka_store import Appender, ProduceError, StoreError, TopicAdmin, TopicNotFoundError
from pulsar_txn._loop_inbox import inbox
from pulsar_txn.buffer.marker import TxnMarker, marker_record
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.errors import InvalidTopicName
from pulsar_txn.naming import DEFAULT_LOG_TOPIC, TopicName, pending_ack_topic
from pulsar_txn.txnid import TxnAction, TxnID

log = logging.getLogger(__name__)
_ACK_LOG_RECHECK_S = 0.5  # a marker write to a cached pending-ack log slower than this: is the log there?


class TxnEndpoints(Protocol):
    async def end_on_partition(
        self,
        partition: str,
        txn_id: TxnID,
        action: TxnAction,
        low_watermark: int,
        *,
        recovering: bool = False,
    ) -> None:
        """Make ``action`` durable on one produced partition (idempotent: may be called again).
        ``recovering``: a new owner re-drives a decision; the marker may already be there."""
        ...

    async def end_on_subscription(
        self, topic: str, subscription: str, txn_id: TxnID, action: TxnAction, low_watermark: int
    ) -> None:
        """Make ``action`` durable for the txn's acks on one subscription (idempotent)."""
        ...


class KafkaTxnEndpoints:
    """Writes markers with the shared appender; ``await`` returns once Kafka has stored them."""

    def __init__(
        self,
        appender: Appender,
        admin: TopicAdmin,
        marker_secret: bytes | None = None,
        *,
        snapshots: SnapshotStore | None = None,
        num_tcs: int = 1 << 16,
        missing_topic_grace_ms: int = 60_000,
        log_topic: str = DEFAULT_LOG_TOPIC,
    ) -> None:
        self._appender = appender
        self._admin = admin
        self._secret = marker_secret
        self._snapshots = snapshots
        self._num_tcs = num_tcs
        self._log_topic = log_topic  # where a transaction held below a partition's log start is looked up
        self._partition_counts: dict[str, int] = {}
        self._missing_grace = missing_topic_grace_ms / 1000
        self._missing_since: dict[tuple[str, int], float] = {}  # when a failed marker write found it gone

    async def _write_marker(self, topic: str, partition: int, marker: TxnMarker) -> None:
        value, headers = marker_record(marker, topic, partition, self._secret)
        loop = asyncio.get_running_loop()
        box = inbox(loop)
        done: asyncio.Future[None] = loop.create_future()

        def settle(error: StoreError | None) -> None:  # on the loop
            if not done.done():
                if error is None:
                    done.set_result(None)
                else:
                    done.set_exception(error)

        def delivered(offset: int | None, error: StoreError | None) -> None:  # delivery thread
            if error is None and offset is None:
                error = ProduceError("no offset")
            box.put(settle, error)

        self._appender.append_cb(topic, partition, value, headers=headers, callback=delivered)
        try:
            await done
        except StoreError:
            if not await self._gone_for_good(topic, partition):
                raise  # the caller retries
            # Deleted since the transaction wrote there (or re-created with fewer partitions): its
            # records went with it, so there is nothing left to end. Retrying forever would also pin
            # the TC's low watermark.
            log.warning(
                "%s[%d] has been missing for %.0fs (deleted): no %s marker for %s needed there",
                topic,
                partition,
                self._missing_grace,
                marker.action.name,
                marker.txn_id,
            )

    async def _gone_for_good(self, topic: str, partition: int) -> bool:
        """After a failed marker write: has the partition been missing for the grace period? Its
        topic is not in the topic list (which names every topic and creates none), or has fewer
        partitions now (deleted and created again smaller). A deleted topic shows up as a write
        timeout (the producer waits for it to appear) or as an unknown topic or partition."""

        def present() -> bool:
            if topic not in self._admin.list_topics():
                return False
            try:
                return partition < self._admin.partition_count(topic)
            except TopicNotFoundError:
                return False

        key = (topic, partition)
        if await asyncio.to_thread(present):
            self._missing_since.pop(key, None)
            return False
        since = self._missing_since.setdefault(key, time.monotonic())
        return time.monotonic() - since >= self._missing_grace

    async def end_on_partition(
        self,
        partition: str,
        txn_id: TxnID,
        action: TxnAction,
        low_watermark: int,
        *,
        recovering: bool = False,
    ) -> None:
        try:
            name = TopicName.parse(partition)
        except InvalidTopicName as exc:
            # Refused when added since session 20; a log written before may still name one. No
            # data can be there, so there is nothing to end (retrying would pin the low watermark).
            log.error("%s: participant %r is no topic (%s): no marker needed", txn_id, partition, exc)
            return
        if recovering and await asyncio.to_thread(
            self._ended_there, name.kafka_topic, name.kafka_partition, txn_id
        ):
            log.info("%s already ended in %s: marker not repeated", txn_id, partition)
            return
        marker = TxnMarker(txn_id, action, low_watermark, int(time.time() * 1000))
        await self._write_marker(name.kafka_topic, name.kafka_partition, marker)

    def _ended_there(self, topic: str, partition: int, txn_id: TxnID) -> bool:
        """Has ``txn_id`` already ended in this partition (its marker, or a low watermark past it)?"""
        from pulsar_txn.buffer.reader import BufferOptions, load_state  # buffer depends on us, not v.v.

        try:
            state, _ = load_state(
                self._admin.config,
                topic,
                partition,
                store=self._snapshots,
                options=BufferOptions(
                    num_tcs=self._num_tcs, marker_secret=self._secret, log_topic=self._log_topic
                ),
            )
        except StoreError as exc:
            log.warning(
                "cannot read %s[%d] to check for an earlier marker (%s); writing it", topic, partition, exc
            )
            return False
        return state.has_ended(txn_id)

    async def end_on_subscription(
        self, topic: str, subscription: str, txn_id: TxnID, action: TxnAction, low_watermark: int
    ) -> None:
        try:
            name = TopicName.parse(topic)
            ack_topic = pending_ack_topic(name, subscription)
        except InvalidTopicName as exc:
            log.error(
                "%s: %r of %r is no subscription (%s); nothing to end", txn_id, subscription, topic, exc
            )
            return
        count = self._partition_counts.get(ack_topic)
        # Looked up again when new and when a partition beyond it is named. Clients register a
        # partition beyond the first by its name (consumer._txn_ack_topic), so the cached count serves
        # a whole-topic registration: one lookup per END_TXN doubled its latency.
        cached = count is not None and (name.partition is None or name.partition < count)
        if not cached:
            count = await self._ack_log_partitions(ack_topic, txn_id)
            if count is None:
                return
        assert count is not None
        marker = TxnMarker(txn_id, action, low_watermark, int(time.time() * 1000))
        # A subscription registered on one partition (``...-partition-N``, as clients do for partitioned
        # topics) holds its acks in that partition of the log; one registered on the whole topic may
        # hold them in any.
        parts = range(count) if name.partition is None else [name.partition]
        writes = asyncio.gather(*(self._write_marker(ack_topic, p, marker) for p in parts))
        try:
            if cached:
                # The log may have been deleted since it was counted (an unsubscribe): the writes
                # would then retry until the producer's deadline and the missing-topic grace (a
                # minute) while the client's END_TXN timed out. A write that takes long has the log
                # looked up again.
                done, _ = await asyncio.wait({writes}, timeout=_ACK_LOG_RECHECK_S)
                if not done and await self._ack_log_gone(ack_topic, txn_id):
                    writes.cancel()
                    return
            await writes
        except asyncio.CancelledError:
            # The TC closed (ownership lost): asyncio.wait does not cancel what it waits for, and
            # the writes ran on unawaited; one failing then logged "exception was never retrieved".
            writes.add_done_callback(_retrieved)
            writes.cancel()
            raise

    async def _ack_log_gone(self, ack_topic: str, txn_id: TxnID) -> bool:
        """Whether the pending-ack log is known not to exist now (False if the lookup fails: the
        marker writes in flight decide then)."""
        try:
            return await self._ack_log_partitions(ack_topic, txn_id) is None
        except StoreError as exc:
            log.debug("%s: checking for %s failed (%s); waiting for its markers", txn_id, ack_topic, exc)
            return False

    async def _ack_log_partitions(self, ack_topic: str, txn_id: TxnID) -> int | None:
        """The partition count of a pending-ack log, cached; None if there is no such log (no
        transactional ack ever reached the subscription, or it was unsubscribed): nothing to end."""
        try:
            count = await asyncio.to_thread(self._admin.partition_count, ack_topic)
        except TopicNotFoundError:
            self._partition_counts.pop(ack_topic, None)
            log.debug("no pending-ack log %s for %s; nothing to end", ack_topic, txn_id)
            return None
        self._partition_counts[ack_topic] = count
        return count


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Marks a future's outcome as seen (a failure nobody waits for any more is not logged)."""
    if not fut.cancelled():
        fut.exception()
