"""Data and readers for the ``buffer`` suite.

``SyntheticWriter`` writes a partition the way our producer and coordinator would, but with a raw,
batching confluent producer (fast): data records carry our producer's ``pulsar.meta`` header (producer
name and sequence id) and, when transactional, the 16-byte ``ptxn.txn`` header; each transaction ends with a
commit or abort marker (``encode_marker``) whose low watermark is computed as the TC computes it (the
lowest still-unfinished sequence of that TC, minus one). Several transactions are open at once, so
their messages interleave with each other and with plain records.

Readers: ``plain_read`` (a plain confluent ``Consumer``, everything from 0 to the end) and
``committed_read`` (our ``CommittedReader``); ``rss_worker`` runs either in a fresh spawned process and
reports its peak RSS.
"""

from __future__ import annotations

import random
import resource
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from multiprocessing.queues import Queue
from typing import Any, Literal

from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_store import KafkaConfig, poll_ready
from pulsar_txn._meta_header import META_HEADER, encode_meta
from pulsar_txn.buffer.marker import TXN_HEADER, TxnMarker, encode_marker
from pulsar_txn.buffer.reader import BufferOptions, CommittedReader
from pulsar_txn.txnid import TxnAction, TxnID

NUM_TCS = 4
MB = 1024 * 1024
Headers = list[tuple[str, str | bytes | None]]

# The embedded broker (noida-db 0.2.3) ignores fetch.max.bytes / max.partition.fetch.bytes: a Fetch
# returns everything from the fetch offset to the end of the partition in one response. librdkafka
# drops responses above receive.message.max.bytes (default 100 MB) and retries forever, so a reader
# starting at offset 0 of a partition holding more than ~100 MB never makes progress. Every reader in
# this suite, ours and the plain baseline alike, therefore gets the maximum allowed value.
FETCH_EXTRA: dict[str, str] = {"receive.message.max.bytes": "2147483647"}


@dataclass
class _OpenTxn:
    txn: TxnID
    raw: bytes
    remaining: int
    abort: bool


@dataclass
class Written:
    """What a writer put into its partition (counts are records)."""

    records: int = 0
    plain: int = 0
    committed_messages: int = 0
    aborted_messages: int = 0
    open_messages: int = 0  # messages of transactions still open at the end
    markers: int = 0
    committed_txns: int = 0
    aborted_txns: int = 0
    value_bytes: int = 0
    seconds: float = 0.0

    @property
    def visible(self) -> int:
        """Records a read-committed reader delivers once every transaction has ended."""
        return self.plain + self.committed_messages

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "visible": self.visible}


