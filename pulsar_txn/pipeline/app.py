"""The pipeline loop: one transaction per batch, a fresh session (re-subscribe + fencing) after any
failure so that redelivered input is processed before anything that came after it."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pulsar_txn import _args
from pulsar_txn._future import relay
from pulsar_txn.errors import (
    AuthenticationError,
    ConfigError,
    ConsumerBusy,
    InvalidTopicName,
    MessageTooBig,
    PulsarTxnError,
    SchemaSerializationError,
    TopicNotFound,
    TransactionNotFound,
)
from pulsar_txn.message import Message
from pulsar_txn.naming import TopicName, bad_subscription_name, check_subscription
from pulsar_txn.pipeline.fencing import (
    ForeignTransaction,
    PipelineFenced,
    TakeoverWatch,
    abort_leftovers,
    leftover_transactions,
)
from pulsar_txn.transaction import TransactionState

if TYPE_CHECKING:
    from pulsar_txn.client import Client
    from pulsar_txn.consumer import Consumer
    from pulsar_txn.producer import Producer
    from pulsar_txn.transaction import Transaction
    from pulsar_txn.txnid import TxnID

log = logging.getLogger(__name__)

Transform = Callable[[Message[bytes]], bytes | str | None]
"""An output payload for an input message; None writes a record without a value (a tombstone, as
a null input is: ``msg.has_null_value``)."""
SOURCE_PROPERTY = "pipeline.source"  # the input MessageId an output message was made from
_MAX_CHAIN = 4  # batches of one input partition committing at once (bounds what a failure undoes)
_BEGUN_AHEAD = 4  # transactions begun ahead of use: the chains of several partitions draw on them
# How long another consumer may hold the (Exclusive) subscription before the run gives up: one that
# just left may stay a member for up to its session timeout.
_BUSY_GIVE_UP_S = 30.0


def _unfixable(exc: PulsarTxnError, busy_since: float | None) -> bool:
    """A session failure a new session would meet again: an output the broker refuses as too large
    (the same input makes the same output), or another instance (another instance id) holding the
    subscription for longer than a consumer that just left may."""
    if isinstance(exc, MessageTooBig) or isinstance(exc.__cause__, MessageTooBig):
        return True
    if isinstance(exc, SchemaSerializationError):  # a transform output the producer cannot take
        return True
    return busy_since is not None and time.monotonic() - busy_since > _BUSY_GIVE_UP_S


def upper(msg: Message[bytes]) -> bytes | None:
    """The default transform (the demo's): upper-case the payload (a null value stays null)."""
    return None if msg.has_null_value else msg.data.upper()


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
    # Process the next batch while the previous one commits. Commits stay in order per input
    # partition: a batch commits only after that partition's previous batch committed.
    overlap_commits: bool = True
    # How often a running instance checks that no other instance with its instance_id took its
    # subscription over (it then commits nothing more and stops with PipelineFenced); None: never.
    fence_check_interval_s: float | None = 1.0

    def __post_init__(self) -> None:
        _args.integer(self.batch_size, "batch_size", minimum=1)
        _args.integer(self.batch_timeout_ms, "batch_timeout_ms", minimum=1)
        # Finite and positive: a NaN compared false everywhere (an idle_exit_s of NaN never exited).
        _args.seconds(self.transaction_timeout_s, "transaction_timeout_s")
        _args.number(self.retry_backoff_s, "retry_backoff_s")  # 0: retry at once
        if self.idle_exit_s is not None:
            _args.number(self.idle_exit_s, "idle_exit_s (or None)")  # 0: exit once the input is idle
        if self.fence_check_interval_s is not None:
            _args.seconds(self.fence_check_interval_s, "fence_check_interval_s (or None)")
        if TopicName.parse(self.input_topic) == TopicName.parse(self.output_topic):
            raise ConfigError("the pipeline's input and output topics must differ")
        # Checked here as subscribe checks it: refused there, every session failed the same way and
        # the pipeline restarted for ever.
        # Always static membership: a restart must replace the killed run's group member at once.
        _args.group_instance_id(self.instance_id, "instance_id")
        subscription = _args.text(self.subscription, "subscription")
        if bad_subscription_name(subscription):
            raise ConfigError(f"subscription {subscription!r:.100}: empty, or holds '/' or a space")
        try:
            check_subscription(self.input_topic, subscription)
        except InvalidTopicName as exc:
            raise ConfigError(str(exc)) from None


@dataclass
class PipelineProgress:
    processed: int = 0  # input messages whose transaction committed
    transactions: int = 0  # committed
    failed_batches: int = 0  # batches whose transaction did not commit (aborted, or its end failed)
    sessions: int = 0  # subscribe + fence cycles (1 + restarts after failures)
    fenced: int = 0  # transactions of a previous run aborted at start-up
    foreign_restarts: int = 0  # sessions restarted: input held by a transaction they did not begin
    started: float = field(default_factory=time.monotonic)
    last_commit_at: float | None = None  # wall-clock time (time.time()) of the last committed batch

    @property
    def rate(self) -> float:
        return self.processed / max(1e-9, time.monotonic() - self.started)


class ExactlyOncePipeline:
    """Consume ``input_topic``, transform, produce to ``output_topic`` (same partition number as the
    input, so per-partition order carries over) and acknowledge the input, one transaction per batch
    of one input partition. Each partition's batches commit in order; partitions are independent."""

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
        self._ahead: deque[tuple[Future[Transaction], float]] = deque()  # next batches' txns, begun early
        self._watch: TakeoverWatch | None = None  # the session's: has another instance taken over?
        self._client_ids: set[str] = set()  # of this pipeline's consumers (sessions) so far
        # The session's own transactions (begun to process a batch), with when: any other one found
        # holding input is a replaced instance's (ForeignTransaction). Forgotten once surely ended.
        self._own: set[TxnID] = set()
        self._own_since: deque[tuple[float, TxnID]] = deque()
        # Batches whose commit failed without saying how it ended (e.g. no answer in time): the next
        # session asks the coordinator's log, and counts the ones that committed.
        self._unsure: list[tuple[TxnID, int]] = []
        self.progress = PipelineProgress()

    # ------------------------------------------------------------------ running
    def run(self, stop: threading.Event | None = None) -> PipelineProgress:
        """Process until ``stop`` is set or the input stays idle for ``idle_exit_s``. Failures (a dead
        coordinator, a lost partition, a timeout) end the session: its transaction is aborted, and a
        new session resumes from the committed cursor after a back-off."""
        stop = stop or threading.Event()
        busy_since: float | None = None
        try:
            while not stop.is_set():
                try:
                    if self._session(stop):
                        break
                except PipelineFenced:
                    raise  # a newer instance runs: a new session here would take its subscription back
                except (ConfigError, AuthenticationError, InvalidTopicName):
                    raise  # a new session would fail the same way (bad settings, refused credentials)
                except PulsarTxnError as exc:
                    busy_since = (busy_since or time.monotonic()) if isinstance(exc, ConsumerBusy) else None
                    if _unfixable(exc, busy_since):
                        raise
                    log.warning("pipeline session failed (%s: %s); restarting", type(exc).__name__, exc)
                    stop.wait(self.settings.retry_backoff_s)
        finally:
            # Producer names are the instance's: a successor in this process (same instance id) makes
            # them again, which an open one of the same name would refuse (ProducerBusy).
            self.close()
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
        chains: dict[int, deque[_Committing]] = {}  # per input partition: its batches being committed
        held: dict[int, list[Message[bytes]]] = {}  # per input partition: received, in no transaction yet
        watch = self._watch = TakeoverWatch(
            self._client, consumer, s.instance_id, s.fence_check_interval_s, ours=self._client_ids
        )
        self._client_ids.add(consumer._client_id)
        self._own.clear()
        self._own_since.clear()
        interrupted = False
        try:
            watch.start()
            leftovers = leftover_transactions(self._client, consumer, self._output, self._producer_prefix)
            self.progress.fenced += abort_leftovers(
                self._client, consumer, leftovers, self._client.operation_timeout_seconds
            )
            self._resolve_unsure()
            idle_since = time.monotonic()
            while not stop.is_set():
                if watch.fenced.is_set():
                    raise watch.error()
                got = consumer.batch_receive(s.batch_size, s.batch_timeout_ms)
                if got:
                    self._check_no_foreign(consumer)
                for msg in got:
                    held.setdefault(msg.message_id.partition, []).append(msg)
                # Full batches go at once; once the input is caught up (a short receive), the rest too.
                caught_up = len(got) < s.batch_size
                for partition in list(held):
                    msgs = held.pop(partition)
                    while len(msgs) >= s.batch_size or (msgs and caught_up):
                        batch, msgs = msgs[: s.batch_size], msgs[s.batch_size :]
                        self._process(consumer, partition, batch, chains)
                    if msgs:
                        held[partition] = msgs
                if got:
                    idle_since = time.monotonic()
                    continue
                self._reap(chains, wait=True)
                if s.idle_exit_s is not None and time.monotonic() - idle_since > s.idle_exit_s:
                    return True
            self._reap(chains, wait=True)
            return True
        except PulsarTxnError as exc:
            # Replaced by a newer instance (which may be what made this fail)? Then stop, not retry.
            if not isinstance(exc, PipelineFenced) and watch.check():
                raise watch.error() from exc
            raise
        except KeyboardInterrupt:
            # Stop now: commits in flight end as they will (or by their timeout); the next run's
            # fencing aborts what is left, so nothing is waited for here.
            interrupted = True
            raise
        finally:
            watch.stop()
            for chain in chains.values() if not interrupted else ():
                for committing in chain:  # failing: let them end (either way) first, and count them
                    self._settle_quietly(committing)
            self._discard_ahead()
            consumer.close()

    # ------------------------------------------------------------------ one batch
    @property
    def _producer_prefix(self) -> str:
        return f"{self.settings.instance_id}-out-"

    def _producer(self, partition: int) -> Producer[bytes | str]:
        producer = self._producers.get(partition)
        if producer is None:
            topic = str(self._output.with_partition(partition))
            try:
                producer = self._client.create_producer(
                    topic, producer_name=f"{self._producer_prefix}{partition}"
                )
            except TopicNotFound:
                raise ConfigError(
                    f"input partition {partition} goes to output partition {partition}, which "
                    f"{self._output} lacks: give the output topic as many partitions as the input"
                ) from None
            self._producers[partition] = producer
        return producer

    def _process(
        self,
        consumer: Consumer[bytes],
        partition: int,
        batch: list[Message[bytes]],
        chains: dict[int, deque[_Committing]],
    ) -> None:
        """Ack, transform and send one input partition's ``batch`` in a new transaction. With
        ``overlap_commits`` its commit is chained behind the partition's earlier batches (issued once
        they have committed; aborted if one of them failed) and this returns at once; else it commits
        here."""
        try:
            txn = self._begin()
        except BaseException:
            self.progress.failed_batches += 1  # it did not commit: no transaction to hold it
            raise
        try:
            # Individual acks, in one call (one pending-ack record): with overlapping transactions a
            # cumulative ack would conflict with the previous batch's (Pulsar lets one transaction at
            # a time hold a subscription's cumulative ack). Acks go first, without waiting for their
            # write (the commit does), so that it overlaps with the sends.
            consumer.acknowledge_async(batch, txn=txn)
            producer = self._producer(partition)
            for msg in batch:
                output = self._transform(msg)
                source = {SOURCE_PROPERTY: str(msg.message_id)}
                if output is None:  # a tombstone
                    producer._send_payload(
                        None, None, None, txn, source, msg.partition_key, msg.event_timestamp
                    )
                    continue
                producer.send_async(
                    output,
                    txn=txn,
                    properties=source,
                    partition_key=msg.partition_key,
                    event_timestamp=msg.event_timestamp,
                )
            if not self.settings.overlap_commits:
                refused = self._refused()
                if refused is not None:
                    raise refused
                try:
                    txn.commit()
                except BaseException:
                    self._unsure.append((txn.txn_id, len(batch)))
                    raise
            else:
                # The ack record and the ownership check go out now, while the previous batch of the
                # partition commits; the chained commit then only sends END_TXN.
                txn.prepare_async()
        except BaseException:
            self.progress.failed_batches += 1
            if txn.state is TransactionState.OPEN:
                try:
                    txn.abort()
                except PulsarTxnError as exc:  # the coordinator will time it out; fencing covers it
                    log.warning("abort of %s failed: %s", txn.txn_id, exc)
            raise
        if not self.settings.overlap_commits:
            self._committed(len(batch))
            return
        chain = chains.setdefault(partition, deque())
        before = chain[-1].future if chain else None
        committing = _Committing(txn, _commit_after(txn, before, self._refused), len(batch))
        committing.future.add_done_callback(committing.ended)
        chain.append(committing)
        self._reap(chains)
        while len(chain) > _MAX_CHAIN:
            self._settle(chain.popleft())

    def _begin(self) -> Transaction:
        """This batch's transaction: one begun ahead while earlier batches were processed, if still
        young; and, with ``overlap_commits``, begin more now (NEW_TXN off the path)."""
        s = self.settings
        txn: Transaction | None = None
        while txn is None and self._ahead:
            begun, at = self._ahead.popleft()
            if time.monotonic() - at < s.transaction_timeout_s / 2:
                txn = begun.result()  # a failed NEW_TXN raises its typed error: the session restarts
            else:
                _discard(begun)
        if txn is None:
            txn = self._client.transaction(s.transaction_timeout_s)
        self._own.add(txn.txn_id)
        self._own_since.append((time.monotonic(), txn.txn_id))
        if s.overlap_commits:
            while len(self._ahead) < _BEGUN_AHEAD:
                builder = self._client.new_transaction().with_transaction_timeout(s.transaction_timeout_s)
                self._ahead.append((builder.build_async(), time.monotonic()))
        return txn

    def _resolve_unsure(self) -> None:
        """Count the batches whose commit failed but which committed all the same (an answer lost,
        a timeout after the decision): their inputs are acked, so no later session processes them.
        Asked after fencing, which aborted any of them still open. A lookup that fails is tried
        again by the next session."""
        if not self._unsure:
            return
        from pulsar_txn.admin import TransactionsAdmin  # admin is not needed on the hot path

        admin = TransactionsAdmin(self._client, log_topic=self._client._log_topic)
        unsure, self._unsure = self._unsure, []
        for txn_id, size in unsure:
            try:
                status = admin.transaction_status(txn_id)
            except TransactionNotFound:
                log.warning("%s: how it ended is no longer in its TC's log; not counted", txn_id)
                continue
            except PulsarTxnError as exc:
                log.warning("%s: looking up how it ended failed (%s); retried next session", txn_id, exc)
                self._unsure.append((txn_id, size))
                continue
            if status in ("COMMITTED", "COMMITTING"):  # COMMITTING: decided, markers on their way
                log.info("%s committed although its commit reported a failure: counted", txn_id)
                self.progress.failed_batches -= 1
                self._committed(size)

    def _check_no_foreign(self, consumer: Consumer[bytes]) -> None:
        """Raise ``ForeignTransaction`` if a transaction this session did not begin holds input (the
        consumer skipped its messages when delivering): checked after each receive, before anything
        received is processed, so no later input of that partition is committed ahead of it."""
        own, since = self._own, self._own_since
        # Ours end within their timeout (commit, or the coordinator's abort), and their pending acks
        # are released soon after: one still held long after that is treated like anyone else's.
        cutoff = time.monotonic() - 2 * self.settings.transaction_timeout_s - 30
        while since and since[0][0] < cutoff:
            own.discard(since.popleft()[1])
        foreign = [t for t in consumer.pending_transactions() if t not in own]
        if foreign:
            self.progress.foreign_restarts += 1
            names = ", ".join(sorted(map(str, foreign)))
            raise ForeignTransaction(
                f"input of subscription {self.settings.subscription!r} is held by {names}, not begun "
                "by this session (a replaced instance's late ack): restarting the session to fence it"
            )

    def _discard_ahead(self) -> None:
        while self._ahead:
            _discard(self._ahead.popleft()[0])

    def _reap(self, chains: dict[int, deque[_Committing]], *, wait: bool = False) -> None:
        """Count the batches whose commit has finished (raise if one failed); with ``wait``, all of
        them, waiting for each."""
        for chain in chains.values():
            while chain and (wait or chain[0].future.done()):
                self._settle(chain.popleft())

    def _refused(self) -> BaseException | None:
        """Why no commit may be issued now (another instance took over), or None."""
        watch = self._watch
        return watch.error() if watch is not None and watch.fenced.is_set() else None

    def _settle(self, committing: _Committing) -> None:
        """Wait for a chained commit; raise what it raised (the session then restarts)."""
        try:
            committing.future.result()
        except BaseException:
            self.progress.failed_batches += 1
            self._unsure.append((committing.txn.txn_id, committing.size))
            raise
        self._committed(committing.size, committing.ended_at)

    def _settle_quietly(self, committing: _Committing) -> None:
        """``_settle`` for a session that is failing already: the other error is the one raised, but
        a batch that committed meanwhile (e.g. of another partition) is counted as processed. A
        KeyboardInterrupt is not swallowed: it means stop now."""
        try:
            self._settle(committing)
        except Exception as exc:
            log.warning("commit of %s failed too: %s", committing.txn.txn_id, exc)

    def _committed(self, size: int, at: float | None = None) -> None:
        """Count a committed batch; ``at``: when its commit finished (wall clock), if known."""
        progress = self.progress
        progress.processed += size
        progress.last_commit_at = at or time.time()
        progress.transactions += 1
        if self._on_progress is not None:
            self._on_progress(progress)

    def close(self) -> None:
        for producer in self._producers.values():
            producer.close()
        self._producers.clear()


@dataclass
class _Committing:
    txn: Transaction
    future: Future[None]
    size: int
    ended_at: float | None = None  # wall clock when the commit finished (counted later, when reaped)

    def ended(self, _f: Future[None]) -> None:
        self.ended_at = time.time()


def _discard(begun: Future[Transaction]) -> None:
    """Abort a transaction begun ahead and not used (it holds nothing; this frees it at the TC now
    rather than at its timeout)."""

    def abort(f: Future[Transaction]) -> None:
        if f.exception() is None:
            f.result().abort_async().add_done_callback(_log_failure)

    begun.add_done_callback(abort)


def _log_failure(f: Future[None]) -> None:
    exc = f.exception()
    if exc is not None:
        log.info("aborting an unused transaction failed (its timeout ends it): %s", exc)


def _commit_after(
    txn: Transaction,
    before: Future[None] | None,
    refused: Callable[[], BaseException | None] | None = None,
) -> Future[None]:
    """Commit ``txn`` once ``before`` (the partition's previous batch) has committed; if it failed,
    abort ``txn`` instead and fail with the same error. So a committed batch always has every earlier
    batch of its partition committed, and the order of the output holds. ``refused``, asked just
    before the commit is issued, names a reason to abort instead (another instance took over)."""
    done: Future[None] = Future()

    def go(prev: Future[None] | None) -> None:
        exc = prev.exception() if prev is not None else None
        if exc is None and refused is not None:
            exc = refused()
        try:
            ending = txn.abort_async() if exc is not None else txn.commit_async()
        except BaseException as err:  # e.g. the transaction timed out meanwhile
            done.set_exception(exc or err)
            return
        if exc is not None:
            ending.add_done_callback(lambda _f: done.set_exception(exc))
        else:
            relay(ending, done, lambda _none: None)

    if before is None:
        go(None)
    else:
        before.add_done_callback(go)
    return done
