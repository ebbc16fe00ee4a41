"""Kafka consumer-group membership used only for partition *assignment* (never for records).

The coordinator uses it to share TC ids (log partitions) among instances: Kafka's group protocol
decides who owns what, rebalances when instances come and go, and evicts silent members.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafka_store.config import KafkaConfig

log = logging.getLogger(__name__)


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
    ) -> None:
        conf: dict[str, Any] = config.client_conf()
        conf.update(
            {
                "group.id": group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "latest",
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": max(100, session_timeout_ms // 6),
                "partition.assignment.strategy": "range",
            }
        )
        self._conf = conf
        self._topic = topic
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self.assigned: list[int] = []

    def start(self) -> None:
        self._consumer = Consumer(self._conf)
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
                consumer.poll(0.1)
            except KafkaException as exc:
                log.warning("group membership poll error: %s", exc)

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
    ) -> None:
        conf: dict[str, Any] = config.client_conf()
        conf.update(
            {
                "group.id": group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": max(100, session_timeout_ms // 6),
                "fetch.wait.max.ms": 50,
            }
        )
        self._consumer = Consumer(conf)
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._topics: list[str] = []
        self.eof: dict[tuple[str, int], int] = {}

    def subscribe(self, topics: list[str]) -> None:
        topics = sorted(set(topics))
        if topics != self._topics and topics:
            self._topics = topics
            self._consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        starts = self._on_assign([(tp.topic, tp.partition) for tp in partitions])
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
        consumer.unassign()

    def poll_batch(self, max_records: int = 5000, timeout: float = 0.1) -> list[Any]:
        """Raw messages (confluent ``Message``) without errors; end-of-partition offsets go to ``eof``."""
        if not self._topics:
            time.sleep(timeout)  # nothing subscribed yet: wait like a poll would
            return []
        out: list[Any] = []
        first = self._consumer.poll(timeout)
        if first is None:
            return out
        msgs = [first, *self._consumer.consume(max_records - 1, 0)] if max_records > 1 else [first]
        for msg in msgs:
            err = msg.error()
            if err is None:
                out.append(msg)
                self.eof.pop((msg.topic() or "", msg.partition() or 0), None)
            elif err.code() == KafkaError._PARTITION_EOF:
                self.eof[(msg.topic() or "", msg.partition() or 0)] = msg.offset() or 0
            else:
                log.debug("group reader: %s", err.str())
        return out

    def caught_up(self) -> bool:
        """Every assigned partition has reached its end."""
        assignment = self._assignment()
        return bool(assignment) and all((tp.topic, tp.partition) in self.eof for tp in assignment)

    def _assignment(self) -> list[TopicPartition]:
        try:
            return list(self._consumer.assignment())
        except (KafkaException, RuntimeError):
            return []

    def pause_all(self) -> None:
        """Stop fetching while idle (brokers that answer empty fetches at once make idle readers spin)."""
        assignment = self._assignment()
        if assignment:
            self._consumer.pause(assignment)

    def resume_all(self) -> None:
        assignment = self._assignment()
        if assignment:
            self._consumer.resume(assignment)

    def close(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing group reader: %s", exc)
