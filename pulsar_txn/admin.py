"""``TransactionsAdmin``: what ``pulsar-admin transactions`` shows, from Python.

Coordinator stats come from a coordinator's admin HTTP endpoint (``--admin-port``). Everything else is
computed from Kafka, exactly as a recovering component would see it, so it works with or without a
running coordinator: transaction metadata from the transaction log, transaction-buffer stats from the
latest snapshot plus a scan, pending-ack stats from the subscription's cursor plus its pending-ack log.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from email.message import Message
from typing import IO, TYPE_CHECKING, Any

from kafka_store import StoreError, TopicNotFoundError
from pulsar_txn._boundary import public_errors
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
    from pulsar_txn.client import Client
    from pulsar_txn.coordinator.records import TxnMeta


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


@public_errors
class TransactionsAdmin:
    """``TransactionsAdmin(client, admin_url="http://coord:8080")``; ``admin_url`` is needed only for
    ``coordinator_stats``. ``log_topic`` must match the coordinators' ``log_topic`` setting."""

    def __init__(
        self,
        client: Client,
        *,
        admin_url: str | None = None,
        auth_token: str | None = None,
        log_topic: str = DEFAULT_LOG_TOPIC,
        timeout_seconds: float = 10.0,
    ) -> None:
        self._client = client
        self.admin_url = admin_url.rstrip("/") if admin_url else None
        self._token = auth_token
        self.log_topic = log_topic
        self._timeout = timeout_seconds

    # ------------------------------------------------------------------ coordinator (HTTP)
    def coordinator_stats(self) -> dict[int, dict[str, Any]]:
        """``pulsar-admin transactions coordinator-stats``: per TC id, counters such as
        ``timeout_count``, ``committed_count``, ``ongoing_txn_size``, ``least_sig_bits``."""
        body = self._get("/admin/v2/transactions/coordinatorStats")
        coordinators = body.get("coordinators") if isinstance(body, dict) else None
        if not isinstance(coordinators, dict):
            raise PulsarTxnError(f"unexpected coordinator stats from {self.admin_url}: {body!r}")
        return {int(tc): stats for tc, stats in coordinators.items()}

    def _get(self, path: str) -> Any:
        if self.admin_url is None:
            raise ConfigError("coordinator stats need admin_url= (a coordinator started with --admin-port)")
        request = urllib.request.Request(self.admin_url + path)
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with open_admin_url(request, self._timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise AuthenticationError(f"{self.admin_url}: missing or wrong auth token") from None
            raise PulsarTxnError(f"{self.admin_url}{path}: HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise PulsarTxnError(f"cannot reach {self.admin_url}: {exc}", retriable=True) from None

    # ------------------------------------------------------------------ transactions (the log)
    def list_transactions(self, tc_id: int) -> dict[TxnID, dict[str, Any]]:
        """Every transaction TC ``tc_id`` still knows (open ones, and ended ones within the retention
        window), as ``transaction_metadata`` shows them."""
        from pulsar_txn.coordinator.fold import read_tc_log

        try:
            count = self._client._admin.partition_count(self.log_topic)
            if not 0 <= tc_id < count:
                raise TransactionCoordinatorNotFoundError(f"TC {tc_id} does not exist ({count} TCs)")
            fold = read_tc_log(self._client.kafka, self.log_topic, tc_id)
        except TopicNotFoundError:
            raise TransactionCoordinatorNotFoundError(
                f"no transaction log {self.log_topic!r} (is log_topic right?)"
            ) from None
        except StoreError as exc:
            raise PersistenceError(
                f"reading TC {tc_id}'s log failed: {exc}", retriable=exc.retriable
            ) from None
        return {meta.txn_id: _meta_dict(meta) for _seq, meta in sorted(fold.txns.items())}

    def transaction_metadata(self, txn_id: TxnID | str) -> dict[str, Any]:
        """``pulsar-admin transactions transaction-metadata``: status, timeout, produced partitions,
        acked subscriptions. ``TransactionNotFound`` if the TC never had it or has forgotten it."""
        tid = txn_id if isinstance(txn_id, TxnID) else TxnID.parse(txn_id)
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
        ``aborted_txns``, ``last_snapshot_offset`` (where recovery started; None = from offset 0)."""
        from pulsar_txn.buffer.reader import load_state

        client = self._client
        name = TopicName.parse(topic)
        count = client._partition_count(name)
        parts = [name.partition] if name.partition is not None else list(range(count))
        store, options = client._snapshots(), client._buffer_options()
        out: dict[str, dict[str, Any]] = {}
        try:
            for p in parts:
                state, from_snapshot = load_state(
                    client.kafka, name.kafka_topic, p, store=store, options=options
                )
                out[str(name.base.with_partition(p))] = {
                    **state.stats(),
                    "recovery_state": "Ready",
                    "last_snapshot_offset": from_snapshot,
                }
        except StoreError as exc:
            raise PersistenceError(f"reading {topic} failed: {exc}", retriable=exc.retriable) from None
        return out

    def pending_ack_stats(self, topic: str, subscription: str) -> dict[str, dict[str, Any]]:
        """``pulsar-admin transactions pending-ack-stats``, per partition: ``pending_ack_count``,
        the pending transactions, the cursor's mark-delete position and acked ranges."""
        from pulsar_txn.pendingack.stats import pending_ack_stats

        try:
            return pending_ack_stats(self._client, topic, subscription)
        except StoreError as exc:
            raise PersistenceError(
                f"reading subscription {subscription!r} of {topic} failed: {exc}", retriable=exc.retriable
            ) from None


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
