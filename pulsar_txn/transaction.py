"""Client-side transactions: Pulsar's ``Transaction`` with its client states.

A transaction tracks every send (and, later, ack) made in it. ``commit`` waits for all of them; if any
failed it aborts instead and raises ``TransactionHasOperationFailed``. Used as a context manager it
commits on success and aborts on an exception.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, wait
from enum import StrEnum
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pulsar_txn import _args
from pulsar_txn._future import LazyFuture, settle
from pulsar_txn.buffer.marker import txn_message_mac
from pulsar_txn.errors import (
    InvalidTxnStatusError,
    PulsarTxnError,
    Timeout,
    TransactionHasOperationFailed,
)
from pulsar_txn.txnid import TxnAction, TxnID

if TYPE_CHECKING:
    from pulsar_txn.client import Client

log = logging.getLogger(__name__)


class TransactionState(StrEnum):
    """The client states of Pulsar's TransactionImpl."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    ERROR = "ERROR"
    TIME_OUT = "TIME_OUT"


_COMMITTABLE = frozenset({TransactionState.OPEN})
# ERROR: an earlier end failed for good (e.g. the transaction is unknown); aborting again is allowed.
_ABORTABLE = frozenset({TransactionState.OPEN, TransactionState.TIME_OUT, TransactionState.ERROR})


