"""The coordinator service: owns TCs (through the consumer group or a static list), routes requests
to them, and keeps the owner directory that lookups answer from."""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka_store import (
    REGISTRY,
    Appender,
    CodecError,
    GroupMembership,
    KafkaConfig,
    PartitionReader,
    RecordKind,
    StoreError,
    TopicAdmin,
    TopicNotFoundError,
)
from kafka_store.lograte import THROTTLE
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator._log_mac import log_headers, log_record_valid
from pulsar_txn.coordinator.endpoints import KafkaTxnEndpoints, TxnEndpoints
from pulsar_txn.coordinator.tc import LogRecord, TcState, TransactionCoordinator
from pulsar_txn.errors import (
    ConfigError,
    CoordinatorFencedError,
    PulsarTxnError,
    ServiceNotReady,
    TransactionCoordinatorNotFoundError,
)
from pulsar_txn.txnid import TxnAction, TxnID

log = logging.getLogger(__name__)

# A claim that fenced a TC the group still assigns to this instance, and that made no owner within
# this pause (doubling while it happens again soon after), is answered with a claim of ours.
_RECLAIM_AFTER_S = 5.0  # longer than a fresh owner's recovery usually takes to publish its TcOwner
_RECLAIM_MAX_S = 60.0

OWNER = REGISTRY.register(
    RecordKind(
        "TcOwner",
        code=4,
        schemas={
            1: {
                "type": "record",
                "name": "TcOwnerV1",
                "namespace": "pulsar_txn.log",
                "fields": [
                    {"name": "tc_id", "type": "long"},
                    {"name": "epoch", "type": "long"},
                    {"name": "owner_id", "type": "string"},
                    {"name": "owner_url", "type": "string"},
                ],
            }
        },
    )
)


