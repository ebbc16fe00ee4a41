"""Seek: the cursor reset, with pending acks of open transactions carried over first."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kafka_store import (
    StoreError,
    end_offsets,
    offsets_for_time,
)
from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn.errors import (
    ConfigError,
    NotAllowedError,
    PersistenceError,
    PulsarTxnError,
    Timeout,
    from_store_error,
)
from pulsar_txn.message import EARLIEST, LATEST, MessageId, new_message_id
from pulsar_txn.subscription._base import (
    ConsumerBase,
    Part,
    T,
    log,
)
from pulsar_txn.txnid import TxnID

if TYPE_CHECKING:
    pass


@public_errors
class Seeking(ConsumerBase[T]):
    """The consumer's seek (a part of ``Consumer``)."""

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

    def _carry_pending_acks(self, part: Part) -> dict[TxnID, int]:
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
                for value, headers in self._encoded_acks(part, txn, kind, offsets):
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

    def _settle_ended_elsewhere(self, part: Part) -> None:
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

    def _read_pending_acks_to_end(self, part: Part) -> None:
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
