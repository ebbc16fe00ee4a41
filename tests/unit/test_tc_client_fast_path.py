"""SyncTcClient's fast path: calls on a ready connection are written from the calling thread and
answered by the loop's reader; anything that goes wrong falls back to the loop's path (lookups,
reconnects, retries) or ends in a clear error, never a hang. Real TCP on 127.0.0.1, fake TC."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pulsar_txn.errors import ConnectionClosed, ServiceNotReady, Timeout, TransactionNotFound
from pulsar_txn.protocol import CommandType
from pulsar_txn.server import CoordinatorServer
from pulsar_txn.tc_client import SyncTcClient
from pulsar_txn.txnid import TxnAction, TxnID
from tests.unit.test_protocol_server import FakeApi


class LoopThread:
    """A coordinator server on its own loop thread that a test can stop and start again."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = CoordinatorServer(api)
        self.port = 0

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(5)

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server = CoordinatorServer(self.api, port=self.port)
        self.run(self.server.start())
        self.port = self.server.port

    def stop(self) -> None:
        self.run(self.server.stop())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@contextmanager
def restartable(api: FakeApi) -> Iterator[LoopThread]:
    lt = LoopThread(api)
    lt.start()
    try:
        yield lt
    finally:
        lt.stop()
        lt.close()


def _forbid_the_loop_path(client: SyncTcClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_loop(*_: Any, **__: Any) -> Any:
        raise AssertionError("the call went through the event loop's path")

    monkeypatch.setattr(client.aio, "run_call", no_loop)
    monkeypatch.setattr(client.aio, "new_txn", no_loop)


def test_calls_on_a_ready_connection_do_not_go_through_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi()
    with (
        restartable(api) as srv,
        SyncTcClient(srv.url, operation_timeout=5) as client,
    ):
        for tc in (0, 1):  # the first call per TC looks it up and connects it on the loop
            client.end_txn(client.new_txn(0, tc_id=tc), TxnAction.ABORT)
        _forbid_the_loop_path(client, monkeypatch)
        txn = client.new_txn(7_000)
        client.add_partitions(txn, ["t-partition-0"])
        client.add_partitions_async(txn, ["t-partition-1"]).result(5)
        client.add_subscriptions_async(txn, [("t", "s")]).result(5)
        client.add_subscriptions(txn, [("u", "s")])
        client.end_txn(txn, TxnAction.COMMIT)
        other = client.new_txn_async(0).result(5)
        assert {txn.tc_id, other.tc_id} == {0, 1}  # round-robin continues on the fast path
        with pytest.raises(TransactionNotFound):  # the server's error, raised in the caller
            client.end_txn(TxnID(1, 999), TxnAction.ABORT)
        with pytest.raises(TransactionNotFound):
            client.add_partitions_async(TxnID(0, 998), ["t"]).result(5)
    assert api.status[txn] == "COMMIT"
    assert api.partitions[txn] == ["t-partition-0", "t-partition-1"]
    assert api.subscriptions[txn] == [("t", "s"), ("u", "s")]
    assert (txn.tc_id, 7_000) in api.new_txn_calls


def test_a_fast_call_without_an_answer_ends_in_timeout() -> None:
    api = FakeApi()
    with restartable(api) as srv:
        api.end_gate = srv.run(_event())
        with SyncTcClient(srv.url, operation_timeout=0.4, num_tcs=2) as client:
            txn = client.new_txn(0, tc_id=0)
            started = time.monotonic()
            with pytest.raises(Timeout):
                client.end_txn(txn, TxnAction.COMMIT)
            assert time.monotonic() - started < 2.0
            srv.loop.call_soon_threadsafe(api.end_gate.set)


async def _event() -> asyncio.Event:
    return asyncio.Event()


def test_a_retriable_error_on_the_fast_path_is_retried_by_the_loop_path() -> None:
    api = FakeApi()
    with (
        restartable(api) as srv,
        SyncTcClient(srv.url, operation_timeout=5) as client,
    ):
        txn = client.new_txn(0, tc_id=0)
        api.fail_next = [ServiceNotReady("warming up")]
        client.add_partitions(txn, ["a"])
        api.fail_next = [ServiceNotReady("warming up")]
        client.add_partitions_async(txn, ["b"]).result(5)
        client.end_txn(txn, TxnAction.COMMIT)
    assert api.partitions[txn] == ["a", "b"]
    assert api.status[txn] == "COMMIT"


def test_a_dropped_ready_connection_is_reconnected_for_sync_and_async_calls() -> None:
    api = FakeApi()
    with (
        restartable(api) as srv,
        SyncTcClient(srv.url, operation_timeout=10) as client,
    ):
        txn = client.new_txn(0, tc_id=0)
        srv.stop()
        srv.start()  # same port: the client's connection is gone, the coordinator is back
        client.add_partitions(txn, ["a"])
        srv.stop()
        srv.start()
        client.add_partitions_async(txn, ["b"]).result(10)
        client.end_txn(txn, TxnAction.COMMIT)
    assert api.partitions[txn] == ["a", "b"]
    assert api.status[txn] == "COMMIT"


def test_calls_after_close_fail_clearly() -> None:
    api = FakeApi()
    with restartable(api) as srv:
        client = SyncTcClient(srv.url, operation_timeout=5)
        client.connect()
        txn = client.new_txn(0, tc_id=0)
        client.close()
        for call in (
            lambda: client.end_txn(txn, TxnAction.ABORT),
            lambda: client.add_partitions_async(txn, ["a"]).result(5),
            lambda: client.new_txn(0),
        ):
            with pytest.raises(Exception) as info:
                call()
            assert type(info.value).__name__ == "ConnectionClosed"
            assert not getattr(info.value, "retriable", True)


def test_a_connection_closed_after_it_was_picked_fails_the_request_and_the_call_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi()
    with restartable(api) as srv, SyncTcClient(srv.url, operation_timeout=5) as client:
        txn = client.new_txn(0, tc_id=0)
        conn = client.aio.ready_connection(0)
        assert conn is not None
        asyncio.run_coroutine_threadsafe(conn.close(), client._loop).result(5)
        failed = conn.request_threadsafe(
            conn_request(txn), CommandType.END_TXN_RESPONSE, conn.next_request_id(), time.monotonic() + 5
        )
        with pytest.raises(ConnectionClosed):  # a failed future, not an exception from the call
            failed.result(1)
        monkeypatch.setattr(client.aio, "ready_connection", lambda _tc: conn)  # still "picked"
        client.add_partitions(txn, ["a"])
        client.add_partitions_async(txn, ["b"]).result(5)
        client.end_txn(txn, TxnAction.COMMIT)
    assert api.partitions[txn] == ["a", "b"]
    assert api.status[txn] == "COMMIT"


def conn_request(txn: TxnID) -> Any:
    from pulsar_txn.protocol import CommandEndTxn, wrap

    return wrap(
        CommandEndTxn(
            request_id=0,
            txnid_least_bits=txn.least_bits,
            txnid_most_bits=txn.most_bits,
            txn_action=TxnAction.ABORT,
        )
    )
