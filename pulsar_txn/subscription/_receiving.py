"""Receiving: the queue of committed messages read ahead, redelivery (negative acks, ack
timeout, aborted transactions) and the dead-letter policy."""

from __future__ import annotations

import dataclasses
import heapq
import time
from typing import TYPE_CHECKING, Any

from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn.errors import (
    ConfigError,
    MessageTooBig,
    Timeout,
)
from pulsar_txn.message import Message, MessageId
from pulsar_txn.schema import prepare_all
from pulsar_txn.subscription._base import (
    POLL_RECORDS,
    ConsumerBase,
    Part,
    Redelivery,
    T,
    log,
    message_ids,
)

if TYPE_CHECKING:
    pass


@public_errors
class Receiving(ConsumerBase[T]):
    """The consumer's receiving (a part of ``Consumer``)."""

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
            records = self._poll_acking_skipped(wait) if assigned else []
            decoded = [self._decode(r) for r in records]
            prepare_all(self.schema, decoded)
            with self._lock:
                self._incoming.extend(decoded)
        if not records:
            time.sleep(0.005 if self._parts else timeout)

    def _poll_acking_skipped(self, wait: float) -> list[Any]:
        """The reader's next records (caller holds ``_read_lock``, so no seek moves its positions
        meanwhile). The offsets it passed over without delivering (commit/abort markers, aborted and
        discarded messages, compaction gaps) are never delivered to anyone, so they are acked here,
        as Pulsar's dispatcher acks them: else the mark-delete stopped at the first marker of a
        topic transactions write to, and the acked ranges behind it grew with every transaction."""
        with self._lock:
            tps = list(self._parts)
        reader = self._reader
        before = {tp: reader.position(*tp) for tp in tps}
        records = reader.poll(wait, POLL_RECORDS)
        skipped: list[tuple[tuple[str, int], int, int]] = []
        for tp, start in before.items():
            end = reader.position(*tp)
            if end <= start:
                continue
            if len(before) == 1:
                offsets = [r.offset for r in records]
            else:
                offsets = [r.offset for r in records if r.partition == tp[1] and r.topic == tp[0]]
            if len(offsets) == end - start:
                continue  # delivered every offset it passed: nothing skipped
            lo = start
            for offset in offsets:
                if offset > lo:
                    skipped.append((tp, lo, offset - 1))
                lo = offset + 1
            if end > lo:
                skipped.append((tp, lo, end - 1))
        if skipped:
            with self._lock:
                for tp, lo, hi in skipped:
                    part = self._parts.get(tp)
                    if part is not None:
                        part.cursor.ack_range(lo, hi)
                        part.dirty = True
        return records

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
                if self._closed or len(self._incoming) >= POLL_RECORDS or not self._parts:
                    return
            records = self._poll_acking_skipped(0)
            decoded = [self._decode(r) for r in records]
            prepare_all(self.schema, decoded)
            with self._lock:
                self._incoming.extend(decoded)
        finally:
            self._last_fill = time.monotonic()
            self._read_lock.release()

    def _next_ready(self) -> Message[T] | None:
        while True:
            dead: list[tuple[Message[T], Part]] = []
            msg = self._pick(dead)
            if not dead:
                return msg
            # Not under _lock: the dead-letter send is completed by the delivery thread, which also
            # runs callbacks that take _lock (pending-ack writes). If it fails, it raises, and no
            # message was picked (delivered) in this round to be lost with the exception.
            self._dead_letter_all(dead)

    def _pick(self, dead: list[tuple[Message[T], Part]]) -> Message[T] | None:
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

    def _deliverable(self, msg: Message[T], dead: list[tuple[Message[T], Part]]) -> bool:
        mid = msg.message_id
        part = self._parts.get((mid.topic, mid.partition))
        if part is None or part.cursor.is_acked(mid.offset) or part.pending.is_pending(mid.offset):
            return False
        key = (mid.topic, mid.partition, mid.offset)
        if key in self._unacked:  # the application holds it already (delivered, not acked)
            return False
        count = self._redelivery_counts.get(key, 0)
        if self._dlq is not None and count > self._dlq.max_redeliver_count:
            dead.append((msg, part))
            return False
        return True

    def _dead_letter_all(self, dead: list[tuple[Message[T], Part]]) -> None:
        for i, (msg, part) in enumerate(dead):
            try:
                self._dead_letter(msg, part)
            except MessageTooBig as exc:
                # Its copy can never be stored (the DLQ's two properties pushed a message near the
                # limit over it): retried, it held the cursor back for good. Said once, then the
                # message goes to the application as if under the limit of redeliveries (a nack
                # of it tries the DLQ again).
                mid, dlq = msg.message_id, self._dlq
                with self._lock:
                    assert dlq is not None
                    self._redelivery_counts[(mid.topic, mid.partition, mid.offset)] = dlq.max_redeliver_count
                    for later, _part in dead[i:]:
                        self._requeue(later, 0.0 if later is msg else 1.0)
                raise MessageTooBig(
                    f"{mid} cannot be dead-lettered ({exc}); the next receive delivers it instead"
                ) from exc
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

    def _dead_letter(self, msg: Message[T], part: Part) -> None:
        assert self._dlq is not None
        name = self._kafka_topics[msg.message_id.topic]
        dlq = self._dlq.dead_letter_topic or f"{name.base}-{self.subscription}-DLQ"
        self._client.create_topic(dlq, 1)
        props = dict(msg.properties)
        props.update({"REAL_TOPIC": str(name.base), "ORIGIN_MESSAGE_ID": str(msg.message_id)})
        # The raw payload with its schema header, so the DLQ decodes with the original schema.
        sent = self._client._dlq_producer(dlq)._send_payload(
            None if msg.has_null_value else msg.data,  # a tombstone stays one
            msg.schema_header,
            None,
            None,
            props,
            msg.partition_key,
            msg.event_timestamp,
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

    def negative_acknowledge(self, message: Message[Any] | MessageId) -> None:
        """Redeliver the message after ``negative_ack_redelivery_delay_ms``."""
        self._check_open()
        ids = message_ids(message)
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
        heapq.heappush(self._redeliveries, Redelivery(time.monotonic() + delay, next(self._seq), msg))

    def _expire_unacked(self, now: float) -> None:
        with self._lock:
            expired = [k for k, (_m, at) in self._unacked.items() if now - at >= self._ack_timeout]
            for key in expired:
                entry = self._unacked.pop(key)
                if entry is not None:
                    self._redeliver(entry[0], 0)