class Transaction:
    """An open transaction (Pulsar's ``Transaction``): pass it as ``txn=`` to ``send`` and
    ``acknowledge``, then ``commit()`` or ``abort()``. Made by ``Client.transaction``,
    ``Client.new_transaction()...build()`` or, for one begun elsewhere, ``Client.resume_transaction``.
    As a context manager it commits on success and aborts on an exception."""

    def __init__(self, client: Client, txn_id: TxnID, timeout_ms: int) -> None:
        self._client = client
        self.txn_id = txn_id
        """The coordinator-assigned id; ``str(txn.txn_id)`` prints like Pulsar, ``(0,3)``."""
        self.timeout_ms = timeout_ms
        """The transaction timeout this handle was created with."""
        self._deadline = time.monotonic() + timeout_ms / 1000
        self._state = TransactionState.OPEN
        self._lock = threading.Lock()
        self._ops: list[Future[Any]] = []
        self._partitions: dict[str, Future[None]] = {}
        self._subscriptions: dict[tuple[str, str], Future[None]] = {}
        self._end_listeners: list[Callable[[TxnID, TxnAction], None]] = []
        # Sent with this handle's END_TXN: its retries are answered as the same end, while a commit
        # that another handle already made (resume_transaction) is refused, not taken for ours.
        self._end_token = os.urandom(8)
        self.txn_id_bytes = txn_id.to_bytes()
        """The id as stored in each message's header (made once, used per send)."""
        self._macs: dict[tuple[str, int], bytes] = {}  # txn_message_mac per partition, made once
        self._inflight = 0  # sends and acks counted by begin_send / begin_ack, not finished
        self._inflight_error: BaseException | None = None
        self._sends_waiters: list[Callable[[], None]] = []  # ends waiting for the sends in flight
        self._flush_hooks: list[Callable[[], None]] = []
        self._commit_checks: list[Callable[[TxnID], Future[None]]] = []
        self._acks_begun = 0  # acks counted by begin_ack so far: a prepare covers those it saw
        self._prepared: tuple[int, Future[None]] | None = None  # the last prepare: (acks it covers, result)
        # The countdown of the end in progress (commit/abort began): operations tracked, and hooks
        # added, by an operation counted before the end began still become part of it.
        self._ending: _Countdown | None = None
        # END_TXN of this action failed with a retriable error (e.g. no answer in time): the state
        # stays COMMITTING/ABORTING, as in Pulsar's TransactionImpl, and the same end may be asked
        # again (the coordinator's end is idempotent); an abort may follow a failed commit.
        self._failed_end: TxnAction | None = None
        client._track_handle(self)

    @property
    def state(self) -> TransactionState:
        """The client-side state; OPEN turns TIME_OUT once the timeout has passed."""
        with self._lock:
            return self._current_state()

    def _current_state(self) -> TransactionState:
        """The state, OPEN turned TIME_OUT past the deadline; the caller holds ``_lock``."""
        if self._state is TransactionState.OPEN and time.monotonic() >= self._deadline:
            self._state = TransactionState.TIME_OUT
        return self._state

    def __repr__(self) -> str:
        return f"Transaction{self.txn_id}[{self.state.value}]"

    # ------------------------------------------------------------------ operations in the txn
    def begin_send(self, partition: str) -> Future[None]:
        """A send of this transaction to ``partition`` starts: checked OPEN and counted in one step,
        so that a send racing with ``commit`` is either waited for or refused, never neither.
        Returns the partition's ADD_PARTITION_TO_TXN future (one call per partition; later sends
        share it). ``op_finished`` balances the count."""
        with self._lock:
            self._require_open("send")
            fut = self._partitions.get(partition)
            if fut is None:
                fut = self._client._tc().add_partitions_async(self.txn_id, [partition])
                self._partitions[partition] = fut
            self._inflight += 1
            return fut

    def _message_mac(self, topic: str, partition: int, secret: bytes) -> bytes:
        """The authentication header of this transaction's messages to ``topic[partition]``."""
        key = (topic, partition)
        mac = self._macs.get(key)
        if mac is None:
            mac = self._macs[key] = txn_message_mac(secret, self.txn_id_bytes, topic, partition)
        return mac

    def _require_open(self, what: str) -> None:
        """``InvalidTxnStatusError`` unless OPEN; the caller holds ``_lock``."""
        state = self._current_state()
        if state is not TransactionState.OPEN:
            raise InvalidTxnStatusError(
                f"cannot {what} in transaction {self.txn_id}: its state is {state.value}"
            )

    def begin_ack(self, topic: str, subscription: str) -> Future[None]:
        """An acknowledgement of this transaction starts: checked OPEN and counted in one step (as
        ``begin_send``); returns the subscription's ADD_SUBSCRIPTION_TO_TXN future (one call per
        subscription). ``op_finished`` balances the count once the ack is tracked or has failed."""
        key = (topic, subscription)
        with self._lock:
            self._require_open("acknowledge")
            fut = self._subscriptions.get(key)
            if fut is None:
                fut = self._client._tc().add_subscriptions_async(self.txn_id, [key])
                self._subscriptions[key] = fut
            self._inflight += 1
            self._acks_begun += 1
            return fut

    def add_end_listener(self, listener: Callable[[TxnID, TxnAction], None]) -> None:
        """Called with the outcome once this client has ended the transaction (consumers use it to
        apply their pending acks' outcome at once)."""
        with self._lock:
            if listener not in self._end_listeners:
                self._end_listeners.append(listener)

    def add_commit_check(self, check: Callable[[TxnID], Future[None]]) -> None:
        """Run once every operation has ended, before END_TXN(COMMIT): a check whose future fails
        turns the commit into an abort (a consumer checks that it still owns the partitions it acked
        on: otherwise their new owner may have processed the same messages)."""
        with self._lock:
            if check not in self._commit_checks:
                self._commit_checks.append(check)

    def add_flush_hook(self, hook: Callable[[], None]) -> None:
        """Called before the transaction waits for its operations (batched writes go out then); at
        once if the end has begun already (an operation counted before it added this late)."""
        with self._lock:
            if self._ending is None:
                self._flush_hooks.append(hook)
                return
        hook()

    def record_failure(self, exc: BaseException, what: str | None) -> None:
        """An operation of this transaction failed before it started: ``commit`` will abort instead
        (Pulsar: a failed op makes the commit fail with TransactionHasOperationFailed). With
        ``what``, the operation was not counted by ``begin_send``/``begin_ack``: it counts only while
        the transaction is OPEN, else ``InvalidTxnStatusError`` (as ``begin_ack`` would have
        raised), and the end that has begun keeps its outcome."""
        failed: Future[None] = Future()
        failed.set_exception(exc)
        self._track(failed, what)

    def op_finished(self, error: BaseException | None) -> None:
        """A send or ack counted by ``begin_send`` / ``begin_ack`` ended (a counter, cheaper than a
        tracked future per message); with ``error``, ``commit`` aborts instead."""
        with self._lock:
            self._inflight -= 1
            if error is not None and self._inflight_error is None:
                self._inflight_error = error
            if self._inflight or not self._sends_waiters:  # nobody waits before the end began
                return
            waiters, self._sends_waiters = self._sends_waiters, []
        for sends_done in waiters:
            sends_done()

    def track(self, op: Future[Any]) -> None:
        """Make ``commit`` wait for this operation (a send or an ack of the transaction)."""
        self._track(op, None)

    def _track(self, op: Future[Any], open_for: str | None) -> None:
        """``track``; with ``open_for``, only while OPEN (else ``InvalidTxnStatusError``)."""
        with self._lock:
            if open_for is not None:
                self._require_open(open_for)
            self._ops.append(op)
            ending = self._ending
            if ending is not None:
                ending.add_one()
        if ending is not None:
            op.add_done_callback(ending.one_done)

    # ------------------------------------------------------------------ ending
    def commit(self) -> None:
        """Wait for every send and ack made in the transaction, then commit it. If one of them
        failed, abort instead and raise ``TransactionHasOperationFailed``. ``InvalidTxnStatusError``
        if the transaction is not open (already ended, timed out)."""
        self._wait_end(self.commit_async())

    def commit_async(self) -> Future[None]:
        """``commit`` without waiting (Pulsar's ``commit()`` returns a future): batched acks are
        written now and the transaction takes no more sends or acks; the returned future resolves
        once committed, or fails as ``commit`` would raise. Transactions end independently of each
        other: when their order matters (output of one before the next), commit the next only after
        this future succeeded, as the exactly-once pipeline does. A transaction that cannot be
        committed (not open) gives a failed future, as Pulsar's, not an exception here."""
        try:
            retry = self._begin_end("commit", _COMMITTABLE, TransactionState.COMMITTING)
        except InvalidTxnStatusError as exc:
            return _failed_future(exc)
        result = self._watched_end()
        if retry:  # its operations and checks passed before the failed END_TXN: ask again
            self._end(TxnAction.COMMIT, result)
        else:
            self._after_ops(lambda failed: self._commit_or_abort(failed, result), ending=True)
        return result

    def prepare_async(self) -> Future[None]:
        """Do now what a commit waits for, without ending the transaction: batched acks are written,
        and once every operation so far has ended, the commit checks run (the acking consumers'
        ownership checks). A ``commit`` with no ack added since waits for this instead of checking
        again, so the checks can overlap with other work, e.g. the previous transaction's commit in
        the exactly-once pipeline. The future fails with what would make the commit abort; the
        transaction stays open either way."""
        result: Future[None] = LazyFuture()
        with self._lock:
            self._require_open("prepare")
            self._prepared = (self._acks_begun, result)

        def ops_ended(failed: BaseException | None) -> None:
            if failed is not None:
                result.set_exception(failed)
                return
            with self._lock:
                checks = list(self._commit_checks)
            self._run_checks(checks, lambda err: settle(result, err))

        self._after_ops(ops_ended)
        return result

    def abort(self) -> None:
        """Abort: none of its messages become visible, its acks are released (redelivered)."""
        self._wait_end(self.abort_async())

    def abort_async(self) -> Future[None]:
        """``abort`` without waiting; the future resolves once aborted (fails, as Pulsar's, for a
        transaction that cannot be aborted)."""
        try:
            retry = self._begin_end("abort", _ABORTABLE, TransactionState.ABORTING)
        except InvalidTxnStatusError as exc:
            return _failed_future(exc)
        result = self._watched_end()
        if retry:  # an earlier END_TXN failed after the operations had ended
            self._end(TxnAction.ABORT, result)
        else:
            self._after_ops(lambda _failed: self._end(TxnAction.ABORT, result), ending=True)
        return result

    def _end_limit(self) -> float:
        # Each step has its own deadline (the operations' wait, the commit checks, then END_TXN);
        # this only bounds a bug (two steps' worth gave up on commits still going, which then landed).
        return 3 * self._client.operation_timeout_seconds + 5

    def _watched_end(self) -> Future[None]:
        """The future of an end, registered with the client until it completes, so that
        ``Client.close`` waits for END_TXN's answer too (not only for the operations)."""
        result: Future[None] = _EndFuture()
        watch = self._client._deadline_watch()
        key = watch.add(time.monotonic() + self._end_limit(), _nothing)
        result.add_done_callback(lambda _f: watch.cancel(key))
        return result

    def _wait_end(self, result: Future[None]) -> None:
        limit = self._end_limit()
        done, _ = wait([result], limit)
        if not done:
            raise Timeout(f"transaction {self.txn_id} did not end within {limit:.0f}s")
        result.result()

    def _begin_end(self, what: str, allowed: frozenset[TransactionState], during: TransactionState) -> bool:
        """Check and leave the OPEN state in one step (no send or ack can slip in after); the
        batched writes that ending waits for start in ``_after_ops``. True: this repeats an end
        whose END_TXN failed with a retriable error (a commit only repeats a commit; an abort may
        follow either)."""
        with self._lock:
            state = self._current_state()
            failed = self._failed_end
            retry = failed is not None and (what == "abort" or failed is TxnAction.COMMIT)
            if state not in allowed and not retry:
                raise InvalidTxnStatusError(
                    f"cannot {what} transaction {self.txn_id}: its state is {state.value}"
                )
            self._failed_end = None  # one end in flight at a time: a second call meanwhile is refused
            self._state = during
            return retry

    def _after_ops(self, then: Callable[[BaseException | None], None], *, ending: bool = False) -> None:
        """Call ``then`` with the first failure among the transaction's operations (None if all
        succeeded) once every one of them has ended, or with ``Timeout`` after the operation timeout.
        No thread waits: ``then`` runs on the thread that ends the last operation (or here). With
        ``ending`` (commit/abort), operations counted now may still add to what is waited for."""
        timeout = self._client.operation_timeout_seconds
        with self._lock:
            hooks, self._flush_hooks = self._flush_hooks, []
            ops = [*self._ops, *self._partitions.values(), *self._subscriptions.values()]
            countdown = _Countdown(len(ops) + (self._inflight > 0))
            if self._inflight > 0:
                self._sends_waiters.append(countdown.one_done)
            if ending:
                self._ending = countdown
        for hook in hooks:
            hook()
        self._when_done(countdown, ops, timeout, lambda: then(self._first_failure(timeout)))

    def _when_done(
        self, countdown: _Countdown, futures: list[Future[Any]], timeout: float, then: Callable[[], None]
    ) -> None:
        """Call ``then`` once: when ``countdown`` (counting ``futures``, maybe more) reaches zero, or
        after ``timeout``, whichever comes first; ``then`` tells which from the futures' states."""
        watch = self._client._deadline_watch()

        def finish(expired: bool) -> None:
            if not countdown.fire():
                return  # the other of "all ended" and "expired" came first
            if not expired:
                watch.cancel(key)
            then()

        countdown.then = finish
        key = watch.add(time.monotonic() + timeout, lambda: finish(True))
        for fut in futures:
            fut.add_done_callback(countdown.one_done)
        countdown.one_done()  # the count started one higher, so it cannot fire before this point

    def _wait_ops(self) -> BaseException | None:
        """Start the batched writes and wait until every operation so far has ended; the first
        failure, if any (tests use it to know the acks are durable before looking)."""
        ended: Future[BaseException | None] = LazyFuture()
        self._after_ops(ended.set_result)
        return ended.result()

    def _first_failure(self, timeout: float) -> BaseException | None:
        """The failure that stops a commit: a failed send, a failed operation, or one not ended yet."""
        with self._lock:
            ops = [*self._ops, *self._partitions.values(), *self._subscriptions.values()]
            first: BaseException | None = self._inflight_error
            if first is None and self._inflight > 0:
                first = Timeout(f"sends of {self.txn_id} did not finish in {timeout}s")
        if first is not None:
            return first
        return _first_failure_of(
            ops, lambda: Timeout(f"an operation of {self.txn_id} did not finish in {timeout}s")
        )

    def _commit_or_abort(self, failed: BaseException | None, result: Future[None]) -> None:
        if failed is None:
            with self._lock:
                checks = list(self._commit_checks)
                prepared = self._prepared
                if prepared is not None and prepared[0] != self._acks_begun:
                    prepared = None  # acks came after the prepare: check again
            if prepared is not None:  # checked (or being checked) already, with every ack in

                def prepare_done(f: Future[None]) -> None:
                    if f.exception() is None or not checks:
                        self._commit_checked(None, result)
                    else:
                        # A failed prepare may only have found operations still running (every one
                        # has ended well by now): its checks never ran, so they run now.
                        self._run_checks(checks, lambda err: self._commit_checked(err, result))

                prepared[1].add_done_callback(prepare_done)
            elif checks:
                self._run_checks(checks, lambda err: self._commit_checked(err, result))
            else:
                self._end(TxnAction.COMMIT, result)
            return
        log.warning(
            "transaction %s: an operation failed (%s); aborting instead of committing", self.txn_id, failed
        )
        error = TransactionHasOperationFailed(
            f"transaction {self.txn_id} was aborted because an operation in it failed: {failed}"
        )
        error.__cause__ = failed
        self._end(TxnAction.ABORT, result, instead=error)

    def _commit_checked(self, failed: BaseException | None, result: Future[None]) -> None:
        if failed is None:
            self._end(TxnAction.COMMIT, result)
        else:
            self._commit_or_abort(failed, result)

    def _run_checks(
        self, checks: list[Callable[[TxnID], Future[None]]], then: Callable[[BaseException | None], None]
    ) -> None:
        """Run the commit checks, then ``then`` with the first failure (None if all passed; a check
        that did not answer within the operation timeout fails). No thread waits: this goes on from
        the last check's callback."""
        timeout = self._client.operation_timeout_seconds
        futures: list[Future[None]] = []
        for check in checks:
            try:
                futures.append(check(self.txn_id))
            except Exception as exc:  # a check that cannot even start fails the commit
                failed: Future[None] = Future()
                failed.set_exception(exc)
                futures.append(failed)

        def checked() -> None:
            late = f"the commit checks of {self.txn_id} did not finish in {timeout}s"
            then(_first_failure_of(futures, lambda: Timeout(late)))

        self._when_done(_Countdown(len(futures)), futures, timeout, checked)

    def _end(self, action: TxnAction, result: Future[None], instead: BaseException | None = None) -> None:
        """END_TXN, then the state, the end listeners and ``result`` (with ``instead`` as its error
        once the end succeeded, for a commit that became an abort)."""
        commit = action is TxnAction.COMMIT
        self._set(TransactionState.COMMITTING if commit else TransactionState.ABORTING)

        def answered(answer: Future[None]) -> None:
            exc = answer.exception()
            if exc is not None:  # InvalidTxnStatus, TransactionNotFound, Timeout, ...: the end failed
                if instead is None and isinstance(exc, PulsarTxnError) and exc.retriable:
                    # The outcome is unknown (it may have been decided): may be asked again.
                    with self._lock:
                        self._failed_end = action
                else:
                    self._set(TransactionState.ERROR)
                if instead is not None:
                    # A commit that became an abort: it failed for the operation's reason either way
                    # (the coordinator's timeout ends it if the abort did not get through).
                    log.warning(
                        "transaction %s: the abort instead of the commit failed: %s", self.txn_id, exc
                    )
                    # Not "was aborted": the abort did not get through. Refused for good (not
                    # retriable): the transaction was ended elsewhere, maybe committed; else its
                    # timeout ends it.
                    settled = isinstance(exc, PulsarTxnError) and not exc.retriable
                    fate = (
                        "it was ended elsewhere: its outcome is the coordinator's"
                        if settled
                        else "the coordinator aborts it at its timeout"
                    )
                    told = TransactionHasOperationFailed(
                        f"transaction {self.txn_id}: an operation in it failed ({instead.__cause__}), so"
                        f" this handle did not commit it; the abort sent instead failed ({exc}): {fate}"
                    )
                    told.__cause__ = instead.__cause__
                    result.set_exception(told)
                    return
                result.set_exception(exc)
                return
            ended = TransactionState.COMMITTED if commit else TransactionState.ABORTED
            self._set(ended)
            self._client._handle_ended(self, ended)
            with self._lock:
                listeners = list(self._end_listeners)
            self._notify(listeners, action)
            if instead is not None:
                result.set_exception(instead)
            else:
                result.set_result(None)

        try:
            sent = self._client._tc().end_txn_async(self.txn_id, action, self._end_token)
        except Exception as exc:  # the TC client is closed or cannot connect: the future says so
            sent = LazyFuture()
            sent.set_exception(exc)
        sent.add_done_callback(answered)

    def _set(self, state: TransactionState) -> None:
        with self._lock:
            self._state = state

    def _ended_elsewhere(self, state: TransactionState) -> None:
        """Another handle of this client ended the transaction: sends and acks here are refused
        from now on, and so is ending it again (Pulsar's client refuses a repeat too)."""
        with self._lock:
            if self._current_state() not in (TransactionState.OPEN, TransactionState.TIME_OUT):
                return
            self._state = state
            listeners = list(self._end_listeners)
        if state not in (TransactionState.COMMITTED, TransactionState.ABORTED):
            return
        # What acked through this handle learns the outcome now, as through the handle that ended it.
        self._notify(listeners, TxnAction.COMMIT if state is TransactionState.COMMITTED else TxnAction.ABORT)

    def _notify(self, listeners: list[Callable[[TxnID, TxnAction], None]], action: TxnAction) -> None:
        for listener in listeners:
            try:
                listener(self.txn_id, action)
            except Exception:  # the outcome is durable; a listener's failure must not undo the end
                log.exception("transaction %s: end listener failed", self.txn_id)

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            if self.state not in ENDED_OR_ENDING:
                self.commit()  # the block may have ended it (or begun to): then there is nothing to do
        elif self.state in (TransactionState.OPEN, TransactionState.TIME_OUT):
            try:
                self.abort()
            except PulsarTxnError as abort_error:  # keep the original exception; log this one
                log.warning("aborting %s after %r failed: %s", self.txn_id, exc, abort_error)


