"""The four transaction calls of the TC client as values: which TC, how to build the request for a
request id, which response answers it and how to read that response.

One description serves both of the client's paths (the asyncio one with lookups and retries, and
the thread-safe fast path on a ready connection), so the two can never disagree on the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pulsar_txn.errors import ConfigError, ProtocolError, error_from_server
from pulsar_txn.protocol import (
    BaseCommand,
    CommandAddPartitionToTxn,
    CommandAddSubscriptionToTxn,
    CommandEndTxn,
    CommandNewTxn,
    CommandType,
    Subscription,
    wrap,
)
from pulsar_txn.txnid import TxnAction, TxnID

__all__ = [
    "TcCall",
    "add_partitions_call",
    "add_subscriptions_call",
    "body",
    "check_ttl",
    "end_txn_call",
    "new_txn_call",
    "raise_for",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TcCall(Generic[T]):
    what: str  # for errors and logs, e.g. "END_TXN(COMMIT)"
    tc_id: int
    response_type: CommandType
    build: Callable[[int], BaseCommand]  # request id -> the wrapped request
    parse: Callable[[BaseCommand], T]  # the answer -> the result; raises the server's error


def body(value: T | None) -> T:
    if value is None:
        raise ProtocolError("response without its command body")
    return value


def raise_for(error: int | None, message: str | None) -> None:
    if error is not None:
        raise error_from_server(error, message or "")


def check_ttl(ttl_ms: int) -> None:
    if ttl_ms < 0:
        raise ConfigError(f"ttl_ms must not be negative, got {ttl_ms}")


def new_txn_call(ttl_ms: int, tc_id: int) -> TcCall[TxnID]:
    """NEW_TXN on ``tc_id``; ``ttl_ms`` travels in ``txn_ttl_seconds`` as milliseconds, as Pulsar's
    own clients send it (0: the coordinator's default)."""
    check_ttl(ttl_ms)

    def parse(answer: BaseCommand) -> TxnID:
        response = body(answer.new_txn_response)
        raise_for(response.error, response.message)
        return TxnID(response.txnid_most_bits, response.txnid_least_bits)

    return TcCall(
        "NEW_TXN",
        tc_id,
        CommandType.NEW_TXN_RESPONSE,
        lambda request_id: wrap(CommandNewTxn(request_id=request_id, txn_ttl_seconds=ttl_ms, tc_id=tc_id)),
        parse,
    )


def add_partitions_call(txn_id: TxnID, partitions: Sequence[str]) -> TcCall[None]:
    def parse(answer: BaseCommand) -> None:
        response = body(answer.add_partition_to_txn_response)
        raise_for(response.error, response.message)

    return TcCall(
        "ADD_PARTITION_TO_TXN",
        txn_id.tc_id,
        CommandType.ADD_PARTITION_TO_TXN_RESPONSE,
        lambda request_id: wrap(
            CommandAddPartitionToTxn(
                request_id=request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
                partitions=list(partitions),
            )
        ),
        parse,
    )


def add_subscriptions_call(txn_id: TxnID, subscriptions: Sequence[tuple[str, str]]) -> TcCall[None]:
    """``subscriptions`` are (topic, subscription name) pairs."""

    def parse(answer: BaseCommand) -> None:
        response = body(answer.add_subscription_to_txn_response)
        raise_for(response.error, response.message)

    return TcCall(
        "ADD_SUBSCRIPTION_TO_TXN",
        txn_id.tc_id,
        CommandType.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        lambda request_id: wrap(
            CommandAddSubscriptionToTxn(
                request_id=request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
                subscription=[Subscription(topic=t, subscription=s) for t, s in subscriptions],
            )
        ),
        parse,
    )


def end_txn_call(txn_id: TxnID, action: TxnAction) -> TcCall[None]:
    def parse(answer: BaseCommand) -> None:
        response = body(answer.end_txn_response)
        raise_for(response.error, response.message)

    return TcCall(
        f"END_TXN({action.name})",
        txn_id.tc_id,
        CommandType.END_TXN_RESPONSE,
        lambda request_id: wrap(
            CommandEndTxn(
                request_id=request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
                txn_action=action,
            )
        ),
        parse,
    )
