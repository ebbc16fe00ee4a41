"""Appends records to chosen partitions and reports the offsets Kafka gave them."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from kafka_store._clients import kafka_error_of, make_client
from kafka_store._threads import in_callback_thread, mark_callback_thread
from kafka_store.config import MAX_TIMEOUT_MS, KafkaConfig
from kafka_store.errors import (
    BrokerUnavailableError,
    ProduceError,
    RecordTooLargeError,
    StoreError,
    TopicNotFoundError,
)

log = logging.getLogger(__name__)
_APPEND_SEQ = itertools.count()  # next() is atomic under the GIL

Headers = Sequence[tuple[str, bytes]] | Mapping[str, bytes]
"""(name, value) pairs, or a dict when names are unique: a dict of str -> bytes is never tracked by the
garbage collector, a list of tuples is (``Delivery``)."""
DeliveryCallback = Callable[[int | None, StoreError | None], None]

_UNAVAILABLE = {
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
}
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}
_NO_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}


def translate_kafka_error(err: KafkaError, what: str) -> StoreError:
    code = err.code()
    if code in _TOO_LARGE:
        return RecordTooLargeError(f"{what}: {err.str()}")
    if code in _UNAVAILABLE:
        return BrokerUnavailableError(f"{what}: {err.str()}")
    if code in _NO_TOPIC:
        return TopicNotFoundError(f"{what}: {err.str()}")
    return ProduceError(f"{what}: {err.str()}", retriable=bool(err.retriable()))


class Appender:
    """An idempotent (acks=all) producer with a background delivery thread.

    ``append`` is thread-safe and never blocks on the network; the callback or future fires with
    the record's offset once Kafka has stored it. librdkafka packs concurrent appends into one
    ProduceRequest per partition (``linger_ms`` / ``batch_max_records``): that is our batching.
    """

    def __init__(
        self,
        config: KafkaConfig,
        *,
        linger_ms: float = 0.0,
        batch_max_records: int = 10_000,
        delivery_timeout_ms: int = 30_000,
        max_record_bytes: int = 1_000_000,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self._conf: dict[str, Any] = config.client_conf()
        self._conf.update(
            {
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": linger_ms,
                "batch.num.messages": batch_max_records,
                # Capped: a client whose operation timeout is longer (allowed, ~31 years at most)
                # must still be able to write.
                "message.timeout.ms": min(delivery_timeout_ms, MAX_TIMEOUT_MS),
                "message.max.bytes": max(max_record_bytes + 4096, 1_000_000),
                "compression.type": "none",
                # Topics are created explicitly with their configs, never as a side effect of a write.
                "allow.auto.create.topics": False,
            }
        )
        self._conf.update(extra or {})
        self._max_record_bytes = max_record_bytes
        self._timeout_s = float(self._conf["message.timeout.ms"]) / 1000  # a record's retry deadline
        self._producer: Producer | None = None
        self._threads: list[threading.Thread] = []
        # Records refused for an unknown partition, per partition, in order; see _hold.
        self._held: dict[tuple[str, int], deque[Delivery]] = {}
        self._stale: set[tuple[str, int]] = set()  # held partitions unknown to the producer's metadata
        self._held_lock = threading.Lock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # Producers that had a fatal error, held (not their id()s, which a new producer could reuse).
        self._retired: list[Producer] = []
        # Per partition, the last record queued on a producer: until it is reported, a partition
        # whose last record went through a producer since set aside has records in flight there.
        self._last_sent: dict[tuple[str, int], Delivery] = {}

    def _ensure_started(self) -> Producer:
        """The current producer, made if there is none; ``_Closed`` once ``close`` has begun: a
        producer made then would be left running with nobody to report its records."""
        producer = self._producer
        if producer is not None:
            return producer
        with self._lock:
            if self._producer is None:
                if self._stop.is_set():
                    raise _Closed
                made: list[Producer] = []
                conf = dict(self._conf, error_cb=lambda err: self._on_error(err, made))
                made.append(make_client(Producer, conf, "Kafka producer"))
                self._producer = made[0]
                thread = threading.Thread(
                    target=self._poll_loop, args=(made[0],), name="appender-poll", daemon=True
                )
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
                thread.start()
            return self._producer

    def _use_current_producer(self, d: Delivery) -> bool:
        """``d.producer`` = the current producer (made if needed); False, with ``d`` settled as
        closed, once ``close`` has begun."""
        try:
            d.producer = self._ensure_started()
        except _Closed:
            _settle_closed(d)
            return False
        return True

    def _on_error(self, err: KafkaError, made: list[Producer]) -> None:
        if err.fatal() and made:
            self._retire(made[0], err.str())
        else:
            log.debug("producer error: %s", err.str())

    def _retire(self, producer: Producer, why: str) -> None:
        """librdkafka's rule: after a fatal error a producer instance is done and the application makes
        a new one. Its records in flight fail (their callers get the error); later appends go to a new
        producer with a new producer id. Seen on a topic deleted and created again under its name:
        the old sequence numbers are out of order there (docs/broker-quirks.md)."""
        if self._set_aside(producer):
            log.error("producer fatal error: %s; later appends use a new producer", why)

    def renew(self, why: str) -> None:
        """Send later appends through a new producer (a new producer id, fresh sequence numbers);
        records in flight on the current one still complete. After a topic was deleted: the current
        producer's sequence numbers would be out of order on a topic created again under its name."""
        producer = self._producer
        if producer is not None and self._set_aside(producer):
            log.info("later appends use a new producer: %s", why)

    def _set_aside(self, producer: Producer) -> bool:
        with self._lock:
            if self._is_retired(producer):
                return False
            self._retired.append(producer)
            if self._producer is producer:
                self._producer = None
        return True

    def _poll_loop(self, producer: Producer) -> None:
        mark_callback_thread()  # delivery reports run here
        while not self._stop.is_set():
            try:
                producer.poll(0.05)
            except KafkaException as exc:  # the client raises a fatal error from poll()
                err = kafka_error_of(exc)
                if err is not None and err.fatal():
                    self._retire(producer, err.str())
                else:
                    log.debug("producer poll: %s", exc)
            except Exception:  # a report handler's bug: this thread must go on serving the others
                log.exception("a delivery report handler failed")
            if len(producer) == 0 and self._is_retired(producer):
                with self._lock:  # its last delivery reports are out: let it go
                    self._retired = [p for p in self._retired if p is not producer]
                return

    def _is_retired(self, producer: Producer) -> bool:
        return any(p is producer for p in self._retired)

    def append(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers | None = None,
        callback: DeliveryCallback | None = None,
    ) -> Future[int]:
        """Append one record; returns a future of its offset (and calls ``callback`` if given)."""
        future: Future[int] = Future()

        def done(offset: int | None, error: StoreError | None) -> None:
            # The future may have been cancelled by an impatient waiter: the record is stored anyway.
            if future.set_running_or_notify_cancel():
                if error is not None or offset is None:
                    future.set_exception(error or ProduceError("no offset"))
                else:
                    future.set_result(offset)
            if callback is not None:
                callback(offset, error)

        pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
        size = len(value or b"") + len(key or b"") + sum(len(k) + len(v or b"") for k, v in pairs)
        if size > self._max_record_bytes:
            done(
                None,
                RecordTooLargeError(
                    f"record of {size} bytes exceeds the {self._max_record_bytes}-byte limit"
                ),
            )
        else:
            self.append_cb(topic, partition, value, key=key, headers=headers, callback=done)
        return future

    @property
    def max_record_bytes(self) -> int:
        """The largest record (value, key and headers) ``append`` takes."""
        return self._max_record_bytes

    def append_cb(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers | None = None,
        callback: DeliveryCallback,
    ) -> None:
        """``append`` without a future: ``callback(offset, error)`` runs once, on the delivery thread (or
        here, at once, if the record cannot even be queued). A ``headers`` list or dict is handed to
        Kafka as is (not copied): do not change it afterwards."""
        d = _CallbackDelivery(callback)
        d.topic, d.partition, d.value, d.key, d.headers = topic, partition, value, key, headers
        self.append_delivery(d)

    def append_delivery(self, d: Delivery) -> None:
        """Append the record ``d`` describes (its ``topic``, ``partition``, ``value``, ``key`` and
        ``headers`` set); ``d.delivered(offset, error)`` runs once, as for ``append_cb``. For callers
        that keep one object per record anyway: it is also the delivery handler, one object instead of
        two for the garbage collector to scan while the record is in flight."""
        headers = d.headers
        if headers is not None and not isinstance(headers, list | dict):
            d.headers = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        elif not headers:
            d.headers = None
        if self._stop.is_set():  # closed: its delivery thread is gone, nothing would report it
            _settle_closed(d)
            return
        if d.partition < 0:  # -1 would let librdkafka's partitioner choose; below, retried for good
            d.delivered(None, ProduceError(f"append to {d.topic}[{d.partition}]: no such partition"))
            return
        d.appender = self
        d.seq = next(_APPEND_SEQ)
        if not self._use_current_producer(d):  # closed since the check above
            return
        d.deadline = time.monotonic() + self._timeout_s
        if self._held and self._hold(d, start=False):
            return  # records of its partition wait for a retry: it goes after them, never before
        if self._retired and self._behind_retired((d.topic, d.partition)):
            # A producer set aside (renew, a fatal error) still has records of this partition in
            # flight: sent now, through the new producer, it could be stored before them.
            self._hold(d)
            return
        self._produce(d)

    def _hold(self, d: Delivery, *, start: bool = True) -> bool:
        """Queue ``d`` behind the records of its partition that wait for a retry, in order (False if
        none wait and not ``start``). ``start``: if none wait, hold it for a retry after a metadata
        refresh; one thread per partition re-sends them (off the caller's thread, which may be an
        event loop's or the delivery thread)."""
        tp = (d.topic, d.partition)
        with self._held_lock:
            queue = self._held.get(tp)
            if queue is not None:
                # In append order, not arrival order: a record librdkafka queued before it knew the
                # topic is refused later (in a delivery report) than the records appended after the
                # metadata came, which are refused at once and may be held first.
                bisect.insort(queue, d, key=_append_order)
                return True
            if not start:
                return False
            self._held[tp] = deque([d])
        threading.Thread(
            target=self._resend_held, args=(tp,), name=f"appender-retry-{tp[0]}", daemon=True
        ).start()
        return True

    def _resend_held(self, tp: tuple[str, int]) -> None:
        while True:
            with self._held_lock:
                refresh = tp in self._stale and not self._stop.is_set()
            if refresh:
                time.sleep(0.05)
                with contextlib.suppress(_Closed):  # closed meanwhile: the check below settles them
                    self._refresh_metadata(self._ensure_started(), tp[0])
            with self._held_lock:
                queue = self._held[tp]
                if not queue or self._stop.is_set():
                    # Closed: nothing may start a producer again (it would be left running, and
                    # nobody would report its records): what still waits fails.
                    left = list(queue)
                    del self._held[tp]
                    self._stale.discard(tp)
                    break
                d = queue[0]  # after the refresh: an earlier record may have been held meanwhile
            self._wait_retired(tp, d.deadline)
            try:
                sent = self._produce(d, held=True)
            except Exception:  # a report handler's bug (run here when a held record fails)
                log.exception("a delivery report handler failed")
                sent = True  # settled (it raised in its handler): the next one must not wait on it
            if sent:
                with self._held_lock:
                    queue = self._held[tp]
                    if queue[0] is d:
                        queue.popleft()
                    else:  # an earlier record was held ahead of it meanwhile (see _hold)
                        queue.remove(d)
                    self._stale.discard(tp)
            # else: its partition is not in the metadata yet (now marked stale): again, refreshed
        for d in left:
            _settle_closed(d)

    def _behind_retired(self, tp: tuple[str, int]) -> bool:
        last = self._last_sent.get(tp)
        producer = last.producer if last is not None else None  # None once reported
        return producer is not None and producer is not self._producer

    def _wait_retired(self, tp: tuple[str, int], deadline: float) -> None:
        """Until the partition's records on producers set aside are reported (only its own: those
        of a deleted topic fail only at their message timeout), or ``deadline``: what they still
        hold would fail by then anyway (the same message timeout)."""
        while self._behind_retired(tp) and not self._stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.005)

    def _produce(self, d: Delivery, *, held: bool = False) -> bool:
        """Queue ``d`` on the producer, or settle it with its error. False: it waits for a retry off
        this thread (handed to ``_hold``; when ``held``, this is the thread re-sending its partition's
        held records, which keeps it at their head): after a metadata refresh when its partition is
        unknown yet, or, on an event loop's thread, for room in a full producer queue."""
        if held:
            if self._stop.is_set():  # closed meanwhile: no producer may be started again
                _settle_closed(d)
                return True
            # The current producer: the one the record was queued on may have been set aside (renew,
            # or a fatal error) while it waited, and a retired producer's delivery thread stops once
            # it has nothing in flight, so nobody would report the record.
            if not self._use_current_producer(d):
                return True
        while True:
            try:
                d.producer.produce(
                    d.topic, value=d.value, key=d.key, partition=d.partition, headers=d.headers, on_delivery=d
                )
                self._last_sent[(d.topic, d.partition)] = d
                return True
            except BufferError:
                if time.monotonic() > d.deadline:
                    d.delivered(
                        None, BrokerUnavailableError("producer queue stayed full: broker not keeping up")
                    )
                    return True
                if not held and (_on_event_loop() or in_callback_thread()):
                    # A caller's thread waits for room (back-pressure), but an event loop must not,
                    # nor a callback thread (e.g. a report handler appending more: while it slept,
                    # no report would be served and the queue would not drain): the partition's
                    # retry thread does, keeping the records in order.
                    self._hold(d)
                    return False
                time.sleep(0.005)
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() == KafkaError._FATAL and time.monotonic() < d.deadline:
                    # Never sent: this producer had a fatal error. Queue it on a new one.
                    self._retire(d.producer, err.str())
                    if not self._use_current_producer(d):
                        return True
                    continue
                if err.code() == KafkaError._UNKNOWN_PARTITION and time.monotonic() < d.deadline:
                    # A topic created (or grown) moments ago: metadata lags. Retried off this
                    # thread, which may be an event loop's, in order with its partition's others.
                    with self._held_lock:
                        self._stale.add((d.topic, d.partition))
                    if not held:
                        self._hold(d)
                    return False
                d.delivered(None, translate_kafka_error(err, f"append to {d.topic}[{d.partition}]"))
                return True
            except (OverflowError, TypeError, ValueError) as exc:
                # Refused by the client before anything was sent (e.g. a partition beyond int32):
                # settled like any other failed append, never raised into the caller's thread.
                d.delivered(None, ProduceError(f"append to {d.topic}[{d.partition}] refused: {exc}"))
                return True
            except RuntimeError:
                # "Producer has been closed": close() destroyed it between this thread taking it
                # and producing. The record meets a closed appender.
                _settle_closed(d)
                return True

    @staticmethod
    def _refresh_metadata(producer: Producer, topic: str) -> None:
        try:
            producer.list_topics(topic, timeout=2.0)  # also updates the producer's metadata cache
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: destroyed by close() meanwhile
            log.debug("metadata refresh for %s failed: %s", topic, exc)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for outstanding appends, also those on producers set aside (``renew``, fatal errors);
        returns how many are still in flight."""
        deadline = time.monotonic() + timeout
        while self._held and time.monotonic() < deadline:  # records waiting for a retry
            time.sleep(0.01)
        with self._held_lock:
            held = sum(len(q) for q in self._held.values())
        return held + sum(self._drain(p, deadline) for p in self._producers())

    def on_delivery_thread(self) -> bool:
        """Whether the calling thread serves this appender's delivery reports (a report handler,
        e.g. a send callback): it cannot wait for reports, its own among them."""
        return threading.current_thread() in self._threads

    def _drain(self, producer: Producer, deadline: float) -> int:
        """Wait until the producer has nothing in flight and its delivery reports are served, by
        its poll thread; returns how many are left. Not the client's ``flush()``: that serves
        reports on the calling thread beside the poll thread, so one partition's callbacks ran out
        of send order, and on the application's thread."""
        pause = 0.0005
        while True:
            try:
                left = len(producer)
            except RuntimeError:  # destroyed by close() meanwhile: its reports are out
                return 0
            now = time.monotonic()
            if left == 0 or now >= deadline:
                return left
            if self.on_delivery_thread():  # the reports it waits for are served by this thread
                return left
            if self._stop.is_set():  # no poll thread serves it any more
                with contextlib.suppress(KafkaException, RuntimeError):
                    return int(producer.flush(deadline - now))
                return 0
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, 0.01)

    def _producers(self) -> list[Producer]:
        """The current producer and those set aside with records still in flight."""
        with self._lock:
            return [p for p in [*self._retired, self._producer] if p is not None]

    def close(self, timeout: float = 10.0) -> None:
        remaining = self.flush(timeout)
        if remaining:
            log.warning("appender closed with %d records undelivered", remaining)
            # Every record still queued or in flight gets its report now (an error), served by
            # the delivery threads before they stop: without this their callers waited for ever,
            # and each record kept its producer (and librdkafka's threads) alive.
            for producer in self._producers():
                with contextlib.suppress(KafkaException, RuntimeError):
                    producer.purge()
                self._drain(producer, time.monotonic() + 1.0)
        self._stop.set()  # records held for a retry are failed by their retry thread (_resend_held)
        for thread in self._threads:
            if thread is not threading.current_thread():  # closed from a report handler
                thread.join(timeout)
        with self._lock:  # after stop, under the lock: no thread makes a producer again (_Closed)
            producers = [p for p in [*self._retired, self._producer] if p is not None]
            self._producer = None
            self._retired = []
        if not any(t.is_alive() for t in self._threads):
            # Destroyed now, not when the garbage collector breaks the producer <-> error_cb cycle:
            # until then it kept its broker connections and librdkafka's threads. Only once no
            # thread of ours polls it (a poll on a destroyed handle fails).
            for producer in producers:
                with contextlib.suppress(KafkaException, RuntimeError):
                    producer.close()