class SyntheticWriter:
    """Appends a realistic mix to one partition: plain records, interleaved transactions, markers."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        value_size: int,
        txn_size: int,
        txn_share: float,
        abort_every: int,
        interleave: int,
        seed: int = 7,
    ) -> None:
        self.topic = topic
        self.txn_size = txn_size
        self.txn_share = txn_share
        self.abort_every = abort_every
        self.interleave = interleave
        self.written = Written()
        self._payload = random.Random(seed).randbytes(value_size)
        self._rng = random.Random(seed + 1)
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "pulsar-txn-bench-writer",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
                "batch.num.messages": 10_000,
                "compression.type": "none",
                "queue.buffering.max.messages": 500_000,
                "queue.buffering.max.kbytes": 1_048_576,
                "allow.auto.create.topics": False,
            }
        )
        self._name = f"producer-{uuid.uuid4().hex[:8]}".encode()
        self._seq = 0
        self._next_seq = [0] * NUM_TCS
        self._unfinished: list[set[int]] = [set() for _ in range(NUM_TCS)]
        self._txns = 0
        self._open: list[_OpenTxn] = []
        self._rr = 0
        self._delivery_errors = 0

    def _produce(self, value: bytes, headers: Headers) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, partition=0, headers=headers)
                break
            except BufferError:
                self._producer.poll(0.01)
        self.written.records += 1
        self.written.value_bytes += len(value)

    def _data(self, txn_raw: bytes | None) -> None:
        headers: Headers = [(META_HEADER, encode_meta(self._seq, self._name))]
        self._seq += 1
        if txn_raw is not None:
            headers.append((TXN_HEADER, txn_raw))
        self._produce(self._payload, headers)

    def _begin(self) -> _OpenTxn:
        tc = self._txns % NUM_TCS
        seq = self._next_seq[tc]
        self._next_seq[tc] += 1
        self._unfinished[tc].add(seq)
        self._txns += 1
        txn = TxnID(tc, seq)
        abort = self.abort_every > 0 and self._txns % self.abort_every == 0
        return _OpenTxn(txn, txn.to_bytes(), self.txn_size, abort)

    def _end(self, open_txn: _OpenTxn) -> None:
        txn = open_txn.txn
        unfinished = self._unfinished[txn.most_bits]
        lwm = min(unfinished) - 1  # as the TC does: the txn being ended still counts as unfinished
        unfinished.discard(txn.least_bits)
        action = TxnAction.ABORT if open_txn.abort else TxnAction.COMMIT
        value, marker_headers = encode_marker(TxnMarker(txn, action, lwm, int(time.time() * 1000)))
        self._produce(value, [*marker_headers])
        w = self.written
        w.markers += 1
        done = self.txn_size - open_txn.remaining
        w.open_messages -= done
        if open_txn.abort:
            w.aborted_txns += 1
            w.aborted_messages += done
        else:
            w.committed_txns += 1
            w.committed_messages += done

    def write(self, records: int) -> None:
        """Append about ``records`` records (data and markers); transactions may stay open."""
        t0 = time.perf_counter()
        target = self.written.records + records
        rng, share = self._rng, self.txn_share
        while self.written.records < target:
            if rng.random() >= share:
                self._data(None)
                self.written.plain += 1
                continue
            while len(self._open) < self.interleave:
                self._open.append(self._begin())
            self._rr = (self._rr + 1) % len(self._open)
            open_txn = self._open[self._rr]
            self._data(open_txn.raw)
            self.written.open_messages += 1
            open_txn.remaining -= 1
            if open_txn.remaining == 0:
                self._open.pop(self._rr)
                self._end(open_txn)
        self.written.seconds += time.perf_counter() - t0

    def end_all(self) -> None:
        """Write the markers of every transaction still open."""
        t0 = time.perf_counter()
        while self._open:
            self._end(self._open.pop())
        self.written.seconds += time.perf_counter() - t0

    @property
    def open_txns(self) -> int:
        return len(self._open)

    def flush(self, timeout: float = 120.0) -> None:
        t0 = time.perf_counter()
        left = self._producer.flush(timeout)
        self.written.seconds += time.perf_counter() - t0
        if left:
            raise RuntimeError(f"{left} records of {self.topic} were not delivered in {timeout}s")


@dataclass
class ReadResult:
    kind: str
    delivered: int = 0  # records handed to the application
    value_bytes: int = 0
    offsets: int = 0  # partition offsets covered (0 .. end)
    seconds: float = 0.0
    complete: bool = False
    rss_start_mb: float = 0.0  # rss_worker only
    peak_rss_mb: float = 0.0  # rss_worker only (VmHWM: the whole process lifetime)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def offsets_per_s(self) -> float:
        return self.offsets / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "offsets_per_s": self.offsets_per_s}


def plain_read(bootstrap: str, topic: str, end: int, timeout: float = 120.0) -> ReadResult:
    """A plain confluent Consumer (default settings + FETCH_EXTRA) from offset 0 to ``end``: counts
    every record and its value bytes (aborted records and markers included: it cannot tell them)."""
    result = ReadResult("plain")
    t0 = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "pulsar-txn-bench-plain",
            "group.id": f"bench-plain-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            **FETCH_EXTRA,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        last = -1
        deadline = t0 + timeout
        while last < end - 1 and time.perf_counter() < deadline:
            for msg in poll_ready(consumer, 5000, 0.5):
                if msg.error() is not None:
                    continue
                value = msg.value()
                result.delivered += 1
                result.value_bytes += len(value) if value is not None else 0
                last = msg.offset() or 0
        result.complete = last >= end - 1
        result.offsets = last + 1
    finally:
        result.seconds = time.perf_counter() - t0
        consumer.close()
    return result


def committed_read(kafka: KafkaConfig, topic: str, end: int, timeout: float = 120.0) -> ReadResult:
    """Our ``CommittedReader`` from offset 0 until its position reaches ``end``."""
    result = ReadResult("ours")
    t0 = time.perf_counter()
    reader = CommittedReader(kafka, {(topic, 0): 0}, options=BufferOptions(num_tcs=NUM_TCS))
    try:
        deadline = t0 + timeout
        while reader.position(topic, 0) < end and time.perf_counter() < deadline:
            for rec in reader.poll(0.5, 5000):
                result.delivered += 1
                value = rec.value
                result.value_bytes += len(value) if value is not None else 0
        result.offsets = min(reader.position(topic, 0), end)
        result.complete = result.offsets >= end
        result.extra = {"state": reader.state(topic, 0).stats()}
    finally:
        result.seconds = time.perf_counter() - t0
        reader.close()
    return result


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / MB


def _hwm_mb() -> float:
    """Peak RSS of this process image (VmHWM). Not ``ru_maxrss``: a spawned child's ru_maxrss also
    counts the forking parent's RSS from before the exec, so it reports the parent's size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class RssSampler:
    """RSS of this process every ``interval`` s in a thread: peak, when, and a coarse timeline."""

    def __init__(self, interval: float = 0.05) -> None:
        self.samples: list[tuple[float, float]] = []
        self._interval = interval
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self._t0, _rss_mb()))
            self._stop.wait(self._interval)

    def __enter__(self) -> RssSampler:
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(1)

    def summary(self, points: int = 20) -> dict[str, Any]:
        if not self.samples:
            return {}
        peak_t, peak = max(self.samples, key=lambda s: s[1])
        step = max(1, len(self.samples) // points)
        return {
            "sampled_peak_mb": peak,
            "sampled_peak_at_s": peak_t,
            "timeline_mb": [(round(t, 2), round(r)) for t, r in self.samples[::step]],
        }


def rss_worker(
    kind: Literal["plain", "ours"], bootstrap: str, topic: str, end: int, out: Queue[dict[str, Any]]
) -> None:
    """In a fresh (spawned) process: read the partition once and report the peak RSS."""
    try:
        start = _rss_mb()
        with RssSampler() as sampler:
            if kind == "plain":
                result = plain_read(bootstrap, topic, end)
            else:
                kafka = KafkaConfig(bootstrap_servers=bootstrap, extra=FETCH_EXTRA)
                result = committed_read(kafka, topic, end)
        result.rss_start_mb = start
        result.peak_rss_mb = _hwm_mb()
        result.extra["rss"] = sampler.summary()
        out.put(result.as_dict())
    except BaseException as exc:  # report anything to the parent rather than dying silently
        out.put({"kind": kind, "error": repr(exc)})
