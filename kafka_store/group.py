"""Kafka consumer-group membership used only for partition *assignment* (never for records).

The coordinator uses it to share TC ids (log partitions) among instances: Kafka's group protocol
decides who owns what, rebalances when instances come and go, and evicts silent members.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from kafka_store._clients import kafka_error_of, make_client, poll_ready
from kafka_store.config import KafkaConfig
from kafka_store.errors import StoreError
from kafka_store.reader import FETCH_QUEUE_BACKOFF_MS, MAX_RESPONSE_BYTES

log = logging.getLogger(__name__)


def _group_conf(
    config: KafkaConfig, group_id: str, session_timeout_ms: int, instance_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    """Consumer-group settings shared by every group member we run; ``extra`` overrides.
    ``instance_id``: static membership (``group.instance.id``, KIP-345)."""
    conf: dict[str, Any] = config.client_conf()
    conf.update(
        {
            "group.id": group_id,
            "enable.auto.commit": False,
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": max(100, session_timeout_ms // 6),
        }
    )
    if instance_id:
        conf["group.instance.id"] = instance_id
    conf.update(extra)
    return conf


class GroupMembership:
    def __init__(
        self,
        config: KafkaConfig,
        group_id: str,
        topic: str,
        on_assign: Callable[[list[int]], None],
        on_revoke: Callable[[list[int]], None],
        *,
        session_timeout_ms: int = 6000,
        instance_id: str | None = None,
    ) -> None:
        self._conf = _group_conf(
            config,
            group_id,
            session_timeout_ms,
            instance_id,
            **{"auto.offset.reset": "latest", "partition.assignment.strategy": "range"},
        )
        self._topic = topic
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self.assigned: list[int] = []

    def start(self) -> None:
        self._consumer = make_client(Consumer, self._conf, "Kafka consumer")
        self._consumer.subscribe([self._topic], on_assign=self._assigned, on_revoke=self._revoked)
        self._thread = threading.Thread(target=self._run, name=f"group-{self._topic}", daemon=True)
        self._thread.start()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)  # membership only: we never want these records
        self.assigned = sorted(tp.partition for tp in partitions)
        log.info("group %s assigned %s partitions %s", self._conf["group.id"], self._topic, self.assigned)
        self._on_assign(self.assigned)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = sorted(tp.partition for tp in partitions)
        self.assigned = [p for p in self.assigned if p not in revoked]
        log.info("group %s revoked %s partitions %s", self._conf["group.id"], self._topic, revoked)
        self._on_revoke(revoked)
        consumer.unassign()

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None  # set before the thread starts
        while not self._stop.is_set():
            try:
                msg = consumer.poll(0.1)
            except KafkaException as exc:
                err = kafka_error_of(exc)
                if err is not None and is_fatal(err):
                    self._end(str(exc))
                    return
                log.warning("group membership poll error: %s", exc)
                continue
            except Exception:  # a rebalance callback's own error, re-raised by poll(): live on
                log.exception("group %s: a rebalance callback failed; continuing", self._conf["group.id"])
                continue
            err = msg.error() if msg is not None else None
            if err is not None and is_fatal(err):  # noida delivers it as an event, not an exception
                self._end(err.str())
                return

    def _end(self, why: str) -> None:
        # E.g. a static member replaced by a newer one with its instance id: this member is done.
        # What it was assigned is not its own any more.
        log.error("group %s: membership ended: %s", self._conf["group.id"], why)
        revoked, self.assigned = self.assigned, []
        if revoked:
            self._on_revoke(revoked)

    def stop(self) -> None:
        """Leave the group (others take over our partitions at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("leaving group: %s", exc)
            self._consumer = None


def is_fatal(err: KafkaError) -> bool:
    """A fatal client error: the instance is unusable (e.g. a static member fenced). A consumer
    delivers it as an error event whose code is ``_FATAL`` but whose own fatal flag is not set."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def _member(consumer: Consumer) -> str:
    try:
        return str(consumer.memberid())
    except (KafkaException, RuntimeError):
        return "?"


class GroupReader:
    """A consumer-group member that reads its assigned partitions from offsets the owner chooses.

    ``on_assign`` gets the newly assigned (topic, partition) pairs and returns the offset to start each
    at; ``on_revoke`` hears which ones left. Both run inside ``poll_batch`` on the caller's thread.
    Offsets are never committed: the owner keeps its own position (e.g. in a snapshot).
    """

    def __init__(
        self,
        config: KafkaConfig,
        group_id: str,
        on_assign: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]],
        on_revoke: Callable[[list[tuple[str, int]]], None],
        *,
        session_timeout_ms: int = 6000,
        instance_id: str | None = None,
        metadata_refresh_ms: int | None = None,
        on_lost: Callable[[list[tuple[str, int]]], None] | None = None,
    ) -> None:
        """``metadata_refresh_ms``: how soon partitions added to a subscribed topic join the group's
        assignment (librdkafka looks every 5 minutes by default). ``on_lost``: the partitions this
        member held when its membership ended for good (a fatal error, e.g. a static member fenced
        by a newer one with its instance id): they may be another member's already, so unlike a
        revocation nothing should be written for them (default: ``on_revoke``). ``fatal`` then says
        why, and ``poll_batch`` returns nothing any more."""
        extra: dict[str, Any] = {
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
            "receive.message.max.bytes": MAX_RESPONSE_BYTES,  # see PartitionReader
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        }
        if metadata_refresh_ms is not None:
            extra["topic.metadata.refresh.interval.ms"] = metadata_refresh_ms
        conf = _group_conf(config, group_id, session_timeout_ms, instance_id, **extra)
        self._consumer = make_client(Consumer, conf, "Kafka consumer")
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._on_lost = on_lost or on_revoke
        self.fatal: str | None = None
        self._topics: list[str] = []
        # What the callbacks assigned (they are its only source): ``caught_up`` runs after every poll,
        # and asking the client costs a TopicPartition object per assigned partition each time.
        self._assigned_pairs: list[tuple[str, int]] = []
        self._starts: dict[tuple[str, int], int] = {}  # where each assigned partition was started
        # Where each partition reads next, after what was delivered and the ends reported (not the
        # client's position: librdkafka before 2.16, #4844, puts it one past the end once consume()
        # returns the end event, and resume_all's seek there skipped the next record written). A
        # partition not in it has delivered nothing since it was assigned or sought to its start.
        self._next: dict[tuple[str, int], int] = {}
        self.eof: dict[tuple[str, int], int] = {}

    def subscribe(self, topics: list[str]) -> None:
        topics = sorted(set(topics))
        if topics != self._topics and topics:
            self._topics = topics
            self._consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        pairs = [(tp.topic, tp.partition) for tp in partitions]
        starts = self._on_assign(pairs)
        self._assigned_pairs = pairs
        self._starts = {pair: starts.get(pair, 0) for pair in pairs}
        self._next = {}
        consumer.assign(
            [
                TopicPartition(tp.topic, tp.partition, starts.get((tp.topic, tp.partition), 0))
                for tp in partitions
            ]
        )

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        pairs = [(tp.topic, tp.partition) for tp in partitions]
        for pair in pairs:
            self.eof.pop(pair, None)
        self._on_revoke(pairs)
        self._assigned_pairs = []
        self._starts = {}
        self._next = {}
        consumer.unassign()

    def poll_batch(self, max_records: int = 5000, timeout: float = 0.1) -> list[Any]:
        """Raw messages (confluent ``Message``) without errors; end-of-partition offsets go to ``eof``."""
        if not self._topics or self.fatal is not None:
            time.sleep(timeout)  # nothing subscribed (yet, or any more): wait like a poll would
            return []
        out: list[Any] = []
        try:
            msgs = poll_ready(self._consumer, max_records, timeout)
        except KafkaException as exc:
            err = kafka_error_of(exc)
            if err is not None and is_fatal(err):
                self._end(err.str())
                return []
            raise
        after = self._next  # after the poll: an assignment made in it replaces it
        for msg in msgs:
            err = msg.error()
            if err is None:
                out.append(msg)
                pair = (msg.topic() or "", msg.partition() or 0)
                self.eof.pop(pair, None)
                after[pair] = (msg.offset() or 0) + 1
            elif err.code() == KafkaError._PARTITION_EOF:
                pair = (msg.topic() or "", msg.partition() or 0)
                end = msg.offset() or 0
                self.eof[pair] = end
                after[pair] = max(after.get(pair, end), end)
            elif is_fatal(err):
                self._end(err.str())
                return []
            else:
                log.debug("group reader: %s", err.str())
        return out

    def _end(self, why: str) -> None:
        """The membership ended for good: what it held is lost (see ``on_lost``)."""
        log.error("group reader: membership ended (%s); giving its partitions up", why)
        self.fatal = why
        lost, self._assigned_pairs = self._assigned_pairs, []
        self.eof.clear()
        if lost:
            self._on_lost(lost)

    def caught_up(self) -> bool:
        """Every assigned partition has reached its end."""
        assigned, eof = self._assigned_pairs, self.eof
        return bool(assigned) and all(tp in eof for tp in assigned)

    def _assignment(self) -> list[TopicPartition]:
        try:
            return list(self._consumer.assignment())
        except (KafkaException, RuntimeError):
            return []

    def seek_to_start(self, topic: str, partition: int) -> None:
        """Read an assigned partition again from its log start."""
        try:
            self._consumer.seek(TopicPartition(topic, partition, OFFSET_BEGINNING))
        except KafkaException as exc:
            raise StoreError(f"seek of {topic}[{partition}] to its start: {exc}", retriable=True) from None
        self.eof.pop((topic, partition), None)
        self._next.pop((topic, partition), None)
        if (topic, partition) in self._starts:  # where resume_all seeks it back to until it delivers
            self._starts[(topic, partition)] = OFFSET_BEGINNING

    def pause_all(self) -> None:
        """Stop fetching while idle (brokers that answer empty fetches at once make idle readers spin)."""
        assignment = self._assignment()
        if assignment:
            self._consumer.pause(assignment)

    def resume_all(self) -> None:
        """Fetch again, and have each partition report its end anew: librdkafka reports an end once
        per arrival there, so without this ``caught_up`` would hold on stale ends and a poll after an
        idle pause would wait out its timeout, fetching without pause from a broker that answers
        empty fetches at once. A partition read from a known position is sought back to it (the same
        position: nothing is skipped or read twice) and reports its end once the broker has answered."""
        assignment = self._assignment()
        if not assignment:
            return
        self._consumer.resume(assignment)
        for tp in assignment:
            pair = (tp.topic, tp.partition)
            at = self._next.get(pair)
            if at is None:
                # Nothing delivered since the assignment: sought back to where it was assigned. An
                # end reported for it may be stale (from before the assignment), and left in place it
                # kept counting as caught up: each pause then dropped the first fetch, which on a
                # loaded machine never came back within one poll, and the partition was never read
                # again.
                at = self._starts.get(pair)
                if at is None:
                    continue
            tp = TopicPartition(tp.topic, tp.partition, at)
            try:
                self._consumer.seek(tp)
            except KafkaException as exc:
                log.debug("group reader: re-arming the end of %s[%d] failed: %s", tp.topic, tp.partition, exc)
                continue
            self.eof.pop((tp.topic, tp.partition), None)

    def close(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing group reader: %s", exc)


# Commit refusals that mean this member no longer holds its assignment (fenced by a newer static
# member, evicted after its session timed out, or a generation behind).
_NOT_A_MEMBER = frozenset(
    {
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError._ASSIGNMENT_LOST,
    }
)


class SubscriptionGroup:
    """A subscription's consumer group: assignment (records are read elsewhere), committed offsets with
    metadata (the cursor), and the member list (for exclusivity checks). Callbacks run on its thread."""

    def __init__(
        self,
        config: KafkaConfig,
        group_id: str,
        topics: list[str],
        on_assign: Callable[[list[tuple[str, int]]], None],
        on_revoke: Callable[[list[tuple[str, int]]], None],
        *,
        client_id: str,
        instance_id: str | None = None,
        session_timeout_ms: int = 6000,
        on_lost: Callable[[list[tuple[str, int]]], None] | None = None,
        on_tick: Callable[[], None] | None = None,
        metadata_refresh_ms: int | None = None,
    ) -> None:
        """``on_tick``: called on the group's thread about every 50 ms (between polls), e.g. to retry
        work of an assignment callback that failed. ``metadata_refresh_ms``: how soon partitions added
        to a subscribed topic are assigned (librdkafka looks every 5 minutes by default)."""
        extra: dict[str, Any] = {
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
        }
        if metadata_refresh_ms is not None:
            extra["topic.metadata.refresh.interval.ms"] = metadata_refresh_ms
        # Static membership: a restarted member with the same id takes its predecessor's place at
        # once instead of waiting out the session timeout.
        conf = _group_conf(config, group_id, session_timeout_ms, instance_id, **extra)
        self._config = config
        self.group_id = group_id
        self._topics = topics
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        # Lost, not revoked: the group went on without this member (evicted, fenced), so the
        # partitions may already be another member's. Default: handled like a revocation.
        self._on_lost = on_lost or on_revoke
        self._on_tick = on_tick
        self._consumer = make_client(Consumer, conf, "Kafka consumer")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._timeout = config.request_timeout_ms / 1000
        self._commits: queue.SimpleQueue[tuple[list[TopicPartition], Future[None]]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._new_topics: list[str] | None = None  # set_topics' request, taken by the group's thread

    def start(self) -> None:
        self._subscribe(self._topics)
        self._thread = threading.Thread(target=self._run, name=f"sub-{self.group_id}", daemon=True)
        self._thread.start()

    def _subscribe(self, topics: list[str]) -> None:
        self._consumer.subscribe(
            topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )

    def set_topics(self, topics: list[str]) -> None:
        """Subscribe to ``topics`` from now on (a pattern subscription found new topics, or lost
        deleted ones). Done on the group's thread; the group then rebalances, as after a Kafka regex
        subscription's change: revocation and assignment callbacks run as usual."""
        if not topics:
            raise StoreError(f"{self.group_id}: a subscription needs at least one topic", retriable=False)
        self._new_topics = list(topics)
        self._wake.set()

    def _apply_new_topics(self) -> None:
        topics, self._new_topics = self._new_topics, None
        if topics is None or topics == self._topics:
            return
        try:
            self._subscribe(topics)
        except (KafkaException, RuntimeError) as exc:
            if self._new_topics is None:  # retried on the next round, unless a newer list came
                self._new_topics = topics
            log.warning("subscription %s: subscribing to %s failed: %s", self.group_id, topics, exc)
            return
        log.info("subscription %s: topics now %s", self.group_id, topics)
        self._topics = topics

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        pairs = [(tp.topic, tp.partition) for tp in partitions]
        log.info("subscription %s: member %s assigned %s", self.group_id, _member(consumer), pairs)
        consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self._on_assign(pairs)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        pairs = [(tp.topic, tp.partition) for tp in partitions]
        log.info("subscription %s: member %s revoked %s", self.group_id, _member(consumer), pairs)
        self._on_revoke(pairs)
        consumer.unassign()

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        pairs = [(tp.topic, tp.partition) for tp in partitions]
        log.warning("subscription %s: member %s lost %s", self.group_id, _member(consumer), pairs)
        self._on_lost(pairs)
        consumer.unassign()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._new_topics is not None:
                self._apply_new_topics()
            try:
                self._consumer.poll(0)
            except (KafkaException, RuntimeError) as exc:
                log.warning("subscription %s poll: %s", self.group_id, exc)
            except Exception:  # a rebalance callback's own error, re-raised by poll(): live on
                log.exception("subscription %s: a rebalance callback failed; continuing", self.group_id)
            self._wake.clear()  # before taking the queue: a commit handed over after it wakes the wait
            try:
                self._run_commits()
                if self._on_tick is not None:
                    self._on_tick()
            except Exception:  # this thread serves rebalances and commits: it must live on
                log.exception("subscription %s: group thread step failed; continuing", self.group_id)
            # Not poll(0.05): a commit handed over must not wait for the poll to time out (a
            # transaction's commit waits for one). Rebalance callbacks are served as often as before.
            self._wake.wait(0.05)
        self._run_commits()

    def _run_commits(self) -> None:
        """The commits handed over so far, as one request: they are cursors in the order handed over,
        so a later one of a partition supersedes an earlier one."""
        items: list[tuple[list[TopicPartition], Future[None]]] = []
        while True:
            try:
                items.append(self._commits.get_nowait())
            except queue.Empty:
                break
        if not items:
            return
        # A commit queued before a revocation must not land after it (it could move the offset back).
        try:
            held = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
        except (KafkaException, RuntimeError) as exc:  # taken from the queue: answer them, not drop
            error = StoreError(f"{self.group_id}: cannot read the assignment: {exc}", retriable=True)
            for _tps, done in items:
                done.set_exception(error)
            return
        latest: dict[tuple[str, int], TopicPartition] = {}
        waiting: list[tuple[set[tuple[str, int]], Future[None]]] = []
        for tps, done in items:
            keys = {(tp.topic, tp.partition) for tp in tps}
            if not keys <= held:
                # All or nothing: a caller proving it still owns what it commits (a transaction's
                # ownership check) must not hear "committed" for a partition that was left out.
                done.set_exception(
                    StoreError(
                        f"{self.group_id}: partitions no longer assigned: {sorted(keys - held)}",
                        retriable=False,
                    )
                )
                continue
            latest.update({(tp.topic, tp.partition): tp for tp in tps if (tp.topic, tp.partition) in keys})
            waiting.append((keys, done))
        if not waiting:
            return
        try:
            failed = self._commit_now(list(latest.values()))
        except StoreError as exc:
            for _keys, done in waiting:
                done.set_exception(exc)
            return
        for keys, done in waiting:
            errors = [failed[k] for k in keys if k in failed]
            if errors:
                done.set_exception(errors[0])
            else:
                done.set_result(None)

    def _commit_now(self, tps: list[TopicPartition]) -> dict[tuple[str, int], StoreError]:
        """A synchronous commit; the partitions the broker refused -> why (a request-level refusal,
        e.g. a fenced or unknown member, raises)."""
        try:
            result = self._consumer.commit(offsets=tps, asynchronous=False)
        except RuntimeError:  # confluent-kafka's "Consumer closed": stop() ran
            raise StoreError(
                f"commit of {self.group_id}: the group member is stopped", retriable=False
            ) from None
        except KafkaException as exc:
            error = kafka_error_of(exc)
            lost = error is not None and error.code() in _NOT_A_MEMBER
            # Not retriable when this member has been replaced: the partitions are someone else's.
            raise StoreError(f"commit of {self.group_id} failed: {exc}", retriable=not lost) from None
        return {
            (tp.topic, tp.partition): StoreError(
                f"commit of {self.group_id} failed: {tp.error}",
                retriable=tp.error.code() not in _NOT_A_MEMBER,
            )
            for tp in result or ()
            if tp.error is not None
        }

    def commit(self, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Synchronously commit (offset, metadata) per partition; raises StoreError on failure.

        Commits run on the group's own thread: a blocking commit from another thread while that
        thread polls never completes with librdkafka here.
        """
        done = self.commit_async(offsets)
        try:
            done.result(self._timeout)
        except TimeoutError:
            raise StoreError(f"commit of {self.group_id} timed out", retriable=True) from None

    def commit_async(self, offsets: dict[tuple[str, int], tuple[int, str]]) -> Future[None]:
        """Hand a commit to the group's thread; the future fails with StoreError if the broker refuses
        it, e.g. because this member was fenced or evicted and another now owns the partitions.
        Commits are made in the order they are handed over."""
        done: Future[None] = Future()
        if not offsets:
            done.set_result(None)
            return done
        tps = [TopicPartition(t, p, o, metadata=m) for (t, p), (o, m) in offsets.items()]
        if threading.current_thread() is self._thread or self._thread is None or not self._thread.is_alive():
            try:
                failed = self._commit_now(tps)
            except StoreError as exc:
                done.set_exception(exc)
                return done
            if failed:
                done.set_exception(next(iter(failed.values())))
            else:
                done.set_result(None)
            return done
        self._commits.put((tps, done))
        self._wake.set()
        if self._stop.is_set() and not self._thread.is_alive():
            self._fail_unrun()  # stopped meanwhile: its last pass may have run before the put
        return done

    def _fail_unrun(self) -> None:
        """Fail the commits the stopped thread will never run (their callers would wait for good)."""
        while True:
            try:
                _tps, done = self._commits.get_nowait()
            except queue.Empty:
                return
            if not done.done():
                done.set_exception(StoreError(f"commit to {self.group_id} not made: the group was left"))

    def committed(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Committed (offset, metadata) per partition; partitions with nothing committed are left out."""
        try:
            got = self._consumer.committed(
                [TopicPartition(t, p) for t, p in partitions], timeout=self._timeout
            )
        except RuntimeError:  # confluent-kafka's "Consumer closed": stop() ran
            raise StoreError(
                f"reading committed offsets of {self.group_id}: the group member is stopped", retriable=False
            ) from None
        except KafkaException as exc:
            raise StoreError(f"reading committed offsets of {self.group_id}: {exc}", retriable=True) from None
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in got if tp.offset >= 0}

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
            if not self._thread.is_alive():
                self._fail_unrun()
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("leaving %s: %s", self.group_id, exc)