class _Closed(Exception):
    """``Appender._ensure_started`` after ``close`` began (internal: callers settle the record)."""


def _settle_closed(d: Delivery) -> None:
    try:
        d.delivered(None, ProduceError(f"append to {d.topic}[{d.partition}]: the appender is closed"))
    except Exception:  # a report handler's bug must not stop the others from being settled
        log.exception("a delivery report handler failed")


def _append_order(d: Delivery) -> int:
    return d.seq


def _on_event_loop() -> bool:
    """Whether this thread runs an asyncio event loop now (it must not sleep)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Delivery:
    """One record on its way: what a retry needs, and (``__call__``) its delivery report handler.
    Subclass it and implement ``delivered``; hand instances to ``Appender.append_delivery``.

    One slotted object per record rather than closures and their cells: at tens of thousands of
    records a second, every container allocated per record feeds the cyclic GC, whose passes over
    the records still in flight cost more than the produce call itself."""

    __slots__ = (
        "appender",
        "deadline",
        "headers",
        "key",
        "partition",
        "producer",
        "seq",
        "topic",
        "value",
    )

    appender: Appender
    producer: Any
    topic: str
    partition: int
    value: bytes | None
    key: bytes | None
    headers: Headers | None
    deadline: float
    seq: int  # append order (across threads): a partition's held records are retried in it

    def delivered(self, offset: int | None, error: StoreError | None) -> None:
        """Called once: the record's offset, or the error it failed with."""
        raise NotImplementedError

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if (
            err is not None
            and err.code() == KafkaError._UNKNOWN_PARTITION
            and time.monotonic() < self.deadline
        ):
            # Never sent: the producer's metadata predates the partition. Refresh off the delivery
            # thread, then queue it again.
            self.appender._hold(self)
            return
        try:
            if err is None:
                self.delivered(int(msg.offset()), None)
            else:
                self.delivered(None, translate_kafka_error(err, f"append to {self.topic}[{self.partition}]"))
        finally:
            # Reported: nothing of its partition waits behind it (Appender._behind_retired), and
            # the appender keeps nothing of it (its transaction, its callback).
            self.producer = None
            sent = self.appender._last_sent
            key = (self.topic, self.partition)
            if sent.get(key) is self:
                sent.pop(key, None)


class _CallbackDelivery(Delivery):
    __slots__ = ("callback",)

    def __init__(self, callback: DeliveryCallback) -> None:
        self.callback = callback

    def delivered(self, offset: int | None, error: StoreError | None) -> None:
        self.callback(offset, error)