# A block that ended its transaction itself, or began to (``commit_async``): its exit leaves it so.
ENDED_OR_ENDING = frozenset(
    {
        TransactionState.COMMITTED,
        TransactionState.ABORTED,
        TransactionState.COMMITTING,
        TransactionState.ABORTING,
    }
)


class TransactionBuilder:
    """``client.new_transaction().with_transaction_timeout(seconds).build()``."""

    def __init__(self, client: Client) -> None:
        self._client = client
        # Sent explicitly, as Pulsar's Java builder does (its default is 60 s too): the handle's
        # client-side deadline is then the coordinator's, whatever its default_txn_timeout_ms.
        self._timeout_ms = 60_000

    def with_transaction_timeout(self, seconds: float) -> TransactionBuilder:
        """The coordinator aborts the transaction if it has not ended within ``seconds``."""
        # At least 1 ms: 0 on the wire asks for the coordinator's default (10 minutes, say).
        self._timeout_ms = max(1, round(_args.seconds(seconds, "transaction timeout") * 1000))
        return self

    def build(self) -> Transaction:
        """Begin the transaction at the coordinator (NEW_TXN) and return it, open."""
        return self._client._new_txn(self._timeout_ms)

    def build_async(self) -> Future[Transaction]:
        """``build`` without waiting (Pulsar's ``build()`` returns a future): NEW_TXN is sent now and
        the future resolves to the open transaction (its timeout runs from then)."""
        return self._client._new_txn_async(self._timeout_ms)


