"""The pipeline loop: one transaction per batch, a fresh session (re-subscribe + fencing) after any
failure so that redelivered input is processed before anything that came after it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pulsar_txn.errors import ConfigError, PulsarTxnError
from pulsar_txn.message import Message, MessageId
from pulsar_txn.naming import TopicName
from pulsar_txn.pipeline.fencing import abort_leftovers, leftover_transactions
from pulsar_txn.transaction import TransactionState

if TYPE_CHECKING:
    from pulsar_txn.client import Client
    from pulsar_txn.consumer import Consumer
    from pulsar_txn.producer import Producer

log = logging.getLogger(__name__)

Transform = Callable[[Message[bytes]], bytes | str]
SOURCE_PROPERTY = "pipeline.source"  # the input MessageId an output message was made from


def upper(msg: Message[bytes]) -> bytes:
    """The default transform (the demo's): upper-case the payload."""
    return msg.data.upper()


@dataclass(frozen=True)
class PipelineSettings:
    input_topic: str
    output_topic: str
    subscription: str = "pulsar-txn-pipeline"
    instance_id: str = "pipeline-0"  # a restarted pipeline must reuse it (it fences its predecessor)
    batch_size: int = 100  # input messages per transaction
    batch_timeout_ms: int = 50  # a partial batch is committed after this long
    transaction_timeout_s: float = 30.0
    idle_exit_s: float | None = None  # return after this long without input (None: until stopped)
    retry_backoff_s: float = 0.5

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.batch_timeout_ms < 1 or self.transaction_timeout_s <= 0:
            raise ConfigError("batch_size, batch_timeout_ms and transaction_timeout_s must be positive")
        if TopicName.parse(self.input_topic) == TopicName.parse(self.output_topic):
            raise ConfigError("the pipeline's input and output topics must differ")


@dataclass
class PipelineProgress:
    processed: int = 0  # input messages whose transaction committed
    transactions: int = 0  # committed
    failed_batches: int = 0  # transactions aborted (or lost) because something failed
    sessions: int = 0  # subscribe + fence cycles (1 + restarts after failures)
    fenced: int = 0  # transactions of a previous run aborted at start-up
    started: float = field(default_factory=time.monotonic)

    @property
    def rate(self) -> float:
        return self.processed / max(1e-9, time.monotonic() - self.started)


class ExactlyOncePipeline:
    """Consume ``input_topic``, transform, produce to ``output_topic`` (same partition number as the
    input, so per-partition order carries over) and acknowledge the input, one transaction per batch."""

    def __init__(
        self,
        client: Client,
        settings: PipelineSettings,
        transform: Transform = upper,
        on_progress: Callable[[PipelineProgress], None] | None = None,
    ) -> None:
        self._client = client
        self.settings = settings
        self._transform = transform
        self._on_progress = on_progress
        self._output = TopicName.parse(settings.output_topic)
        self._producers: dict[int, Producer[bytes | str]] = {}
        self.progress = PipelineProgress()

    # ------------------------------------------------------------------ running
    def run(self, stop: threading.Event | None = None) -> PipelineProgress:
        """Process until ``stop`` is set or the input stays idle for ``idle_exit_s``. Failures (a dead
        coordinator, a lost partition, a timeout) end the session: its transaction is aborted, and a
        new session resumes from the committed cursor after a back-off."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                if self._session(stop):
                    break
            except PulsarTxnError as exc:
                self.progress.failed_batches += 1
                log.warning("pipeline session failed (%s: %s); restarting", type(exc).__name__, exc)
                stop.wait(self.settings.retry_backoff_s)
        return self.progress

    def _session(self, stop: threading.Event) -> bool:
        s = self.settings
        self.progress.sessions += 1
        consumer = self._client.subscribe(
            s.input_topic,
            s.subscription,
            initial_position="Earliest",
            instance_id=s.instance_id,
        )
        try:
            leftovers = leftover_transactions(self._client, consumer, self._output, self._producer_prefix)
            self.progress.fenced += abort_leftovers(
                self._client, consumer, leftovers, self._client.operation_timeout_seconds
            )
            idle_since = time.monotonic()
            while not stop.is_set():
                batch = consumer.batch_receive(s.batch_size, s.batch_timeout_ms)
                if not batch:
                    if s.idle_exit_s is not None and time.monotonic() - idle_since > s.idle_exit_s:
                        return True
                    continue
                self._process(consumer, batch)
                idle_since = time.monotonic()
            return True
        finally:
            consumer.close()

    # ------------------------------------------------------------------ one batch
    @property
    def _producer_prefix(self) -> str:
        return f"{self.settings.instance_id}-out-"

    def _producer(self, partition: int) -> Producer[bytes | str]:
        producer = self._producers.get(partition)
        if producer is None:
            topic = str(self._output.with_partition(partition))
            producer = self._client.create_producer(
                topic, producer_name=f"{self._producer_prefix}{partition}"
            )
            self._producers[partition] = producer
        return producer

    def _process(self, consumer: Consumer[bytes], batch: list[Message[bytes]]) -> None:
        txn = self._client.transaction(self.settings.transaction_timeout_s)
        try:
            # Everything up to the batch's last message of a partition was delivered in order in this
            # or an earlier (committed) batch of this session: one cumulative ack per partition. Acks
            # go first, so their pending-ack writes overlap with the sends.
            last: dict[tuple[str, int], MessageId] = {}
            for msg in batch:
                last[(msg.message_id.topic, msg.message_id.partition)] = msg.message_id
            for mid in last.values():
                consumer.acknowledge_cumulative(mid, txn=txn)
            for msg in batch:
                mid = msg.message_id
                self._producer(mid.partition).send_async(
                    self._transform(msg),
                    txn=txn,
                    properties={SOURCE_PROPERTY: str(mid)},
                    partition_key=msg.partition_key,
                    event_timestamp=msg.event_timestamp,
                )
            txn.commit()
        except BaseException:
            if txn.state is TransactionState.OPEN:
                try:
                    txn.abort()
                except PulsarTxnError as exc:  # the coordinator will time it out; fencing covers it
                    log.warning("abort of %s failed: %s", txn.txn_id, exc)
            raise
        progress = self.progress
        progress.processed += len(batch)
        progress.transactions += 1
        if self._on_progress is not None:
            self._on_progress(progress)

    def close(self) -> None:
        for producer in self._producers.values():
            producer.close()
        self._producers.clear()
