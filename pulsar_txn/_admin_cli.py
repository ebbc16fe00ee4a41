"""The ``pulsar-txn`` commands that read what ``pulsar-admin transactions`` shows: coordinator stats
and metrics over a coordinator's admin endpoint, transactions from the transaction log."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from collections.abc import Callable
from typing import Any

from pulsar_txn.admin import TransactionsAdmin, fetch_admin
from pulsar_txn.errors import ConfigError, PulsarTxnError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``1s``, ``5m``, ``2h``, ``1d``; a bare number is seconds (as ``pulsar-admin``)."""
    match = _DURATION.match(text)
    if match is None:
        raise ConfigError(f"not a duration: {text!r} (e.g. 500ms, 1s, 5m, 2h)")
    millis = float(match.group(1)) * _UNIT_MS[match.group(2) or "s"]
    if not math.isfinite(millis) or millis > 2**63 - 1:
        raise ConfigError(f"duration {text.strip()[:40]!r} is too long")
    return int(millis)


def _token() -> str | None:
    return os.environ.get("PULSAR_TXN_AUTH_TOKEN") or None


def cmd_coordinator_stats(args: argparse.Namespace) -> int:
    body = fetch_admin(args.admin_url, "/admin/v2/transactions/coordinatorStats", _token(), 10)
    try:
        print(json.dumps(json.loads(body), indent=2, sort_keys=True))
    except ValueError:
        raise PulsarTxnError(f"{args.admin_url}: coordinator stats are not JSON") from None
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    raw = fetch_admin(args.admin_url, "/metrics", _token(), 10)
    print(raw.decode("utf-8", "replace"), end="")  # text for a terminal: a bad byte is shown, not fatal
    return 0


def _with_admin(args: argparse.Namespace, use: Callable[[TransactionsAdmin], Any]) -> int:
    from pulsar_txn.cli import build_configs, tool_client

    kafka, config = build_configs(args)
    client = tool_client(kafka, config, getattr(args, "service_url", None))
    try:
        result = use(TransactionsAdmin(client, log_topic=config.log_topic))
    finally:
        client.close()
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def cmd_slow_transactions(args: argparse.Namespace) -> int:
    timeout_ms = parse_duration_ms(args.timeout)
    return _with_admin(
        args,
        lambda admin: {
            str(txn): meta for txn, meta in admin.slow_transactions(timeout_ms, args.coordinator_id).items()
        },
    )


def cmd_transaction_metadata(args: argparse.Namespace) -> int:
    return _with_admin(args, lambda admin: admin.transaction_metadata(args.txn_id))


def cmd_transaction_in_buffer_stats(args: argparse.Namespace) -> int:
    return _with_admin(args, lambda admin: admin.transaction_in_buffer_stats(args.txn_id, args.topic))


def cmd_pending_ack_stats(args: argparse.Namespace) -> int:
    """A subscription's cursor and pending acks as a consumer taking it over would recover them."""
    return _with_admin(args, lambda admin: admin.pending_ack_stats(args.topic, args.subscription))


def cmd_transaction_in_pending_ack_stats(args: argparse.Namespace) -> int:
    return _with_admin(
        args, lambda admin: admin.transaction_in_pending_ack_stats(args.txn_id, args.topic, args.subscription)
    )


def cmd_position_stats_in_pending_ack(args: argparse.Namespace) -> int:
    from pulsar_txn.message import MessageId
    from pulsar_txn.naming import TopicName

    name = TopicName.parse(args.topic)
    partition = name.partition if args.partition is None else args.partition
    if name.partition is not None and partition != name.partition:
        raise ConfigError(f"--topic names partition {name.partition}, --partition says {args.partition}")
    mid = MessageId(name.kafka_topic, partition or 0, args.offset)
    return _with_admin(
        args, lambda admin: admin.position_stats_in_pending_ack(args.topic, args.subscription, mid)
    )


def cmd_abort_transaction(args: argparse.Namespace) -> int:
    def abort(admin: TransactionsAdmin) -> dict[str, str]:
        admin.abort_transaction(args.txn_id)
        # The coordinator answers once the markers are written; its terminal record follows.
        deadline = time.monotonic() + 10
        status = admin.transaction_status(args.txn_id)
        while status == "ABORTING" and time.monotonic() < deadline:
            time.sleep(0.1)
            status = admin.transaction_status(args.txn_id)
        return {"txn_id": args.txn_id, "status": status}

    return _with_admin(args, abort)


def add_commands(sub: Any) -> None:
    """Register the commands on ``pulsar-txn``'s subparsers."""
    p = sub.add_parser("coordinator-stats", help="print a coordinator's stats as JSON")
    p.add_argument("--admin-url", required=True, help="e.g. http://127.0.0.1:8080")
    p.set_defaults(func=cmd_coordinator_stats)

    p = sub.add_parser("metrics", help="a coordinator's Prometheus metrics (GET /metrics)")
    p.add_argument("--admin-url", required=True, help="e.g. http://127.0.0.1:8080")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("slow-transactions", help="transactions open longer than --timeout, as JSON")
    _kafka_args(p)
    p.add_argument("-t", "--timeout", required=True, help="e.g. 500ms, 1s, 5m (a bare number: seconds)")
    p.add_argument("-c", "--coordinator-id", type=int, help="one TC (default: all)")
    p.set_defaults(func=cmd_slow_transactions)

    p = sub.add_parser("transaction-metadata", help="one transaction's status, partitions, subscriptions")
    _kafka_args(p)
    p.add_argument("--txn-id", required=True, help='e.g. "(0,3)"')
    p.set_defaults(func=cmd_transaction_metadata)

    p = sub.add_parser("transaction-in-buffer-stats", help="one transaction in a topic's transaction buffer")
    _kafka_args(p)
    p.add_argument("--txn-id", required=True, help='e.g. "(0,3)"')
    p.add_argument("--topic", required=True, help="topic or topic-partition-N")
    p.set_defaults(func=cmd_transaction_in_buffer_stats)

    p = sub.add_parser("pending-ack-stats", help="a subscription's cursor and pending acks as JSON")
    _kafka_args(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--subscription", required=True)
    p.set_defaults(func=cmd_pending_ack_stats)

    p = sub.add_parser(
        "transaction-in-pending-ack-stats", help="one transaction's pending acks in a subscription"
    )
    _kafka_args(p)
    p.add_argument("--txn-id", required=True, help='e.g. "(0,3)"')
    p.add_argument("--topic", required=True, help="topic or topic-partition-N")
    p.add_argument("--subscription", required=True)
    p.set_defaults(func=cmd_transaction_in_pending_ack_stats)

    p = sub.add_parser("position-stats-in-pending-ack", help="where a message stands in a subscription")
    _kafka_args(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--subscription", required=True)
    p.add_argument("--partition", type=int, help="default: the one --topic names, else 0")
    p.add_argument("--offset", type=int, required=True)
    p.set_defaults(func=cmd_position_stats_in_pending_ack)

    p = sub.add_parser("abort-transaction", help="abort a transaction by id through its coordinator")
    _kafka_args(p)
    p.add_argument("--service-url", required=True, help="a coordinator, e.g. pulsar://coord:6650")
    p.add_argument("--txn-id", required=True, help='e.g. "(0,3)"')
    p.set_defaults(func=cmd_abort_transaction)


def _kafka_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (or [kafka] in --config)")
    p.add_argument("--config", help="JSON or TOML file with [kafka] and [coordinator] sections")
