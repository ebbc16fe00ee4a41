"""The four transaction calls of the TC client as values: which TC, how to build the request for a
request id, which response answers it and how to read that response.

One description serves both of the client's paths (the asyncio one with lookups and retries, and
the thread-safe fast path on a ready connection), so the two can never disagree on the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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
    own clients send it (0: the coordinator's default). Callers check it first (``check_ttl``), so
    a bad value fails before any I/O."""

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
    return _on_txn(
        "ADD_PARTITION_TO_TXN",
        txn_id,
        CommandAddPartitionToTxn,
        CommandType.ADD_PARTITION_TO_TXN_RESPONSE,
        "add_partition_to_txn_response",
        partitions=list(partitions),
    )


def add_subscriptions_call(txn_id: TxnID, subscriptions: Sequence[tuple[str, str]]) -> TcCall[None]:
    """``subscriptions`` are (topic, subscription name) pairs."""
    return _on_txn(
        "ADD_SUBSCRIPTION_TO_TXN",
        txn_id,
        CommandAddSubscriptionToTxn,
        CommandType.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        "add_subscription_to_txn_response",
        subscription=[Subscription(topic=t, subscription=s) for t, s in subscriptions],
    )


def end_txn_call(txn_id: TxnID, action: TxnAction, token: bytes | None = None) -> TcCall[None]:
    return _on_txn(
        f"END_TXN({action.name})",
        txn_id,
        CommandEndTxn,
        CommandType.END_TXN_RESPONSE,
        "end_txn_response",
        txn_action=action,
        end_token=token,
    )


def _on_txn(
    what: str,
    txn_id: TxnID,
    command: Callable[..., Any],
    response_type: CommandType,
    response_field: str,
    **fields: Any,
) -> TcCall[None]:
    """A call on an existing transaction: the request carries its id, the answer only an error."""

    def parse(answer: BaseCommand) -> None:
        response = body(getattr(answer, response_field))
        raise_for(response.error, response.message)

    def build(request_id: int) -> BaseCommand:
        return wrap(
            command(
                request_id=request_id,
                txnid_least_bits=txn_id.least_bits,
                txnid_most_bits=txn_id.most_bits,
                **fields,
            )
        )

    return TcCall(what, txn_id.tc_id, response_type, build, parse)
