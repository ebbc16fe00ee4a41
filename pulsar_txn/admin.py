"""``TransactionsAdmin``: what ``pulsar-admin transactions`` shows, from Python.

Coordinator stats come from a coordinator's admin HTTP endpoint (``--admin-port``). Everything else is
computed from Kafka, exactly as a recovering component would see it, so it works with or without a
running coordinator: transaction metadata from the transaction log, transaction-buffer stats from the
latest snapshot plus a scan, pending-ack stats from the subscription's cursor plus its pending-ack log.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from email.message import Message
from typing import IO, TYPE_CHECKING, Any, TypeVar

from kafka_store import StoreError, TopicNotFoundError
from pulsar_txn import _args
from pulsar_txn._boundary import public_errors
from pulsar_txn.client import Client
from pulsar_txn.errors import (
    AuthenticationError,
    ConfigError,
    PersistenceError,
    PulsarTxnError,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
)
from pulsar_txn.naming import DEFAULT_LOG_TOPIC, TopicName
from pulsar_txn.txnid import TxnID

if TYPE_CHECKING:
    from pulsar_txn.buffer.reader import LoadedState
    from pulsar_txn.coordinator.records import TxnMeta
    from pulsar_txn.message import MessageId
    from pulsar_txn.pendingack.log import PendingAckFold

_R = TypeVar("_R")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are errors: urllib would resend our ``Authorization`` header to wherever the
    ``Location`` points, handing the token to another host. The admin endpoint never redirects."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


def open_admin_url(request: urllib.request.Request, timeout: float) -> Any:
    """``urlopen`` for requests that may carry the bearer token: no redirects followed (a 3xx is an
    ``HTTPError``)."""
    return urllib.request.build_opener(_NoRedirect).open(request, timeout=timeout)


def fetch_admin(admin_url: str, path: str, token: str | None, timeout: float) -> bytes:
    """GET ``path`` from a coordinator's admin endpoint (with the bearer token, if any); typed errors."""
    admin_url = admin_url.rstrip("/")
    scheme = urllib.parse.urlsplit(admin_url).scheme.lower()
    if scheme not in ("http", "https"):  # "host:port" reads as scheme "host"; pulsar:// is the TC's
        raise ConfigError(f"admin URL {admin_url!r} is not an http:// or https:// URL")
    try:
        request = urllib.request.Request(admin_url + path)
    except ValueError as exc:  # e.g. no host
        raise ConfigError(f"admin URL {admin_url!r}: {exc}") from None
    if token:
        _args.bearer_token(token, "the auth token")  # a ConfigError, not http.client's (with the token)
        # As UTF-8 bytes, as the server compares it: a str header would go out as latin-1.
        request.add_header("Authorization", f"Bearer {token}".encode())  # type: ignore[arg-type]
    try:
        with open_admin_url(request, timeout) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise AuthenticationError(f"{admin_url}: missing or wrong auth token") from None
        raise PulsarTxnError(f"{admin_url}{path}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise PulsarTxnError(f"cannot reach {admin_url}: {exc}", retriable=True) from None
    except (http.client.InvalidURL, UnicodeError) as exc:  # a port that is not a number; a bad IDNA host
        raise ConfigError(f"admin URL {admin_url!r}: {exc}") from None
    except http.client.HTTPException as exc:  # not HTTP, or an answer cut short
        raise PulsarTxnError(
            f"{admin_url}{path}: not a valid HTTP answer ({type(exc).__name__}: {exc})", retriable=True
        ) from None


@public_errors
class TransactionsAdmin:
    """``TransactionsAdmin(client, admin_url="http://coord:8080")``; ``admin_url`` is needed only for
    ``coordinator_stats`` and ``metrics``, the only calls that work with ``client=None``.
    ``log_topic`` must match the coordinators' ``log_topic`` setting."""

    def __init__(
        self,
        client: Client | None,
        *,
        admin_url: str | None = None,
        auth_token: str | None = None,
        log_topic: str = DEFAULT_LOG_TOPIC,
        timeout_seconds: float = 10.0,
    ) -> None:
        # None: only the coordinator's HTTP calls (stats, metrics) are available.
        self.__client = None if client is None else _args.instance(client, Client, "client")
        self.admin_url = _args.text(admin_url, "admin_url").rstrip("/") if admin_url is not None else None
        self._token = _args.bearer_token(auth_token, "auth_token") if auth_token is not None else None
        self.log_topic = _args.text(log_topic, "log_topic")
        self._timeout = _args.seconds(timeout_seconds, "timeout_seconds")

    @property
    def _client(self) -> Client:
        """The client, ``AlreadyClosed`` once it is closed (as its own calls are)."""
        client = self.__client
        if client is None:
            raise ConfigError("this TransactionsAdmin was made without a Client: only its HTTP calls work")
        client._check_open()
        return client

    # ------------------------------------------------------------------ coordinator (HTTP)
    def coordinator_stats(self) -> dict[int, dict[str, Any]]:
        """``pulsar-admin transactions coordinator-stats``: per TC id, counters such as
        ``timeout_count``, ``committed_count``, ``ongoing_txn_size``, ``least_sig_bits``."""
        body = self._get("/admin/v2/transactions/coordinatorStats")
        coordinators = body.get("coordinators") if isinstance(body, dict) else None
        if not isinstance(coordinators, dict) or not all(str(tc).isdigit() for tc in coordinators):
            raise PulsarTxnError(f"unexpected coordinator stats from {self.admin_url}: {body!r:.200}")
        return {int(tc): stats for tc, stats in coordinators.items()}

    def metrics(self) -> str:
        """The coordinator's ``GET /metrics``: Prometheus' text format, with Pulsar's transaction metric
        names (``pulsar_txn_active_count``, ``pulsar_txn_committed_total``, ...; docs/operations.md)."""
        raw = self._fetch("/metrics")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PulsarTxnError(f"{self.admin_url}/metrics: not UTF-8 text") from None

    def _get(self, path: str) -> Any:
        raw = self._fetch(path)
        try:
            return json.loads(raw)
        except ValueError:
            raise PulsarTxnError(f"{self.admin_url}{path}: not JSON") from None

    def _fetch(self, path: str) -> bytes:
        if self.admin_url is None:
            raise ConfigError("coordinator stats need admin_url= (a coordinator started with --admin-port)")
        return fetch_admin(self.admin_url, path, self._token, self._timeout)

    # ------------------------------------------------------------------ transactions (the log)
    def list_transactions(self, tc_id: int) -> dict[TxnID, dict[str, Any]]:
        """Every transaction TC ``tc_id`` still knows (open ones, and ended ones within the retention
        window), as ``transaction_metadata`` shows them."""
        from pulsar_txn.coordinator.fold import read_tc_log

        _args.integer(tc_id, "tc_id")
        count = self._tc_count()
        if not 0 <= tc_id < count:
            raise TransactionCoordinatorNotFoundError(
                f"TC {tc_id} does not exist ({count} TCs)", retriable=False
            )
        try:
            fold = read_tc_log(self._client.kafka, self.log_topic, tc_id, self._client._secret)
        except StoreError as exc:
            raise PersistenceError(
                f"reading TC {tc_id}'s log failed: {exc}", retriable=exc.retriable
            ) from None
        return {meta.txn_id: _meta_dict(meta) for _seq, meta in sorted(fold.txns.items())}

    def _tc_count(self) -> int:
        """How many TCs there are: the transaction log's partitions."""
        try:
            return self._client._admin.partition_count(self.log_topic)
        except TopicNotFoundError:
            raise TransactionCoordinatorNotFoundError(
                f"no transaction log {self.log_topic!r} (is log_topic right?)", retriable=False
            ) from None
        except StoreError as exc:
            raise PersistenceError(
                f"reading {self.log_topic} failed: {exc}", retriable=exc.retriable
            ) from None

    def slow_transactions(
        self, timeout_ms: int, coordinator_id: int | None = None
    ) -> dict[TxnID, dict[str, Any]]:
        """``pulsar-admin transactions slow-transactions``: transactions still not ended (open, or
        committing/aborting) that were opened at least ``timeout_ms`` ago, of one TC or of all."""
        wait_ms = _args.number(timeout_ms, "timeout_ms", unit=" of milliseconds")
        if coordinator_id is not None:
            _args.integer(coordinator_id, "coordinator_id")
        tc_ids = [coordinator_id] if coordinator_id is not None else range(self._tc_count())
        opened_before = int(time.time() * 1000 - wait_ms)
        out: dict[TxnID, dict[str, Any]] = {}
        for tc_id in tc_ids:
            for txn_id, meta in self.list_transactions(tc_id).items():
                if meta["status"] in _NOT_ENDED and meta["opened_at_ms"] <= opened_before:
                    out[txn_id] = meta
        return out

    def transaction_metadata(self, txn_id: TxnID | str) -> dict[str, Any]:
        """``pulsar-admin transactions transaction-metadata``: status, timeout, produced partitions,
        acked subscriptions. ``TransactionNotFound`` if the TC never had it or has forgotten it."""
        tid = _txn_id(txn_id)
        meta = self.list_transactions(tid.most_bits).get(tid)
        if meta is None:
            raise TransactionNotFound(f"transaction {tid} is not in TC {tid.most_bits}'s log")
        return meta

    def transaction_status(self, txn_id: TxnID | str) -> str:
        """``OPEN``, ``COMMITTING``, ``COMMITTED``, ``ABORTING``, ``ABORTED``, ..."""
        return str(self.transaction_metadata(txn_id)["status"])

    # ------------------------------------------------------------------ topics and subscriptions
    def transaction_buffer_stats(self, topic: str) -> dict[str, dict[str, Any]]:
        """``pulsar-admin transactions transaction-buffer-stats``, per partition (full partition name):
        ``max_read_position``, ``ongoing_txn_size``, ``aborted_txn_size``, ``committed_txns``,
        ``aborted_txns``, ``last_snapshot_offset`` (where recovery started; None = from offset 0),
        ``last_snapshot_time`` (ms since the epoch; None without a snapshot)."""
        return {
            name: {
                **loaded.state.stats(),
                "recovery_state": "Ready",
                "last_snapshot_offset": loaded.from_snapshot,
                "last_snapshot_time": loaded.snapshot_time,
            }
            for name, loaded in self._buffer_states(topic).items()
        }

    def transaction_in_buffer_stats(self, txn_id: TxnID | str, topic: str) -> dict[str, dict[str, Any]]:
        """``pulsar-admin transactions transaction-in-buffer-stats``, per partition: ``state`` (OPEN,
        COMMITTED, ABORTED, ENDED, NONE), ``start_position`` (its first message, while open),
        ``aborted``."""
        tid = _txn_id(txn_id)
        return {name: loaded.state.txn_stats(tid) for name, loaded in self._buffer_states(topic).items()}

    def _buffer_states(self, topic: str) -> dict[str, LoadedState]:
        from pulsar_txn.buffer.reader import load_states

        client = self._client
        name = TopicName.parse(topic)
        # Asked again, not cached: the topic may have grown since (TopicNotFound, also for a partition
        # past the count).
        count = client._partition_count(name, refresh=True)
        parts = [name.partition] if name.partition is not None else list(range(count))
        try:
            loaded = load_states(
                client.kafka,
                name.kafka_topic,
                parts,
                store=client._snapshots(),
                options=client._buffer_options(),
            )
        except StoreError as exc:
            raise PersistenceError(f"reading {topic} failed: {exc}", retriable=exc.retriable) from None
        return {str(name.base.with_partition(p)): loaded[p] for p in parts}

    def pending_ack_stats(self, topic: str, subscription: str) -> dict[str, dict[str, Any]]:
        """``pulsar-admin transactions pending-ack-stats``, per partition: ``pending_ack_count``,
        the pending transactions, the cursor's mark-delete position and acked ranges."""
        from pulsar_txn.pendingack.stats import pending_ack_stats

        return self._subscription_read(
            topic, subscription, lambda: pending_ack_stats(self._client, topic, subscription)
        )

    def transaction_in_pending_ack_stats(
        self, txn_id: TxnID | str, topic: str, subscription: str
    ) -> dict[str, dict[str, Any]]:
        """``pulsar-admin transactions transaction-in-pending-ack-stats``, per partition:
        ``cumulative_ack_position`` and ``individual_ack_count`` of the transaction's pending acks."""
        tid = _txn_id(txn_id)
        return {name: fold.state.txn_stats(tid) for name, fold in self._recover(topic, subscription).items()}

    def position_stats_in_pending_ack(
        self, topic: str, subscription: str, message_id: MessageId
    ) -> dict[str, Any]:
        """``pulsar-admin transactions position-stats-in-pending-ack``: where a message stands in the
        subscription: ``state`` MarkDelete, Acked, PendingAck (with the ``txns`` holding it) or
        NotInPendingAck."""
        from pulsar_txn.message import MessageId

        _args.instance(message_id, MessageId, "message_id")
        _args.position(message_id.partition, message_id.offset, "message_id")  # past int64 too
        base = TopicName.parse(topic).base
        if message_id.topic and message_id.topic != base.kafka_topic:
            raise ConfigError(f"message id {message_id} is of topic {message_id.topic!r}, not of {topic!r}")
        name = base.with_partition(message_id.partition)
        fold = self._recover(str(name), subscription)[str(name)]
        return fold.state.position_stats(message_id.offset)

    def _recover(self, topic: str, subscription: str) -> dict[str, PendingAckFold]:
        from pulsar_txn.pendingack.stats import recover_subscription

        return self._subscription_read(
            topic, subscription, lambda: recover_subscription(self._client, topic, subscription)
        )

    @staticmethod
    def _subscription_read(topic: str, subscription: str, read: Callable[[], _R]) -> _R:
        _args.text(topic, "topic")
        if not _args.text(subscription, "subscription"):
            raise ConfigError("subscription must not be empty")
        try:
            return read()
        except StoreError as exc:
            raise PersistenceError(
                f"reading subscription {subscription!r} of {topic} failed: {exc}", retriable=exc.retriable
            ) from None

    # ------------------------------------------------------------------ actions
    def abort_transaction(self, txn_id: TxnID | str) -> None:
        """Abort a transaction by id through its coordinator (the client's ``service_url``), e.g. one
        whose client is gone and that holds back readers until its timeout. Aborting one already
        aborted is fine; one committing or committed raises ``InvalidTxnStatusError``."""
        tid = _txn_id(txn_id)
        count = self._tc_count()
        if tid.most_bits >= count:  # else the lookup names a missing partition of the assign topic
            raise TransactionCoordinatorNotFoundError(
                f"TC {tid.most_bits} does not exist ({count} TCs)", retriable=False
            )
        self._client.resume_transaction(tid).abort()


def _txn_id(txn_id: TxnID | str) -> TxnID:
    return txn_id if isinstance(txn_id, TxnID) else TxnID.parse(txn_id)


_NOT_ENDED = frozenset({"OPEN", "COMMITTING", "ABORTING"})


def _meta_dict(meta: TxnMeta) -> dict[str, Any]:
    return {
        "txn_id": str(meta.txn_id),
        "status": meta.status.value,
        "timeout_ms": meta.timeout_ms,
        "opened_at_ms": meta.opened_at_ms,
        "deadline_ms": meta.deadline_ms,
        "updated_at_ms": meta.updated_at_ms,
        "ended_at_ms": meta.ended_at_ms,
        "timed_out": meta.timed_out,
        "partitions": list(meta.partitions),
        "subscriptions": [{"topic": t, "subscription": s} for t, s in meta.subscriptions],
    }


__all__ = ["DEFAULT_LOG_TOPIC", "TransactionsAdmin"]