class LogTail:
    """One thread reading the owned log partitions (and the owner directory), handing record batches
    to the event loop. Replay and read-back confirmation both come through here."""

    def __init__(
        self,
        kafka: KafkaConfig,
        loop: asyncio.AbstractEventLoop,
        dispatch: Callable[[dict[tuple[str, int], tuple[int, list[LogRecord]]]], None],
        known: Callable[[str, int], int] = lambda _topic, _partition: -1,
    ) -> None:
        self._reader = PartitionReader(kafka, fetch_wait_ms=5)
        self._known = known  # offsets at or below it need no reading (see _skip_known)
        self._loop = loop
        self._dispatch = dispatch
        self._commands: queue.SimpleQueue[tuple[str, str, int, int, int]] = queue.SimpleQueue()
        # Each assignment of a partition gets a generation, so batches read under an earlier
        # assignment can never reach the component that took the partition on again.
        self._assigned: dict[tuple[str, int], int] = {}
        self._generations = itertools.count(1)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._demand_until = 0.0  # read actively until then (set by ``want``)
        self._paused: bool | None = False  # None: some partitions paused, some not
        self._thread = threading.Thread(target=self._run, name="log-tail", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, topic: str, partition: int, offset: int = 0) -> int:
        """Start reading ``topic[partition]`` at ``offset``; returns the generation its batches carry."""
        generation = next(self._generations)
        self._commands.put(("add", topic, partition, offset, generation))
        self.want(2.0)
        return generation

    def remove(self, topic: str, partition: int) -> None:
        self._commands.put(("remove", topic, partition, 0, 0))

    def want(self, seconds: float = 0.5) -> None:
        """Read actively for a while: a read-back or a recovery is waiting on this tail."""
        self._demand_until = max(self._demand_until, time.monotonic() + seconds)
        if self._paused is not False:
            self._wake.set()

    def _run(self) -> None:
        next_refresh = 0.0
        refreshing = False  # a refresh read is on: it ends once every partition reported its end
        while not self._stop.is_set():
            try:
                self._apply_commands()
                if not self._assigned:
                    self._stop.wait(0.01)
                    continue
                now = time.monotonic()
                if now >= self._demand_until and (
                    now >= next_refresh or (refreshing and self._refresh_read_done())
                ):
                    # Idle: stop fetching (brokers that answer empty fetches at once would make an
                    # assigned consumer spin) and wake for demand, commands, or a periodic refresh.
                    refreshing = False
                    self._set_paused(True)
                    self._wake.wait(1.0)
                    self._wake.clear()
                    if time.monotonic() >= self._demand_until:
                        next_refresh = time.monotonic() + 1.0  # the refresh read's cap
                        # A seek re-arms a partition's end report: _skip_known's seeks do it for
                        # the partitions it moves, a seek to the same position for the others.
                        self._reader.rearm_ends(self._skip_known())
                        refreshing = True
                    continue
                self._set_paused(False)
                records = self._reader.poll_messages(5000, 0.02)
            except StoreError as exc:
                log.warning("log tail read failed (will retry): %s", exc)
                self._stop.wait(0.2)
                continue
            if records:
                groups: dict[tuple[str, int], tuple[int, list[LogRecord]]] = {}
                for msg in records:
                    tp = (msg.topic(), msg.partition())
                    generation = self._assigned.get(tp)
                    if generation is not None:
                        record = (msg.offset(), msg.key(), msg.value(), msg.headers())
                        groups.setdefault(tp, (generation, []))[1].append(record)
                self._loop.call_soon_threadsafe(self._dispatch, groups)
        self._reader.close()

    def _refresh_read_done(self) -> bool:
        """Every partition has reported an end since the refresh re-armed them (not a fixed window:
        on a loaded machine the fetch after a seek can take longer than any window)."""
        return all(self._reader.at_eof(topic, partition) for topic, partition in self._assigned)

    def _skip_known(self) -> list[tuple[str, int]]:
        """Before a refresh read, move past what the owner already knows holds no foreign record
        (its own acknowledged writes and what the tail has read): the refresh then reads only what
        came after, instead of every record the owner wrote since the last one. Returns the
        partitions it did not move."""
        unmoved = []
        for topic, partition in list(self._assigned):
            known = self._known(topic, partition)
            if known >= 0:
                try:
                    self._reader.seek(topic, partition, known + 1)
                    continue
                except StoreError as exc:  # only an optimisation: the refresh then reads it all
                    log.debug("log tail: seek of %s[%d] failed: %s", topic, partition, exc)
            unmoved.append((topic, partition))
        return unmoved

    def _set_paused(self, paused: bool) -> None:
        if paused != self._paused:
            (self._reader.pause if paused else self._reader.resume)(list(self._assigned))
            self._paused = paused

    def _apply_commands(self) -> None:
        while True:
            try:
                op, topic, partition, offset, generation = self._commands.get_nowait()
            except queue.Empty:
                return
            if op == "add":
                if (topic, partition) in self._assigned:
                    self._reader.remove(topic, partition)
                self._reader.add(topic, partition, offset)
                self._assigned[(topic, partition)] = generation
                self._paused = None  # a fresh assignment fetches while the others may be paused
            elif (topic, partition) in self._assigned:
                self._reader.remove(topic, partition)
                del self._assigned[(topic, partition)]

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


def adopt_tc_count(admin: TopicAdmin, cfg: CoordinatorConfig) -> CoordinatorConfig:
    """``cfg`` with ``num_tcs`` as the cluster was initialised when it was left at its default: a
    cluster's TC count is its transaction log's partition count (an instance started without
    ``--num-tcs`` refused to start on a cluster of another count). With ``num_tcs`` given, ``cfg``."""
    if "num_tcs" in cfg.model_fields_set:
        return cfg
    try:
        actual = admin.partition_count(cfg.log_topic)
    except TopicNotFoundError:
        return cfg  # a new cluster: initialised with the default
    except StoreError:
        return cfg  # Kafka not answering: the start fails on it next, as without this step
    if actual == cfg.num_tcs:
        return cfg
    if cfg.ownership == "static" and any(t >= actual for t in cfg.static_tc_ids):
        raise PulsarTxnError(
            f"static_tc_ids {list(cfg.static_tc_ids)} name TCs the cluster lacks: its transaction "
            f"log {cfg.log_topic} has {actual} partitions (TCs 0-{actual - 1})"
        )
    log.info("joining a cluster of %d TCs (the partitions of %s)", actual, cfg.log_topic)
    return cfg.model_copy(update={"num_tcs": actual})


