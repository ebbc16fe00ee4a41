"""The coordinator's endpoint bounds what one client can make it hold (found in review, session 35;
each test failed before its fix)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from pulsar_txn.errors import NotAllowedError, ServerError
from pulsar_txn.protocol import (
    CommandConnect,
    CommandEndTxn,
    CommandNewTxn,
    CommandType,
    FrameDecoder,
    encode_command,
    wrap,
)
from pulsar_txn.tc_client import SyncTcClient
from pulsar_txn.txnid import TxnAction

pytestmark = pytest.mark.integration


class _Raw:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.decoder = FrameDecoder()
        self.queue: list[Any] = []

    def send(self, command: Any) -> None:
        self.sock.sendall(encode_command(wrap(command)))

    def recv(self) -> Any:
        while not self.queue:
            data = self.sock.recv(65536)
            assert data, "closed"
            self.queue += [f.command for f in self.decoder.feed(data) if f.command.type != CommandType.PING]
        return self.queue.pop(0)


def test_an_end_token_too_long_to_keep_is_refused(
    embedded: Callable[..., Any], coord_config: Callable[..., Any]
) -> None:
    """Any client could commit with a 5 MB end_token, kept in memory until the transaction retires
    (5 min): 40 commits pinned 200 MiB."""
    ec = embedded(coord_config(), serve=True)
    raw = _Raw(ec.server.port)
    try:
        raw.send(CommandConnect(client_version="probe", protocol_version=20))
        assert raw.recv().connected is not None
        raw.send(CommandNewTxn(request_id=1, tc_id=0, txn_ttl_seconds=60_000))
        new = raw.recv().new_txn_response
        end = CommandEndTxn(
            request_id=2,
            txnid_most_bits=new.txnid_most_bits,
            txnid_least_bits=new.txnid_least_bits,
            txn_action=TxnAction.COMMIT,
            end_token=b"t" * 100_000,
        )
        raw.send(end)
        answer = raw.recv().end_txn_response
        assert answer.error == ServerError.NotAllowedError
        assert not ec.service.coordinator(0)._commit_tokens
        end.request_id, end.end_token = 3, b"t" * 8
        raw.send(end)  # a token of our client's size commits
        assert raw.recv().end_txn_response.error is None
    finally:
        raw.sock.close()


def test_a_request_over_the_coordinators_frame_limit_fails_at_once_not_retriable(
    embedded: Callable[..., Any], coord_config: Callable[..., Any]
) -> None:
    """The client sent it; the server closed the connection (under every other call on it), and the
    client reconnected and sent it again until its operation timeout."""
    ec = embedded(coord_config(), serve=True)
    with SyncTcClient(ec.url, operation_timeout=20) as client:
        txn = client.new_txn(60_000)
        parts = [f"persistent://t/n/topic-{i:06d}-" + "x" * 200 for i in range(6000)]  # ~1.4 MB
        with pytest.raises(NotAllowedError, match="exceeds the coordinator's limit") as caught:
            client.add_partitions(txn, parts)
        assert not caught.value.retriable
        client.end_txn(txn, TxnAction.ABORT)  # the connection is fine


def test_a_transaction_whose_log_record_would_pass_kafkas_limit_is_refused_at_once_and_can_end(
    embedded: Callable[..., Any], coord_config: Callable[..., Any]
) -> None:
    """Found by review (session 42): each log record holds the whole state, so adds of ~250-byte
    names passed Kafka's 1 MB record limit from ~4,000 partitions (under max_txn_participants). The
    broker's refusal came back as a retriable PersistenceError: the client retried it until its
    operation timeout. Now it is refused before the write; what was added before stays, and the
    records that end the transaction still fit."""
    import dataclasses

    from pulsar_txn.coordinator.status import TxnStatus

    ec = embedded(coord_config(num_tcs=1, static_tc_ids=(0,)), serve=True)
    with SyncTcClient(ec.url, operation_timeout=20, num_tcs=1) as client:
        txn = client.new_txn(120_000)
        added = 0
        with pytest.raises(NotAllowedError, match="log record") as caught:
            for chunk in range(6):  # 6 x 800 names of ~250 bytes: ~1.2 MB
                names = [f"persistent://public/default/t{chunk}-" + "x" * 200 + f"-p-{i}" for i in range(800)]
                client.add_partitions(txn, names)
                added += len(names)
        assert not caught.value.retriable
        assert 0 < added < 4800
        tc = ec.service.coordinator(0)
        meta = tc._txns[txn.least_bits]
        assert len(meta.partitions) == added  # the refused request left nothing behind
        for status in (TxnStatus.ABORTING, TxnStatus.ABORTED):  # the records that would end it fit
            ending = dataclasses.replace(meta, status=status, updated_at_ms=meta.updated_at_ms + 1)
            assert len(ending.encode(tc.epoch)) < tc._appender.max_record_bytes
        other = client.new_txn(60_000)  # the TC serves on
        client.end_txn(other, TxnAction.ABORT)
