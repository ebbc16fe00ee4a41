"""One transaction coordinator (TC): the owner of one transaction-log partition.

All methods run on the service's event loop; no locks. Every state change is written to the log
and *confirmed* before the caller hears of it: no newer claim may precede the write in the log, so a
deposed owner can never report an outcome it did not own. An offset is known to hold no foreign claim
when the owner's tail has read it, or when it is one of the owner's own acknowledged writes. Kafka
gives a partition's records consecutive offsets, so while every offset since the tail's position is
our own write, no claim can sit between them and no read-back is needed; any other record leaves a
gap that only the tail can close.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from enum import StrEnum
from typing import Any, TypeVar

from kafka_store import Appender, StoreError
from pulsar_txn._loop_inbox import inbox
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator._log_mac import Headers, log_headers
from pulsar_txn.coordinator.endpoints import TxnEndpoints
from pulsar_txn.coordinator.fold import TcLogFold
from pulsar_txn.coordinator.records import (
    CLAIM,
    TxnMeta,
    claim_key,
    encode_claim,
    encode_seq_high_water,
    seq_key,
    txn_key,
)
from pulsar_txn.coordinator.stats import TcCounters
from pulsar_txn.coordinator.status import TxnStatus, check_transition
from pulsar_txn.errors import (
    CoordinatorFencedError,
    InvalidTxnStatusError,
    NotAllowedError,
    PersistenceError,
    ServiceNotReady,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
)
from pulsar_txn.naming import TopicName, check_subscription
from pulsar_txn.txnid import TxnAction, TxnID

log = logging.getLogger(__name__)

# Room a transaction's log record keeps for what ending it adds (status, times, header MAC): the
# participants of an open transaction always fit the records that end it.
_END_ROOM_BYTES = 4096
# A TC recovering a log with records it cannot authenticate continues its sequence at the time in ms
# shifted by this: above any sequence a TC can have reached (65,536 transactions a millisecond), and
# below 2**63 for thousands of years.
_SEQ_CLOCK_SHIFT = 16

# Errors of a TC this instance no longer serves: retrying its writes here is pointless.
_NOT_OWNER: tuple[type[Exception], ...] = (CoordinatorFencedError, TransactionCoordinatorNotFoundError)
_CLAIM_PREFIX = b"claim/"

LogRecord = tuple[int, bytes | None, bytes | None, Headers | None]  # offset, key, value, headers
_Item = str | tuple[str, str]  # a partition, or a (topic, subscription)
_T = TypeVar("_T", str, tuple[str, str])


class TcState(StrEnum):
    RECOVERING = "Recovering"
    READY = "Ready"
    FENCED = "Fenced"
    CLOSED = "Closed"


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Unlogged:
    """An item added to a transaction but not yet in a confirmed record. It is logged once any
    write carrying it is confirmed, and dropped again once every write carrying it has failed."""

    __slots__ = ("future", "item", "writes")

    def __init__(self, item: _Item, future: asyncio.Future[None]) -> None:
        self.item = item
        self.future = future
        self.writes = 0  # writes in flight that carry it


class TransactionCoordinator:
    def __init__(
        self,
        tc_id: int,
        config: CoordinatorConfig,
        appender: Appender,
        endpoints: TxnEndpoints,
        *,
        owner_id: str,
        owner_url: str,
        on_fenced: Callable[[int, int], None] | None = None,
    ) -> None:
        self.tc_id = tc_id
        self._config = config
        self._appender = appender
        self._endpoints = endpoints
        self._owner_id = owner_id
        self._owner_url = owner_url
        self._on_fenced = on_fenced
        self.state = TcState.RECOVERING
        self.tail_generation = 0  # set by the service: which tail assignment feeds this TC
        self.demand_reads: Callable[[float], None] = lambda _seconds: None  # wakes the tail
        self.epoch = -1
        self._secret = config.marker_key
        self._fold = TcLogFold(tc_id, config.log_topic, self._secret)
        self._txns: dict[int, TxnMeta] = {}
        self._keys_by_seq: dict[int, set[bytes]] = {}
        self._next_seq = 0
        self._last_read = -1
        # Confirmed through: every offset <= _verified was read by the tail or is our own write (once
        # READY, never below _last_read); _own holds our acknowledged offsets beyond a gap above it.
        self._verified = -1
        self._own: set[int] = set()
        self._confirm_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_seq = 0
        self._replayed = asyncio.Event()
        self._claim_offset: int | None = None
        self._deadlines: list[tuple[int, int]] = []
        self._deadline_changed = asyncio.Event()
        self._unfinished: list[int] = []
        self._end_done: dict[int, asyncio.Future[None]] = {}
        self._deciding: dict[int, asyncio.Future[None]] = {}  # COMMITTING/ABORTING write in flight
        self._unlogged: dict[int, dict[_Item, _Unlogged]] = {}
        self._retire_queue: deque[tuple[int, int]] = deque()
        self._commit_tokens: dict[int, bytes] = {}  # seq -> the token of the END_TXN that committed it
        self._tasks: set[asyncio.Task[Any]] = set()
        self.counters = TcCounters()
        self.recover_started_ms = 0
        self.recover_ended_ms = 0

    # ---------------------------------------------------------------- log records from the tail
    def on_records(self, records: Iterable[LogRecord]) -> None:
        """(offset, key, value) of our log partition in offset order (called on the loop by the tail)."""
        recovering = self.state is TcState.RECOVERING
        if recovering:
            self.demand_reads(2.0)
        for offset, key, value, headers in records:
            if offset <= self._last_read:
                continue
            self._last_read = offset
            if recovering:
                self._fold.apply(offset, key, value, headers)
            elif (
                key is not None
                and key.startswith(_CLAIM_PREFIX)
                and offset > self.epoch
                and self.state is TcState.READY
                and self._fold.apply(offset, key, value, headers) is not None
            ):
                self._last_read = offset - 1
                self._advance_verified(self._last_read)
                self._release_waiters()  # writes before the new claim stay valid
                self._fence(offset)
                return
        if self._claim_offset is not None and self._last_read >= self._claim_offset:
            self._replayed.set()
        if not recovering:
            self._advance_verified(self._last_read)
        self._release_waiters()

    def _note_own(self, offset: int) -> None:
        """One of our writes was acknowledged at ``offset`` (on the loop)."""
        if self.state is TcState.READY and offset > self._verified:
            if offset == self._verified + 1:
                self._advance_verified(offset)
            else:
                self._own.add(offset)

    def _advance_verified(self, through: int) -> None:
        own = self._own
        verified = max(self._verified, through)
        if own:
            own.difference_update([o for o in own if o <= verified])
            while verified + 1 in own:
                verified += 1
                own.discard(verified)
        self._verified = verified

    def known_through(self) -> int:
        """Every offset at or below this holds no record a READY owner still has to read (-1 while
        not ready: then everything must be read). Read from the log tail's thread."""
        return self._verified if self.state is TcState.READY else -1

    def _release_waiters(self) -> None:
        while self._confirm_waiters and self._confirm_waiters[0][0] <= self._verified:
            _offset, _n, fut = heapq.heappop(self._confirm_waiters)
            if not fut.done():
                fut.set_result(None)

    # ---------------------------------------------------------------- recovery
    async def recover(self) -> None:
        """Claim the TC, replay its log through our claim, then take over its transactions."""
        self.recover_started_ms = _now_ms()
        claim = encode_claim(self.tc_id, self._owner_id, self._owner_url, self.recover_started_ms)
        key = claim_key(self.tc_id, self._owner_id)
        topic = self._config.log_topic
        headers = log_headers(self._secret, topic, self.tc_id, key, claim)
        try:
            offset = await asyncio.wrap_future(
                self._appender.append(topic, self.tc_id, claim, key=key, headers=headers)
            )
        except StoreError as exc:
            raise PersistenceError(f"TC {self.tc_id}: cannot write ownership claim: {exc}") from exc
        self._claim_offset = offset
        self.demand_reads(2.0)
        if self._last_read >= offset:
            self._replayed.set()
        await self._wait_replayed()
        self._check_not_closed()
        fold = self._fold
        self._check_claim_held(offset)
        self.epoch = offset
        self._txns = fold.txns
        self._keys_by_seq = fold.keys_by_seq
        self._next_seq = fold.next_seq
        if fold.unauthenticated_records:
            # Unsigned records (an older build's log, or one written before the secret was set)
            # may hold sequences handed out already: a TxnID given out again was taken for ended
            # in every partition with the old one's marker, and its committed data never shown.
            # Continue above any of them: a floor from the clock, far above a count of past ones.
            self._next_seq = max(self._next_seq, _now_ms() << _SEQ_CLOCK_SHIFT)
        stale = list(fold.stale_keys)
        await self._adopt(stale)
        self._check_not_closed()
        self._check_claim_held(offset)  # the tail kept folding while we wrote
        now = _now_ms()
        for seq, meta in sorted(self._txns.items()):
            if meta.status is TxnStatus.OPEN:
                self._track_unfinished(seq)
                self._schedule_deadline(meta)
            elif meta.status.is_ending:
                self._track_unfinished(seq)
                self._start_end_driver(meta, recovering=True)
            else:
                self._retire_queue.append((meta.ended_at_ms + self._config.end_txn_retention_ms, seq))
        self._retire_queue = deque(sorted(self._retire_queue))
        self._verified = self._last_read
        self.state = TcState.READY
        self.recover_ended_ms = now
        self._spawn(self._timeout_loop(), "timeouts")
        self._spawn(self._retire_loop(), "retire")
        if stale:
            self._spawn(self._persist([(k, None) for k in stale], confirm=False), "tombstone-stale")
        log.info(
            "TC %d ready at epoch %d: %d txns (%d open/ending), next seq %d, recovery %d ms",
            self.tc_id,
            self.epoch,
            len(self._txns),
            len(self._unfinished),
            self._next_seq,
            now - self.recover_started_ms,
        )

    async def _wait_replayed(self) -> None:
        """Until the replay has reached our claim. ``recovery_timeout_ms`` bounds a replay that makes
        no progress, not a long one: a fixed total made a log longer than the timeout allows
        unrecoverable (each attempt wrote a new claim and replayed from the start again)."""
        timeout = self._config.recovery_timeout_ms / 1000
        read = self._last_read
        while True:
            try:
                await asyncio.wait_for(self._replayed.wait(), timeout)
                return
            except TimeoutError:
                if self._last_read == read:
                    raise
                read = self._last_read
                log.info("TC %d: replay at offset %d of %s, going on", self.tc_id, read, self._claim_offset)

    def _check_not_closed(self) -> None:
        """A TC released while it recovered (revoked, the service stopping) must not become READY:
        detached from the service, it would run timeouts and write records nobody confirms."""
        if self.state is TcState.CLOSED:
            raise TransactionCoordinatorNotFoundError(f"TC {self.tc_id} was released while recovering")

    def _check_claim_held(self, offset: int) -> None:
        if self._fold.epoch != offset:
            log.warning(
                "TC %d: claim at %d superseded by claim at %d during recovery",
                self.tc_id,
                offset,
                self._fold.epoch,
            )
            self._fence(self._fold.epoch)
            raise CoordinatorFencedError(f"TC {self.tc_id} was claimed by another instance while recovering")

    async def _adopt(self, stale: list[bytes]) -> None:
        """Rewrite what the log must keep under our own epoch's keys, before anything is tombstoned.

        A deposed owner's late write goes under the key of its own earlier, valid records of that
        transaction (``txn/<tc>/<seq>@<its epoch>``): tombstoning the stale key, or compaction keeping
        only the key's last record, would take the valid state with it. So every unfinished
        transaction, and every finished one sharing a key with a stale record, gets a record under
        our key; and the sequence high-water goes first, so no compaction makes sequences go back."""
        shared = {seq for seq, keys in self._keys_by_seq.items() if keys.intersection(stale)}
        adopt = [
            meta for seq, meta in sorted(self._txns.items()) if not meta.status.is_terminal or seq in shared
        ]
        records: list[tuple[bytes, bytes | None]] = [self._seq_record()]
        for meta in adopt:
            key = txn_key(meta.txn_id, self.epoch)
            self._keys_by_seq.setdefault(meta.txn_id.least_bits, set()).add(key)
            records.append((key, meta.encode(self.epoch)))
        await self._persist(records, confirm=False)
        for keys in self._keys_by_seq.values():
            keys.difference_update(stale)  # tombstoned next; each seq keeps our key or a valid one

    # ---------------------------------------------------------------- fencing and lifecycle
    def _fence(self, claim_offset: int) -> None:
        if self.state in (TcState.FENCED, TcState.CLOSED):
            return
        log.warning(
            "TC %d fenced: a newer owner claimed it at offset %d (our epoch %d)",
            self.tc_id,
            claim_offset,
            self.epoch,
        )
        self.state = TcState.FENCED
        err = CoordinatorFencedError(f"TC {self.tc_id} is now owned by another coordinator instance")
        self._fail_waiters(err)
        self._cancel_tasks()
        self._replayed.set()
        if self._on_fenced is not None:
            self._on_fenced(self.tc_id, claim_offset)

    def _fail_waiters(self, err: Exception) -> None:
        while self._confirm_waiters:
            _o, _n, fut = heapq.heappop(self._confirm_waiters)
            if not fut.done():
                fut.set_exception(err)
        futures = [*self._end_done.values(), *self._deciding.values()]
        futures += [rec.future for unlogged in self._unlogged.values() for rec in unlogged.values()]
        for fut in futures:
            _fail(fut, err)

    def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()

    async def close(self) -> None:
        if self.state is not TcState.FENCED:
            self.state = TcState.CLOSED
        self._replayed.set()  # a recovery waiting for its replay stops now (it sees CLOSED)
        self._fail_waiters(TransactionCoordinatorNotFoundError(f"TC {self.tc_id} is shutting down"))
        self._cancel_tasks()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"tc{self.tc_id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, _NOT_OWNER):
                log.error("TC %d task %s failed: %r", self.tc_id, task.get_name(), exc)

    def check_serving(self) -> None:
        if self.state is TcState.READY:
            return
        if self.state is TcState.RECOVERING:
            raise ServiceNotReady(f"TC {self.tc_id} is recovering")
        raise TransactionCoordinatorNotFoundError(f"TC {self.tc_id} is not served here any more")

    # ---------------------------------------------------------------- persistence with read-back
    async def _persist(self, records: list[tuple[bytes, bytes | None]], *, confirm: bool = True) -> None:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        box = inbox(loop)
        done: asyncio.Future[int] = loop.create_future()
        pending = [len(records), -1]  # records still unacknowledged, highest offset so far

        def acked(offset: int | None, error: StoreError | None) -> None:  # on the loop
            if done.done():
                return
            if error is not None or offset is None:
                done.set_exception(
                    PersistenceError(f"TC {self.tc_id}: transaction log write failed: {error}")
                )
                return
            self._note_own(offset)
            pending[0] -= 1
            pending[1] = max(pending[1], offset)
            if pending[0] == 0:
                done.set_result(pending[1])

        def delivered(offset: int | None, error: StoreError | None) -> None:  # appender thread
            box.put(acked, offset, error)

        topic, secret = self._config.log_topic, self._secret
        for key, value in records:
            headers = log_headers(secret, topic, self.tc_id, key, value)
            self._appender.append_cb(topic, self.tc_id, value, key=key, headers=headers, callback=delivered)
        last = await done
        if confirm:
            await self._confirmed(last)
        self.counters.append_log.add((time.perf_counter() - started) * 1000)

    async def _confirmed(self, offset: int) -> None:
        if self.state is not TcState.READY:
            self.check_serving()
        if offset <= self._verified:
            return
        # A record we did not write (or whose acknowledgement we lost) precedes ours: only the tail
        # can tell whether it is a newer owner's claim.
        self.counters.read_backs += 1
        self.demand_reads(0.5)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiter_seq += 1
        heapq.heappush(self._confirm_waiters, (offset, self._waiter_seq, fut))
        await fut

    async def _write_meta(self, meta: TxnMeta, *, confirm: bool = True) -> None:
        key = txn_key(meta.txn_id, self.epoch)
        value = meta.encode(self.epoch)
        limit = self._appender.max_record_bytes - _END_ROOM_BYTES
        if meta.status is TxnStatus.OPEN and len(key) + len(value) > limit:
            # Every record holds the whole state: one over Kafka's record limit is refused on every
            # retry (it was a retriable PersistenceError: callers retried until their timeout).
            raise NotAllowedError(
                f"transaction {meta.txn_id} would need a log record of {len(key) + len(value)} bytes, "
                f"over {limit}: it holds too many (or too long) partition and subscription names"
            )
        self._keys_by_seq.setdefault(meta.txn_id.least_bits, set()).add(key)
        await self._persist([(key, value)], confirm=confirm)

    async def _write_state(self, meta: TxnMeta) -> None:
        """Write ``meta`` (a full state), settling the unlogged items it carries."""
        unlogged = self._unlogged.get(meta.txn_id.least_bits)
        riding = list(unlogged.values()) if unlogged else []
        for rec in riding:
            rec.writes += 1
        try:
            await self._write_meta(meta)
        except BaseException as exc:  # a cancelled handler's record may land or not: count it failed
            self._settle(meta, riding, exc)
            raise
        self._settle(meta, riding, None)

    def _settle(self, meta: TxnMeta, riding: list[_Unlogged], error: BaseException | None) -> None:
        seq = meta.txn_id.least_bits
        unlogged = self._unlogged.get(seq, {})
        dropped: set[str | tuple[str, str]] = set()
        for rec in riding:
            if rec.future.done():
                continue  # an earlier write carrying it was confirmed
            rec.writes -= 1
            if error is None:
                rec.future.set_result(None)
            elif rec.writes > 0:
                continue  # a later write carries it too
            else:
                # In memory but in no record: drop it, or a retry would be answered without a write.
                dropped.add(rec.item)
                if not isinstance(error, Exception):
                    error = PersistenceError(f"TC {self.tc_id}: write of {meta.txn_id} was abandoned")
                _fail(rec.future, error)
            if unlogged.get(rec.item) is rec:
                del unlogged[rec.item]
        if dropped:  # one pass each (removing one by one was quadratic in a request's size)
            meta.partitions[:] = [p for p in meta.partitions if p not in dropped]
            meta.subscriptions[:] = [s for s in meta.subscriptions if s not in dropped]
        if not unlogged:
            self._unlogged.pop(seq, None)

    # ---------------------------------------------------------------- transaction operations
    def _get(self, txn_id: TxnID) -> TxnMeta:
        self.check_serving()
        meta = self._txns.get(txn_id.least_bits) if txn_id.most_bits == self.tc_id else None
        if meta is None:
            raise TransactionNotFound(
                f"transaction {txn_id} not found on TC {self.tc_id} (never created, or finished longer "
                f"than {self._config.end_txn_retention_ms} ms ago)"
            )
        return meta

    def _require_open(self, meta: TxnMeta, what: str) -> None:
        if meta.status is TxnStatus.OPEN and _now_ms() >= meta.deadline_ms:
            self._spawn(self._end(meta, TxnAction.ABORT, timed_out=True), f"timeout-{meta.txn_id}")
            raise InvalidTxnStatusError(
                f"transaction {meta.txn_id} timed out after {meta.timeout_ms} ms; cannot {what}"
            )
        if meta.status is not TxnStatus.OPEN:
            why = " (timed out)" if meta.timed_out else ""
            raise InvalidTxnStatusError(
                f"transaction {meta.txn_id} cannot {what}: expected status OPEN, "
                f"actual {meta.status.value}{why}"
            )

    async def new_txn(self, ttl_ms: int) -> TxnID:
        self.check_serving()
        ttl = ttl_ms or self._config.default_txn_timeout_ms
        if ttl < 0 or ttl > self._config.max_txn_timeout_ms:
            raise NotAllowedError(
                f"transaction timeout {ttl} ms is outside (0, {self._config.max_txn_timeout_ms}] ms"
            )
        seq = self._next_seq
        self._next_seq += 1
        now = _now_ms()
        meta = TxnMeta(TxnID(self.tc_id, seq), TxnStatus.OPEN, ttl, now, now + ttl, now)
        self._txns[seq] = meta
        self._track_unfinished(seq)
        self._schedule_deadline(meta)
        self.counters.created += 1
        await self._write_meta(meta)
        return meta.txn_id

    def _check_participants(self, meta: TxnMeta, more: int) -> None:
        limit = self._config.max_txn_participants
        held = len(meta.partitions) + len(meta.subscriptions)
        if held + more > limit:
            raise NotAllowedError(
                f"transaction {meta.txn_id} would hold {held + more} partitions and subscriptions; "
                f"at most {limit} (max_txn_participants)"
            )

    async def add_partitions(self, txn_id: TxnID, partitions: list[str]) -> None:
        meta = self._get(txn_id)
        self._require_open(meta, "add partitions")
        # A name no marker can ever be written to would hold the end (and the low watermark) for
        # good: InvalidTopicName, before anything is logged.
        await self._add(meta, meta.partitions, partitions, TopicName.parse)

    async def add_subscriptions(self, txn_id: TxnID, subscriptions: list[tuple[str, str]]) -> None:
        meta = self._get(txn_id)
        self._require_open(meta, "add subscriptions")
        await self._add(meta, meta.subscriptions, subscriptions, lambda pair: check_subscription(*pair))

    async def _add(
        self, meta: TxnMeta, have: list[_T], wanted: list[_T], validate: Callable[[_T], object]
    ) -> None:
        """Answered once every wanted item is in a confirmed record: the client writes to a
        partition as soon as it hears back, and recovery only knows the partitions in the log.
        New items are counted against ``max_txn_participants`` and ``validate``d before any work."""
        wanted = list(dict.fromkeys(wanted))
        known = set(have)
        new = [x for x in wanted if x not in known]
        if new:
            self._check_participants(meta, len(new))
            for x in new:
                validate(x)
            unlogged = self._unlogged.setdefault(meta.txn_id.least_bits, {})
            loop = asyncio.get_running_loop()
            for x in new:
                unlogged[x] = _Unlogged(x, loop.create_future())
            have.extend(new)
            meta.updated_at_ms = _now_ms()
            await self._write_state(meta)  # carries the wanted items still in flight as well
            return
        # Added already, but perhaps by a write still in flight (a retry, or a concurrent request).
        unlogged = self._unlogged.get(meta.txn_id.least_bits, {})
        pending = [rec.future for x in wanted if (rec := unlogged.get(x)) is not None]
        for fut in pending:
            await asyncio.shield(fut)

    async def end_txn(self, txn_id: TxnID, action: TxnAction, token: bytes | None = None) -> None:
        started = time.perf_counter()
        try:
            await self._end_txn(txn_id, action, token)
        except (TransactionNotFound, InvalidTxnStatusError):
            # A refusal comes from memory, which a deposed owner (its tail not past the newer claim
            # yet) has stale: "not found" for a transaction the new owner created and committed
            # would make a client redo committed work. Answer it only while still the owner.
            await self._confirm_owner()
            raise
        finally:  # every request answered, refusals and failures too ("over all")
            self.counters.end_txn.add((time.perf_counter() - started) * 1000)

    async def _confirm_owner(self) -> None:
        """Still this TC's owner now (else ``CoordinatorFencedError``, retriable): a harmless log
        write (the sequence high-water again), read back with nothing newer before it."""
        self.check_serving()  # fenced or closed already: say so, and write nothing under a dead epoch
        await self._persist([self._seq_record()])

    def _seq_record(self) -> tuple[bytes, bytes]:
        """The sequence high-water record under this epoch's key."""
        return (
            seq_key(self.tc_id, self.epoch),
            encode_seq_high_water(self.tc_id, self.epoch, self._next_seq),
        )

    async def _end_txn(self, txn_id: TxnID, action: TxnAction, token: bytes | None = None) -> None:
        meta = self._get(txn_id)
        seq = txn_id.least_bits
        want = TxnStatus.COMMITTING if action is TxnAction.COMMIT else TxnStatus.ABORTING
        done = TxnStatus.COMMITTED if action is TxnAction.COMMIT else TxnStatus.ABORTED
        if meta.status in (want, done):
            first = self._commit_tokens.get(seq) if action is TxnAction.COMMIT else None
            if token is not None and first is not None and token != first:
                # Not a retry of the commit: another handle committed it (``resume_transaction``).
                # This handle may have sent since, and those sends are not part of it: say so, as
                # Pulsar refuses an end of an ended transaction.
                raise InvalidTxnStatusError(
                    f"transaction {txn_id} was committed by another client's END_TXN: messages sent "
                    "through this handle after that commit are not part of it"
                )
            await self._wait_end(meta)  # idempotent end: same outcome asked again (a retry)
            return
        if meta.status is TxnStatus.OPEN and action is TxnAction.COMMIT and _now_ms() >= meta.deadline_ms:
            self._require_open(meta, "commit")
        if meta.status is not TxnStatus.OPEN:
            self._require_open(meta, f"become {want.value}")  # raises: names expected and actual status
        if action is TxnAction.COMMIT and token is not None:
            self._commit_tokens[seq] = token  # in memory only: after a failover any commit repeats
        await self._end(meta, action, timed_out=False)

    async def _end(self, meta: TxnMeta, action: TxnAction, *, timed_out: bool) -> None:
        target = TxnStatus.COMMITTING if action is TxnAction.COMMIT else TxnStatus.ABORTING
        if meta.status is not target:
            check_transition(meta.txn_id, meta.status, target)
            self._decide(meta, target, timed_out=timed_out)
        await self._wait_end(meta)

    def _decide(self, meta: TxnMeta, target: TxnStatus, *, timed_out: bool) -> None:
        """Log the decision, then carry it out, in a task of the TC: a request handler may be
        cancelled (its connection closed) while the record is in flight, and the record may land."""
        seq = meta.txn_id.least_bits
        # Set at once, and for good: ADD_* and the other outcome are refused, the same outcome
        # waits for this one.
        meta.status = target
        meta.timed_out = timed_out
        meta.updated_at_ms = _now_ms()
        loop = asyncio.get_running_loop()
        self._deciding[seq] = loop.create_future()
        self._end_done[seq] = loop.create_future()
        self._spawn(self._log_decision(meta), f"decide-{meta.txn_id}")

    async def _log_decision(self, meta: TxnMeta) -> None:
        seq = meta.txn_id.least_bits
        try:
            # Never undone: a write reported failed may have landed ("possibly persisted" after a
            # timeout), and the log then holds the decision already. Undoing it in memory let a
            # timeout or the client's abort write the other outcome after it, and a failover then
            # flipped the outcome back. So the decision stands and is written again until
            # confirmed; the same end asked again waits for it, the other one is refused.
            await self._retry(
                lambda: self._write_state(meta), meta.txn_id, "logging its decision", give_up=_NOT_OWNER
            )
        except _NOT_OWNER as exc:
            # Not the owner any more: the next owner decides from the log (the decision is there
            # or not); nothing here acts on it. Callers learn to ask the new owner.
            for futures in (self._deciding, self._end_done):
                fut = futures.pop(seq, None)
                if fut is not None:
                    _fail(fut, exc)
            return
        if meta.timed_out:
            self.counters.timed_out += 1
        decided = self._deciding.pop(seq)
        if not decided.done():
            decided.set_result(None)
        self._start_end_driver(meta)

    async def _wait_end(self, meta: TxnMeta) -> None:
        """Until the decision is logged, then until it is carried out (markers written, outcome
        logged), except with ``end_txn_reply=after_decision``."""
        decided = self._deciding.get(meta.txn_id.least_bits)
        if decided is not None:
            await asyncio.shield(decided)
        if self._config.end_txn_reply == "after_decision":
            return
        fut = self._end_done.get(meta.txn_id.least_bits)
        if fut is not None:
            await asyncio.shield(fut)

    # ---------------------------------------------------------------- driving the end
    def _start_end_driver(self, meta: TxnMeta, *, recovering: bool = False) -> None:
        seq = meta.txn_id.least_bits
        if seq not in self._end_done:  # recovery: nobody asked
            self._end_done[seq] = asyncio.get_running_loop().create_future()
        self._spawn(self._drive_end(meta, recovering), f"end-{meta.txn_id}")

    async def _drive_end(self, meta: TxnMeta, recovering: bool) -> None:
        action = TxnAction.COMMIT if meta.status is TxnStatus.COMMITTING else TxnAction.ABORT
        lwm = self.low_watermark()
        calls: list[Callable[[], Awaitable[None]]] = [
            functools.partial(
                self._endpoints.end_on_partition, p, meta.txn_id, action, lwm, recovering=recovering
            )
            for p in meta.partitions
        ]
        calls += [
            functools.partial(self._endpoints.end_on_subscription, topic, sub, meta.txn_id, action, lwm)
            for topic, sub in meta.subscriptions
        ]
        await asyncio.gather(*(self._retry(call, meta.txn_id) for call in calls))
        final = meta.copy()
        final.status = TxnStatus.COMMITTED if action is TxnAction.COMMIT else TxnStatus.ABORTED
        final.ended_at_ms = _now_ms()
        final.updated_at_ms = final.ended_at_ms
        # The decision was durable since COMMITTING/ABORTING; markers are now written, so the
        # caller may go. The terminal record is housekeeping (a new owner would redo the markers).
        meta.status, meta.ended_at_ms, meta.updated_at_ms = (
            final.status,
            final.ended_at_ms,
            final.updated_at_ms,
        )
        if action is TxnAction.COMMIT:
            self.counters.committed += 1
        else:
            self.counters.aborted += 1
        self.counters.execution_latency.add(final.ended_at_ms - meta.opened_at_ms)
        fut = self._end_done.get(meta.txn_id.least_bits)
        if fut is not None and not fut.done():
            fut.set_result(None)
        self._retire_queue.append(
            (final.ended_at_ms + self._config.end_txn_retention_ms, meta.txn_id.least_bits)
        )
        await self._write_meta(final, confirm=False)

    async def _retry(
        self,
        call: Callable[[], Awaitable[None]],
        txn_id: TxnID,
        what: str = "participant failed",
        *,
        give_up: tuple[type[Exception], ...] = (),
    ) -> None:
        """``call`` until it succeeds, with back-off (``end_retry_*``); ``give_up`` errors are
        raised instead of retried."""
        backoff = self._config.end_retry_initial_backoff_ms / 1000
        while True:
            try:
                await call()
                return
            except asyncio.CancelledError:
                raise
            except give_up:
                raise
            except Exception as exc:  # any other failure is retried until it succeeds
                self.counters.end_retries += 1
                log.warning(
                    "TC %d: ending %s: %s (%s); retrying in %.2fs",
                    self.tc_id,
                    txn_id,
                    what,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._config.end_retry_max_backoff_ms / 1000)

    # ---------------------------------------------------------------- low watermark
    def _track_unfinished(self, seq: int) -> None:
        heapq.heappush(self._unfinished, seq)

    def low_watermark(self) -> int:
        """Every transaction of this TC with sequence <= the result has ended (markers written)."""
        heap = self._unfinished
        while heap:
            meta = self._txns.get(heap[0])
            if meta is not None and not meta.status.is_terminal:
                return heap[0] - 1
            heapq.heappop(heap)
        return self._next_seq - 1

    # ---------------------------------------------------------------- timeouts
    def _schedule_deadline(self, meta: TxnMeta, at_ms: int | None = None) -> None:
        entry = (meta.deadline_ms if at_ms is None else at_ms, meta.txn_id.least_bits)
        earliest = not self._deadlines or entry < self._deadlines[0]
        heapq.heappush(self._deadlines, entry)
        if earliest:
            self._deadline_changed.set()

    async def _timeout_loop(self) -> None:
        while True:
            self._deadline_changed.clear()
            now = _now_ms()
            while self._deadlines and self._deadlines[0][0] <= now:
                _deadline, seq = heapq.heappop(self._deadlines)
                meta = self._txns.get(seq)
                if meta is not None and meta.status is TxnStatus.OPEN:
                    log.info(
                        "TC %d: transaction %s timed out after %d ms; aborting",
                        self.tc_id,
                        meta.txn_id,
                        meta.timeout_ms,
                    )
                    self._spawn(self._end(meta, TxnAction.ABORT, timed_out=True), f"timeout-{meta.txn_id}")
            delay = (self._deadlines[0][0] - now) / 1000 if self._deadlines else 3600.0
            try:
                await asyncio.wait_for(self._deadline_changed.wait(), max(delay, 0.001))
            except TimeoutError:
                pass

    # ---------------------------------------------------------------- retention of finished txns
    async def _retire_loop(self) -> None:
        interval = min(1.0, max(0.05, self._config.end_txn_retention_ms / 2000))
        while True:
            await asyncio.sleep(interval)
            now = _now_ms()
            due: list[int] = []
            while self._retire_queue and self._retire_queue[0][0] <= now:
                due.append(self._retire_queue.popleft()[1])
            if not due:
                continue
            try:
                await self._retire(due)
            except _NOT_OWNER:
                raise  # no longer this instance's TC: the loop ends with it
            except Exception as exc:
                # A failed tombstone write (a Kafka time-out): kept and tried again at the next pass.
                # Ending the loop stopped retirement for good: memory grew with every transaction.
                log.warning(
                    "TC %d: retiring %d finished transactions failed (retried): %s", self.tc_id, len(due), exc
                )
                self._retire_queue.extendleft((now, seq) for seq in reversed(due))

    async def _retire(self, seqs: list[int]) -> None:
        # The sequence high-water goes first so compaction can never make sequences go backwards.
        records: list[tuple[bytes, bytes | None]] = [self._seq_record()]
        retired = []
        for seq in seqs:
            meta = self._txns.get(seq)
            if meta is None or not meta.status.is_terminal:
                continue
            records.extend((key, None) for key in sorted(self._keys_by_seq.get(seq, ())))
            retired.append(seq)
        if not retired:
            return
        await self._persist(records, confirm=False)
        for seq in retired:  # forgotten once the tombstones are stored
            self._keys_by_seq.pop(seq, None)
            self._txns.pop(seq, None)
            self._end_done.pop(seq, None)
            self._commit_tokens.pop(seq, None)

    # ---------------------------------------------------------------- introspection
    def get(self, txn_id: TxnID) -> TxnMeta | None:
        return self._txns.get(txn_id.least_bits) if txn_id.most_bits == self.tc_id else None

    def stats(self) -> dict[str, Any]:
        ongoing = sum(1 for m in self._txns.values() if not m.status.is_terminal)
        out: dict[str, Any] = {
            "tc_id": self.tc_id,
            "state": self.state.value,
            "epoch": self.epoch,
            "least_sig_bits": self._next_seq - 1,
            "low_water_mark": self.low_watermark() if self.state is TcState.READY else -1,
            "ongoing_txn_size": ongoing,
            "active_count": ongoing,
            "recover_start_time": self.recover_started_ms,
            "recover_end_time": self.recover_ended_ms,
            "skipped_log_records": self._fold.skipped_records,
        }
        out.update(self.counters.snapshot())
        return out


def _fail(fut: asyncio.Future[None], err: BaseException) -> None:
    if not fut.done():
        fut.set_exception(err)
        fut.exception()  # mark retrieved: nobody may be waiting


__all__ = ["CLAIM", "TcState", "TransactionCoordinator"]