class _Countdown:
    """The operations an end waits for: ``then(expired=False)`` once the count reaches zero.
    ``fire`` makes sure only one of "all ended" and "expired" goes on."""

    __slots__ = ("_fired", "_left", "_lock", "then")

    def __init__(self, count: int) -> None:
        self._left = count + 1  # + 1: released by the caller once every callback is attached
        self._lock = threading.Lock()
        self._fired = False
        self.then: Callable[[bool], None] = lambda _expired: None

    def add_one(self) -> None:
        """One more operation to wait for (added by one that is itself still counted)."""
        with self._lock:
            self._left += 1

    def one_done(self, _op: object = None) -> None:
        with self._lock:
            self._left -= 1
            if self._left:
                return
        self.then(False)

    def fire(self) -> bool:
        with self._lock:
            if self._fired:
                return False
            self._fired = True
            return True


def _first_failure_of(
    futures: Iterable[Future[Any]], late: Callable[[], BaseException]
) -> BaseException | None:
    """The first failure among ``futures``, in order: an exception, a cancellation, or ``late()``
    for one not ended yet; None if all succeeded."""
    for fut in futures:
        if not fut.done():
            return late()
        try:
            failure = fut.exception(0)
        except BaseException as exc:  # cancelled: any failure means no commit
            return exc
        if failure is not None:
            return failure
    return None