class CoordinatorService:
    """A coordinator instance. Implements ``CoordinatorApi``. No I/O until ``start``."""

    def __init__(
        self,
        kafka: KafkaConfig,
        config: CoordinatorConfig | None = None,
        *,
        advertised_url: str | None = None,
        endpoints: TxnEndpoints | None = None,
    ) -> None:
        self.kafka = kafka
        self.config = config or CoordinatorConfig()
        self.instance_id = uuid.uuid4().hex[:12]
        self.advertised_url = advertised_url or self.config.advertised_url or ""
        self._endpoints_override = endpoints
        self._tcs: dict[int, TransactionCoordinator] = {}
        self._owners: dict[int, tuple[int, str]] = {}
        self._wanted: set[int] = set()
        self._reclaims: dict[int, tuple[float, float]] = {}  # TC -> (last claim back, its pause)
        self._acquisitions = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tail: LogTail | None = None
        self._group: GroupMembership | None = None
        self._appender: Appender | None = None
        self._endpoints: TxnEndpoints | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        self._secret = self.config.marker_key
        self._admin: TopicAdmin | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        admin = self._admin = TopicAdmin(self.kafka)
        # Segments of 100 MB, as Kafka's own __transaction_state: compaction only cleans closed
        # segments, and a 1 GB active one would hold a busy TC's whole history for its replay.
        compact = {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": "60000",
            "segment.bytes": "104857600",
        }
        cfg = self.config = await asyncio.to_thread(adopt_tc_count, admin, cfg)
        await asyncio.to_thread(admin.ensure_topic, cfg.log_topic, cfg.num_tcs, compact)
        await asyncio.to_thread(admin.ensure_topic, cfg.owners_topic, 1, {"cleanup.policy": "compact"})
        for topic in (cfg.log_topic, cfg.owners_topic):
            await asyncio.to_thread(_require_compacted, admin, topic)
        actual = await asyncio.to_thread(admin.partition_count, cfg.log_topic)
        if actual != cfg.num_tcs:
            raise PulsarTxnError(
                f"transaction log {cfg.log_topic} has {actual} partitions but num_tcs={cfg.num_tcs}: "
                "the TC count is fixed when the cluster is initialised"
            )
        batching = cfg.log_batch_enabled
        self._appender = Appender(
            self.kafka,
            linger_ms=cfg.log_batch_max_delay_ms if batching else 0.0,
            batch_max_records=cfg.log_batch_max_records if batching else 1,
            delivery_timeout_ms=cfg.log_write_timeout_ms,
        )
        secret = self._secret
        snapshots = SnapshotStore(self.kafka, topic=cfg.snapshot_topic, partitions=cfg.snapshot_partitions)
        self._endpoints = self._endpoints_override or KafkaTxnEndpoints(
            self._appender,
            admin,
            secret,
            snapshots=snapshots,
            num_tcs=cfg.num_tcs,
            missing_topic_grace_ms=cfg.end_missing_topic_grace_ms,
            log_topic=cfg.log_topic,
        )
        self._tail = LogTail(self.kafka, self._loop, self._dispatch, self._known_through)
        self._tail.add(cfg.owners_topic, 0, 0)
        self._tail.start()
        self._started = True
        if cfg.ownership == "static":
            for tc_id in cfg.static_tc_ids:
                self._spawn(self.acquire(tc_id))
        else:
            self._group = GroupMembership(
                self.kafka,
                cfg.coordinator_group,
                cfg.log_topic,
                on_assign=self._threadsafe(self._on_assign),
                on_revoke=self._threadsafe(self._on_revoke),
                session_timeout_ms=cfg.group_session_timeout_ms,
                instance_id=cfg.group_instance_id,
            )
            await asyncio.to_thread(self._group.start)
        log.info(
            "coordinator %s started (%s ownership, %d TCs)", self.instance_id, cfg.ownership, cfg.num_tcs
        )

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until the static TCs are all served (static ownership) or any TC is (group)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        want = set(self.config.static_tc_ids) if self.config.ownership == "static" else None
        while loop.time() < deadline:
            owned = set(self.owned_tcs())
            if (want is not None and want <= owned) or (want is None and owned):
                return True
            await asyncio.sleep(0.02)
        return False

    def _threadsafe(self, fn: Callable[[list[int]], None]) -> Callable[[list[int]], None]:
        def call(partitions: list[int]) -> None:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(fn, partitions)

        return call

    def _on_assign(self, partitions: list[int]) -> None:
        for tc_id in partitions:
            if tc_id not in self._tcs:
                self._spawn(self.acquire(tc_id))

    def _on_revoke(self, partitions: list[int]) -> None:
        # Detach synchronously: an assignment that follows at once (a rebalance revokes everything,
        # then hands some back) must see these TCs as not owned and claim them afresh.
        for tc_id in partitions:
            self._wanted.discard(tc_id)
            tc = self._tcs.pop(tc_id, None)
            if tc is not None:
                self._spawn(self._close_detached(tc_id, tc))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._group is not None:
            await asyncio.to_thread(self._group.stop)
        for tc_id in list(self._tcs):
            await self.release(tc_id)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._tail is not None:
            await asyncio.to_thread(self._tail.stop)
        if self._appender is not None:
            await asyncio.to_thread(self._appender.close)
        if self._admin is not None:
            self._admin.close()
        log.info("coordinator %s stopped", self.instance_id)

    # ------------------------------------------------------------------ ownership
    async def acquire(self, tc_id: int) -> None:
        """Claim ``tc_id``, replay its log and start serving it.

        A failed attempt (Kafka unavailable, slow recovery) is retried with back-off for as long as the
        TC is still assigned to us. Losing it to a newer claim ends the attempts: the other instance owns
        it now (retrying would only fence it back and forth).
        """
        self._wanted.add(tc_id)
        backoff = 0.2
        while self._started and tc_id in self._wanted and tc_id not in self._tcs:
            try:
                if await self._acquire_once(tc_id):
                    return
            except CoordinatorFencedError:
                # A newer claim: its instance owns the TC now, unless no owner comes of it
                # (_after_fence, which the fence started, decides whether to claim it back).
                self._wanted.discard(tc_id)
                return
            log.info("TC %d: retrying acquisition in %.1fs", tc_id, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _acquire_once(self, tc_id: int) -> bool:
        assert self._appender is not None and self._endpoints is not None and self._tail is not None
        self._acquisitions += 1
        tc = TransactionCoordinator(
            tc_id,
            self.config,
            self._appender,
            self._endpoints,
            owner_id=f"{self.instance_id}-{self._acquisitions}",
            owner_url=self.advertised_url,
            on_fenced=self._on_fenced,
        )
        self._tcs[tc_id] = tc
        tc.tail_generation = self._tail.add(self.config.log_topic, tc_id, 0)
        tc.demand_reads = self._tail.want
        try:
            await tc.recover()
            if self._tcs.get(tc_id) is not tc:  # released (revoked, stopping) while it recovered
                await tc.close()
                return False
        except CoordinatorFencedError:
            await self._drop(tc_id, tc)
            raise
        except (PulsarTxnError, TimeoutError) as exc:
            if self._tcs.get(tc_id) is tc:  # else released meanwhile: its recovery stopped, as it should
                log.error("TC %d: recovery failed: %r", tc_id, exc)
                await self._drop(tc_id, tc)
            return False
        owner = OWNER.encode(
            {
                "tc_id": tc_id,
                "epoch": tc.epoch,
                "owner_id": self.instance_id,
                "owner_url": self.advertised_url,
            }
        )
        self._owners[tc_id] = (tc.epoch, self.advertised_url)
        key, topic = str(tc_id).encode(), self.config.owners_topic
        headers = log_headers(self._secret, topic, 0, key, owner)
        self._appender.append(topic, 0, owner, key=key, headers=headers)
        return True

    async def _drop(self, tc_id: int, tc: TransactionCoordinator) -> None:
        if self._tcs.get(tc_id) is tc:
            await self.release(tc_id, keep_wanted=True)

    async def _close_detached(self, tc_id: int, tc: TransactionCoordinator) -> None:
        await tc.close()
        if self._tail is not None and tc_id not in self._tcs:
            self._tail.remove(self.config.log_topic, tc_id)
        log.info("TC %d released", tc_id)

    async def release(self, tc_id: int, *, keep_wanted: bool = False) -> None:
        if not keep_wanted:
            self._wanted.discard(tc_id)
        tc = self._tcs.pop(tc_id, None)
        if tc is not None:
            await self._close_detached(tc_id, tc)

    def _assigned_by_group(self, tc_id: int) -> bool:
        """Group ownership: the group assigns ``tc_id`` to this instance now (to no other member)."""
        return self._group is not None and tc_id in self._group.assigned

    def _on_fenced(self, tc_id: int, claim_offset: int) -> None:
        self._spawn(self._after_fence(tc_id, claim_offset))

    async def _after_fence(self, tc_id: int, claim_offset: int) -> None:
        """A newer claim (at ``claim_offset``) took ``tc_id``: let it go. With static ownership, or the
        group assigning the TC elsewhere, the newer claimant owns it. If the group still assigns it to
        us and no owner comes of that claim (a TcOwner record of its epoch, published once its
        recovery ends), it was a late write of an acquisition revoked meanwhile, and nobody else
        would claim the TC until the group rebalances: claim it again. An owner that does appear
        (another instance whose assignment ours has not caught up with) keeps it: two instances must
        not take the TC from each other back and forth."""
        await self.release(tc_id)
        now = time.monotonic()
        last, pause = self._reclaims.get(tc_id, (0.0, 0.0))
        pause = min(2 * pause, _RECLAIM_MAX_S) if now - last < _RECLAIM_MAX_S else _RECLAIM_AFTER_S
        deadline = now + pause

        def still_ours_alone() -> bool:
            return self._started and self._assigned_by_group(tc_id) and tc_id not in self._tcs

        while time.monotonic() < deadline:
            if not still_ours_alone():
                return
            owner = self._owners.get(tc_id)
            if owner is not None and owner[0] >= claim_offset:
                return  # the claim made an owner: not a stray one
            await asyncio.sleep(0.1)
        if still_ours_alone():
            self._reclaims[tc_id] = (time.monotonic(), pause)
            log.warning(
                "TC %d: the claim at %d that fenced it made no owner in %.0fs while the group "
                "assigns the TC here; claiming it again",
                tc_id,
                claim_offset,
                pause,
            )
            await self.acquire(tc_id)

    def _known_through(self, topic: str, partition: int) -> int:
        """(On the tail's thread.) How far a ready TC's log needs no reading; -1: read everything."""
        tc = self._tcs.get(partition) if topic == self.config.log_topic else None
        return tc.known_through() if tc is not None else -1

    def _dispatch(self, groups: dict[tuple[str, int], tuple[int, list[LogRecord]]]) -> None:
        for (topic, partition), (generation, records) in groups.items():
            if topic == self.config.owners_topic:
                self._update_owners(records)
                continue
            tc = self._tcs.get(partition)
            if tc is not None and tc.tail_generation == generation:
                try:
                    tc.on_records(records)
                except Exception:  # a bug of one TC's must not drop the other TCs' records (claims)
                    log.exception("TC %d: folding log records failed", partition)

    def _update_owners(self, records: list[LogRecord]) -> None:
        for offset, key, value, headers in records:
            if not log_record_valid(self._secret, self.config.owners_topic, 0, key, value, headers):
                # Forged (or written without the secret): it could send clients, and their auth
                # tokens, to any address.
                THROTTLE.warning(
                    log,
                    (self.config.owners_topic, "forged"),
                    "owner directory offset %d skipped: failed authentication",
                    offset,
                )
                continue
            try:
                fields = REGISTRY.decode_as(OWNER, value)
            except CodecError as exc:
                THROTTLE.warning(
                    log,
                    (self.config.owners_topic, "corrupt"),
                    "owner directory offset %d skipped: %s",
                    offset,
                    exc,
                )
                continue
            tc_id, epoch = int(fields["tc_id"]), int(fields["epoch"])
            known = self._owners.get(tc_id)
            if known is None or epoch >= known[0]:
                self._owners[tc_id] = (epoch, fields["owner_url"])

    # ------------------------------------------------------------------ CoordinatorApi
    @property
    def num_tcs(self) -> int:
        return self.config.num_tcs

    def owned_tcs(self) -> list[int]:
        return sorted(t for t, tc in self._tcs.items() if tc.state is TcState.READY)

    def owner_url(self, tc_id: int) -> str | None:
        """Where the TC is served: here, another instance, or None (nobody known, or this instance
        is recovering it: its claim deposed the owner the directory still names, so a client sent
        there would only be sent back; ServiceNotReady tells it to retry)."""
        tc = self._tcs.get(tc_id)
        if tc is not None:
            return self.advertised_url if tc.state is TcState.READY else None
        known = self._owners.get(tc_id)
        if known is None or known[1] == self.advertised_url:
            return None
        return known[1] or None

    def _tc(self, tc_id: int) -> TransactionCoordinator:
        if not self._started:
            raise ServiceNotReady("coordinator is not started")
        if not 0 <= tc_id < self.config.num_tcs:
            raise TransactionCoordinatorNotFoundError(
                f"TC {tc_id} does not exist (cluster has {self.config.num_tcs})"
            )
        tc = self._tcs.get(tc_id)
        if tc is None:
            owner = self.owner_url(tc_id)
            where = f"; owned by {owner}" if owner else ""
            raise TransactionCoordinatorNotFoundError(
                f"TC {tc_id} is not owned by this instance{where}", owner_url=owner
            )
        return tc

    def check_serving(self, tc_id: int) -> None:
        self._tc(tc_id).check_serving()

    def coordinator(self, tc_id: int) -> TransactionCoordinator:
        return self._tc(tc_id)

    async def new_txn(self, tc_id: int, ttl_ms: int) -> TxnID:
        return await self._tc(tc_id).new_txn(ttl_ms)

    async def add_partitions(self, txn_id: TxnID, partitions: list[str]) -> None:
        await self._tc(txn_id.most_bits).add_partitions(txn_id, partitions)

    async def add_subscriptions(self, txn_id: TxnID, subscriptions: list[tuple[str, str]]) -> None:
        await self._tc(txn_id.most_bits).add_subscriptions(txn_id, subscriptions)

    async def end_txn(self, txn_id: TxnID, action: TxnAction, token: bytes | None = None) -> None:
        await self._tc(txn_id.most_bits).end_txn(txn_id, action, token)

    def stats(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "url": self.advertised_url,
            "num_tcs": self.config.num_tcs,
            "owned_tcs": self.owned_tcs(),
            "coordinators": {str(t): tc.stats() for t, tc in sorted(self._tcs.items())},
        }


__all__ = ["CoordinatorFencedError", "CoordinatorService", "LogTail"]


def _require_compacted(admin: TopicAdmin, topic: str) -> None:
    """``ConfigError`` unless ``topic`` (made before, e.g. by auto-creation or an operator) is
    compacted only: time retention or DeleteRecords on the log deleted the records that keep TxnIDs
    unique, and a restarted TC handed out (0,0) again, whose new messages readers then dropped as
    late ones of the old transaction (review of session 44). A broker that does not answer
    DescribeConfigs (e.g. no permission) is logged, not fatal."""
    try:
        policy = admin.cleanup_policy(topic)
    except StoreError as exc:
        log.warning("cannot check the cleanup.policy of %s (it must be compact): %s", topic, exc)
        return
    if {p.strip() for p in policy.split(",")} != {"compact"}:
        raise ConfigError(
            f"system topic {topic} has cleanup.policy={policy}: it must be 'compact' only (retention"
            " would delete records that keep transaction ids unique); alter the topic's config"
        )