class _EndFuture(LazyFuture[None]):
    """The future of a commit or abort. Once END_TXN may be on its way the end cannot be called
    back, so, like Pulsar's, it cannot be cancelled: ``cancel()`` returns False and the future still
    tells the outcome (before, a cancelled one made completing it raise on a client thread)."""

    def cancel(self) -> bool:
        return False


def _failed_future(exc: BaseException) -> Future[None]:
    result: Future[None] = _EndFuture()
    result.set_exception(exc)
    return result


def _nothing() -> None:
    """An end's deadline entry expires silently: ``_wait_end`` and the operations' own deadlines
    report the failure; the entry only keeps ``Client.close`` waiting."""


def joining_failed(exc: BaseException) -> PulsarTxnError:
    """The error of an operation whose partition or subscription could not join its transaction:
    not retriable, whatever the join's own error said. The join's outcome is kept for the whole
    transaction (its commit aborts with ``TransactionHasOperationFailed``), so repeating the
    operation fails the same way at once; only a new transaction can succeed."""
    if not isinstance(exc, PulsarTxnError):
        return PulsarTxnError(str(exc), retriable=False)
    if not exc.retriable:
        return exc
    try:
        copy = type(exc)(str(exc), retriable=False)
    except TypeError:  # a subclass with a constructor of its own
        copy = PulsarTxnError(str(exc), retriable=False)
    copy.__cause__ = exc
    return copy
