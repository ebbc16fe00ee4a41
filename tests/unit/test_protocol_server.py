"""CoordinatorServer and TcClient over real TCP on 127.0.0.1, against an in-memory fake coordinator."""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, TypeVar

import pytest

from pulsar_txn._tc_calls import add_partitions_call
from pulsar_txn._tc_connection import TcConnection
from pulsar_txn.errors import (
    AuthenticationError,
    ConnectionClosed,
    InvalidTxnStatusError,
    ServerError,
    ServiceNotReady,
    Timeout,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
)
from pulsar_txn.protocol import (
    BaseCommand,
    CommandAddPartitionToTxn,
    CommandAddSubscriptionToTxn,
    CommandConnect,
    CommandConnected,
    CommandEndTxn,
    CommandLookupTopic,
    CommandNewTxn,
    CommandPing,
    CommandTcClientConnectRequest,
    CommandType,
    FrameDecoder,
    LookupType,
    Message,
    Subscription,
    encode_command,
    encode_payload_command,
    tc_assign_topic,
    wrap,
)
from pulsar_txn.server import COORDINATOR_MAX_FRAME_SIZE, CoordinatorServer
from pulsar_txn.tc_client import SyncTcClient, TcClient
from pulsar_txn.txnid import TxnAction, TxnID

T = TypeVar("T")
TOKEN = "s3cret-token-value"


class FakeApi:
    """An in-memory CoordinatorApi: enough behaviour to exercise every error mapping."""

    def __init__(self, num_tcs: int = 2, owned: Iterable[int] = (0, 1)) -> None:
        self._num_tcs = num_tcs
        self.owned = set(owned)
        self.owners: dict[int, str] = {}
        self.recovering: set[int] = set()
        self.status: dict[TxnID, str] = {}
        self.partitions: dict[TxnID, list[str]] = {}
        self.subscriptions: dict[TxnID, list[tuple[str, str]]] = {}
        self.new_txn_calls: list[tuple[int, int]] = []
        self.check_serving_calls: list[int] = []
        self.fail_next: list[Exception] = []
        self.end_gate: asyncio.Event | None = None
        self._seq = itertools.count(1)

    @property
    def num_tcs(self) -> int:
        return self._num_tcs

    def owned_tcs(self) -> list[int]:
        return sorted(self.owned - self.recovering)

    def owner_url(self, tc_id: int) -> str | None:
        return self.owners.get(tc_id)

    def check_serving(self, tc_id: int) -> None:
        # Only the server's TC_CLIENT_CONNECT calls this, so the list counts TC connects.
        self.check_serving_calls.append(tc_id)
        self._serving(tc_id)

    def _serving(self, tc_id: int) -> None:
        if tc_id in self.recovering:
            raise ServiceNotReady(f"TC {tc_id} is recovering")
        if tc_id not in self.owned:
            raise TransactionCoordinatorNotFoundError(f"TC {tc_id} is not served here")

    async def new_txn(self, tc_id: int, ttl_ms: int) -> TxnID:
        self.new_txn_calls.append((tc_id, ttl_ms))
        self._maybe_fail()
        self._serving(tc_id)
        txn_id = TxnID(tc_id, next(self._seq))
        self.status[txn_id] = "OPEN"
        return txn_id

    async def add_partitions(self, txn_id: TxnID, partitions: list[str]) -> None:
        self._maybe_fail()
        self._open(txn_id)
        if "boom" in partitions:
            raise RuntimeError("kaboom: internal detail")
        self.partitions.setdefault(txn_id, []).extend(partitions)

    async def add_subscriptions(self, txn_id: TxnID, subscriptions: list[tuple[str, str]]) -> None:
        self._maybe_fail()
        self._open(txn_id)
        self.subscriptions.setdefault(txn_id, []).extend(subscriptions)

    async def end_txn(self, txn_id: TxnID, action: TxnAction, token: bytes | None = None) -> None:
        self._maybe_fail()
        if self.end_gate is not None:
            await self.end_gate.wait()
        self._open(txn_id)
        self.status[txn_id] = action.name

    def _maybe_fail(self) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)

    def _open(self, txn_id: TxnID) -> None:
        self._serving(txn_id.tc_id)
        status = self.status.get(txn_id)
        if status is None:
            raise TransactionNotFound(f"{txn_id} not found")
        if status != "OPEN":
            raise InvalidTxnStatusError(f"{txn_id} is {status}")


class RawClient:
    """A bare protocol peer: sends exactly what a test says, returns exactly what arrives."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: deque[BaseCommand] = deque()

    @classmethod
    async def open(cls, server: CoordinatorServer) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        return cls(reader, writer)

    async def send(self, command: Message | BaseCommand) -> None:
        base = command if isinstance(command, BaseCommand) else wrap(command)
        await self.send_raw(encode_command(base))

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self, timeout: float = 2.0) -> BaseCommand:
        async with asyncio.timeout(timeout):
            while not self.frames:
                data = await self.reader.read(65536)
                if not data:
                    raise EOFError("connection closed")
                self.frames.extend(f.command for f in self.decoder.feed(data))
        return self.frames.popleft()

    async def recv_until_closed(self, timeout: float = 2.0) -> list[BaseCommand]:
        """Every command that arrives before the server closes the connection."""
        received = list(self.frames)
        self.frames.clear()
        async with asyncio.timeout(timeout):
            while True:
                try:
                    data = await self.reader.read(65536)
                except ConnectionResetError:
                    return received
                if not data:
                    return received
                received.extend(f.command for f in self.decoder.feed(data))

    async def handshake(self, token: str | None = None, protocol_version: int = 20) -> CommandConnected:
        connect = CommandConnect(client_version="raw-test", protocol_version=protocol_version)
        if token is not None:
            connect.auth_method_name = "token"
            connect.auth_data = token.encode()
        await self.send(connect)
        answer = await self.recv()
        assert answer.connected is not None, answer
        return answer.connected

    async def ping_pong(self) -> None:
        await self.send(CommandPing())
        assert (await self.recv()).type == CommandType.PONG

    async def close(self) -> None:
        self.writer.close()
        with suppress(ConnectionError):
            await self.writer.wait_closed()


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(15):
            return await coro

    return asyncio.run(bounded())


@asynccontextmanager
async def serving(api: FakeApi, **kwargs: Any) -> AsyncIterator[CoordinatorServer]:
    server = CoordinatorServer(api, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def connected(server: CoordinatorServer, **handshake: Any) -> AsyncIterator[RawClient]:
    client = await RawClient.open(server)
    try:
        await client.handshake(**handshake)
        yield client
    finally:
        await client.close()


@asynccontextmanager
async def tc_client(url: str, **kwargs: Any) -> AsyncIterator[TcClient]:
    client = TcClient(url, **kwargs)
    try:
        yield client
    finally:
        await client.close()


# -- handshake and auth -----------------------------------------------------------------------------


def test_connect_is_answered_with_connected_and_the_negotiated_version() -> None:
    async def scenario() -> None:
        async with serving(FakeApi()) as server:
            assert server.url == f"pulsar://127.0.0.1:{server.port}"
            for offered, agreed in ((21, 20), (20, 20), (15, 15)):
                raw = await RawClient.open(server)
                connected_cmd = await raw.handshake(protocol_version=offered)
                await raw.close()
                assert connected_cmd.protocol_version == agreed
                assert connected_cmd.server_version == "pulsar-txn-0.1"
                assert connected_cmd.max_message_size == COORDINATOR_MAX_FRAME_SIZE == 1024 * 1024

    run(scenario())


def test_matching_token_is_accepted_and_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    async def scenario() -> None:
        async with serving(FakeApi(), auth_token=TOKEN) as server, connected(server, token=TOKEN) as raw:
            await raw.ping_pong()

    run(scenario())
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    "connect",
    [
        CommandConnect(client_version="c", protocol_version=20, auth_method_name="token", auth_data=b"wrong"),
        CommandConnect(client_version="c", protocol_version=20),
        CommandConnect(
            client_version="c", protocol_version=20, auth_method_name="basic", auth_data=TOKEN.encode()
        ),
    ],
    ids=["wrong-token", "no-credentials", "wrong-method"],
)
def test_bad_credentials_get_authentication_error_and_the_connection_closes(
    connect: CommandConnect, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    async def scenario() -> None:
        async with serving(FakeApi(), auth_token=TOKEN) as server:
            raw = await RawClient.open(server)
            await raw.send(connect)
            received = await raw.recv_until_closed()
            await raw.close()
            assert len(received) == 1
            assert received[0].error is not None
            assert received[0].error.error == ServerError.AuthenticationError

    run(scenario())
    assert TOKEN not in caplog.text
    assert "wrong" not in caplog.text


def test_client_with_a_bad_token_raises_authentication_error() -> None:
    async def scenario() -> None:
        async with (
            serving(FakeApi(), auth_token=TOKEN) as server,
            tc_client(server.url, auth_token="nope", operation_timeout=2) as client,
        ):
            with pytest.raises(AuthenticationError):
                await client.new_txn(1000)

    run(scenario())


def test_a_command_before_connect_gets_an_error_and_the_connection_closes() -> None:
    async def scenario() -> None:
        async with serving(FakeApi()) as server:
            raw = await RawClient.open(server)
            await raw.send(CommandNewTxn(request_id=1))
            received = await raw.recv_until_closed()
            await raw.close()
            assert [c.type for c in received] == [CommandType.ERROR]

    run(scenario())


# -- TC connect -------------------------------------------------------------------------------------


def test_tc_client_connect_needs_protocol_version_19() -> None:
    async def scenario() -> None:
        async with serving(FakeApi()) as server, connected(server, protocol_version=18) as raw:
            await raw.send(CommandTcClientConnectRequest(request_id=4, tc_id=0))
            answer = await raw.recv()
            assert answer.error is not None
            assert (answer.error.request_id, answer.error.error) == (4, ServerError.UnsupportedVersionError)
            await raw.ping_pong()  # still usable

    run(scenario())


def test_tc_client_connect_answers_success_not_owner_with_owner_url_and_not_ready() -> None:
    async def scenario() -> None:
        api = FakeApi(num_tcs=4, owned=(0, 1))
        api.owners[3] = "pulsar://10.0.0.7:6651"
        api.recovering.add(1)
        async with serving(api) as server, connected(server) as raw:
            results = {}
            for tc_id in (0, 1, 3):
                await raw.send(CommandTcClientConnectRequest(request_id=tc_id, tc_id=tc_id))
                answer = (await raw.recv()).tc_client_connect_response
                assert answer is not None and answer.request_id == tc_id
                results[tc_id] = (answer.error, answer.message)
            assert results[0] == (None, None)
            assert results[1][0] == ServerError.ServiceNotReady
            assert results[3] == (
                ServerError.TransactionCoordinatorNotFound,
                "TC 3 is owned by pulsar://10.0.0.7:6651",
            )

    run(scenario())


# -- transaction commands ---------------------------------------------------------------------------


def test_new_txn_reads_the_ttl_field_as_milliseconds_like_pulsar_clients_send_it() -> None:
    async def scenario() -> None:
        api = FakeApi()
        async with serving(api) as server, connected(server) as raw:
            await raw.send(CommandNewTxn(request_id=11, txn_ttl_seconds=30_000, tc_id=1))
            answer = (await raw.recv()).new_txn_response
            assert answer is not None
            assert (answer.request_id, answer.txnid_most_bits, answer.txnid_least_bits) == (11, 1, 1)
            assert answer.error is None
            await raw.send(CommandNewTxn(request_id=12, tc_id=0))
            assert (await raw.recv()).new_txn_response is not None
            assert api.new_txn_calls == [(1, 30_000), (0, 0)]

    run(scenario())


def test_add_partition_add_subscription_and_end_txn_succeed_and_echo_ids() -> None:
    async def scenario() -> None:
        api = FakeApi()
        txn = await api.new_txn(0, 0)
        ids = {"txnid_least_bits": txn.least_bits, "txnid_most_bits": txn.most_bits}
        async with serving(api) as server, connected(server) as raw:
            await raw.send(CommandAddPartitionToTxn(request_id=1, partitions=["t-partition-0", "u"], **ids))
            await raw.send(
                CommandAddSubscriptionToTxn(
                    request_id=2, subscription=[Subscription(topic="t", subscription="s")], **ids
                )
            )
            answers = [await raw.recv(), await raw.recv()]
            await raw.send(CommandEndTxn(request_id=3, txn_action=TxnAction.COMMIT, **ids))
            answers.append(await raw.recv())
        by_type = {a.type: a.inner() for a in answers}
        for kind, request_id in (
            (CommandType.ADD_PARTITION_TO_TXN_RESPONSE, 1),
            (CommandType.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, 2),
            (CommandType.END_TXN_RESPONSE, 3),
        ):
            response = by_type[kind]
            assert response is not None
            assert getattr(response, "request_id") == request_id  # noqa: B009
            assert getattr(response, "error") is None  # noqa: B009
            assert (response.txnid_most_bits, response.txnid_least_bits) == (0, txn.least_bits)  # type: ignore[attr-defined]
        assert api.partitions[txn] == ["t-partition-0", "u"]
        assert api.subscriptions[txn] == [("t", "s")]
        assert api.status[txn] == "COMMIT"

    run(scenario())


def test_api_errors_map_to_server_error_codes_and_messages() -> None:
    async def scenario() -> None:
        api = FakeApi()
        txn = await api.new_txn(0, 0)
        api.status[txn] = "ABORT"
        ids = {"txnid_least_bits": txn.least_bits, "txnid_most_bits": txn.most_bits}
        async with serving(api) as server, connected(server) as raw:
            await raw.send(CommandEndTxn(request_id=1, txnid_most_bits=0, txnid_least_bits=999, txn_action=0))
            answer = (await raw.recv()).end_txn_response
            assert answer is not None
            assert (answer.error, answer.message) == (ServerError.TransactionNotFound, "(0,999) not found")
            assert (answer.txnid_most_bits, answer.txnid_least_bits) == (0, 999)

            await raw.send(CommandAddPartitionToTxn(request_id=2, partitions=["p"], **ids))
            added = (await raw.recv()).add_partition_to_txn_response
            assert added is not None and added.error == ServerError.InvalidTxnStatus

            api.fail_next.append(ServiceNotReady("warming up"))
            await raw.send(CommandNewTxn(request_id=3, tc_id=0))
            created = (await raw.recv()).new_txn_response
            assert created is not None
            assert (created.error, created.message) == (ServerError.ServiceNotReady, "warming up")

    run(scenario())


def test_unexpected_api_exception_becomes_unknown_error_and_the_connection_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        api = FakeApi()
        txn = await api.new_txn(0, 0)
        async with serving(api) as server, connected(server) as raw:
            await raw.send(
                CommandAddPartitionToTxn(
                    request_id=5, txnid_least_bits=txn.least_bits, txnid_most_bits=0, partitions=["boom"]
                )
            )
            answer = (await raw.recv()).add_partition_to_txn_response
            assert answer is not None
            assert answer.error == ServerError.UnknownError
            assert answer.message is not None and "kaboom" not in answer.message
            await raw.ping_pong()

    run(scenario())
    assert "kaboom" in caplog.text  # logged with its traceback server-side


def test_end_txn_without_an_action_is_refused_rather_than_committed() -> None:
    async def scenario() -> None:
        api = FakeApi()
        txn = await api.new_txn(0, 0)
        async with serving(api) as server, connected(server) as raw:
            for request_id, action in ((1, None), (2, 7)):
                await raw.send(
                    CommandEndTxn(
                        request_id=request_id,
                        txnid_least_bits=txn.least_bits,
                        txnid_most_bits=0,
                        txn_action=action,
                    )
                )
                answer = (await raw.recv()).end_txn_response
                assert answer is not None and answer.error == ServerError.NotAllowedError
        assert api.status[txn] == "OPEN"

    run(scenario())


# -- lookup -----------------------------------------------------------------------------------------


def test_lookup_answers_connect_redirect_or_failed() -> None:
    async def scenario() -> None:
        api = FakeApi(num_tcs=4, owned=(0,))
        api.owners[1] = "pulsar://other:6650"
        api.recovering.add(3)
        async with serving(api) as server, connected(server) as raw:
            api.owners[3] = server.url  # this instance, still recovering: must not redirect to itself
            topics = [tc_assign_topic(n) for n in range(5)] + ["persistent://public/default/t"]
            for request_id, topic in enumerate(topics):
                await raw.send(CommandLookupTopic(topic=topic, request_id=request_id))
            answers = {}
            for _ in topics:
                response = (await raw.recv()).lookup_topic_response
                assert response is not None
                answers[response.request_id] = response
            assert (answers[0].response, answers[0].broker_service_url) == (LookupType.Connect, server.url)
            assert (answers[1].response, answers[1].broker_service_url) == (
                LookupType.Redirect,
                "pulsar://other:6650",
            )
            assert answers[1].authoritative
            for unowned in (2, 3):
                assert (answers[unowned].response, answers[unowned].error) == (
                    LookupType.Failed,
                    ServerError.ServiceNotReady,
                )
            for missing in (4, 5):
                assert (answers[missing].response, answers[missing].error) == (
                    LookupType.Failed,
                    ServerError.TopicNotFound,
                )

    run(scenario())


def test_partitioned_metadata_of_the_tc_assign_topic_is_the_number_of_tcs() -> None:
    """Pulsar's Java client learns how many TCs there are this way before TC_CLIENT_CONNECT."""
    from pulsar_txn.protocol import (
        TC_ASSIGN_TOPIC,
        CommandPartitionedTopicMetadata,
        PartitionedMetadataResult,
    )

    async def scenario() -> None:
        async with serving(FakeApi(num_tcs=4)) as server, connected(server) as raw:
            await raw.send(CommandPartitionedTopicMetadata(topic=TC_ASSIGN_TOPIC, request_id=7))
            await raw.send(
                CommandPartitionedTopicMetadata(topic="persistent://public/default/t", request_id=8)
            )
            first, second = (
                (await raw.recv()).partition_metadata_response,
                (await raw.recv()).partition_metadata_response,
            )
            assert first is not None and second is not None
            assert (first.request_id, first.response, first.partitions) == (
                7,
                PartitionedMetadataResult.Success,
                4,
            )
            assert (second.request_id, second.response, second.error) == (
                8,
                PartitionedMetadataResult.Failed,
                ServerError.TopicNotFound,
            )

    run(scenario())


# -- robustness -------------------------------------------------------------------------------------


def test_malformed_frame_gets_an_error_and_close_while_other_connections_keep_working() -> None:
    async def scenario() -> None:
        async with serving(FakeApi()) as server, connected(server) as bystander:
            bad = await RawClient.open(server)
            await bad.handshake()
            await bad.send_raw(struct.pack(">II", 6, 2) + b"\xff\xff")  # truncated varint
            received = await bad.recv_until_closed()
            await bad.close()
            assert len(received) == 1 and received[0].error is not None
            assert (received[0].error.request_id, received[0].error.error) == (0, ServerError.UnknownError)
            assert "malformed" in received[0].error.message
            await bystander.ping_pong()
            async with connected(server) as newcomer:
                await newcomer.ping_pong()

    run(scenario())


def test_command_type_without_its_body_is_malformed() -> None:
    async def scenario() -> None:
        async with serving(FakeApi()) as server:
            raw = await RawClient.open(server)
            await raw.handshake()
            await raw.send(BaseCommand(type=CommandType.NEW_TXN))
            received = await raw.recv_until_closed()
            await raw.close()
            assert [c.type for c in received] == [CommandType.ERROR]

    run(scenario())


def test_oversize_frame_closes_the_connection() -> None:
    async def scenario() -> None:
        async with serving(FakeApi(), max_frame_size=1024) as server:
            raw = await RawClient.open(server)
            await raw.handshake()
            await raw.send_raw(struct.pack(">I", 1025))
            assert await raw.recv_until_closed() == []
            await raw.close()

    run(scenario())


def test_unknown_and_unsupported_commands_get_not_allowed_and_the_connection_stays() -> None:
    async def scenario() -> None:
        async with serving(FakeApi()) as server, connected(server) as raw:
            await raw.send(BaseCommand(type=CommandType.SUBSCRIBE))
            await raw.send(BaseCommand(type=99))
            await raw.send_raw(encode_payload_command(BaseCommand(type=CommandType.SEND), b"m", b"p"))
            messages = []
            for _ in range(3):
                error = (await raw.recv()).error
                assert error is not None and error.error == ServerError.NotAllowedError
                messages.append(error.message)
            assert messages == [
                "unsupported command SUBSCRIBE",
                "unsupported command 99",
                "unsupported command SEND",
            ]
            await raw.ping_pong()

    run(scenario())


def test_concurrent_requests_on_one_connection_complete_out_of_order() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.end_gate = asyncio.Event()
        txn = await api.new_txn(0, 0)
        async with serving(api) as server, connected(server) as raw:
            await raw.send(
                CommandEndTxn(
                    request_id=1,
                    txnid_least_bits=txn.least_bits,
                    txnid_most_bits=0,
                    txn_action=TxnAction.ABORT,
                )
            )
            await raw.send(CommandPing())
            await raw.send(CommandNewTxn(request_id=2, tc_id=1))
            first = {(await raw.recv()).type, (await raw.recv()).type}
            assert first == {CommandType.PONG, CommandType.NEW_TXN_RESPONSE}
            api.end_gate.set()
            last = (await raw.recv()).end_txn_response
            assert last is not None and last.request_id == 1 and last.error is None

    run(scenario())


def test_server_pings_and_closes_connections_that_stay_silent() -> None:
    async def scenario() -> None:
        async with serving(FakeApi(), ping_interval=0.1) as server:
            raw = await RawClient.open(server)
            await raw.handshake()
            started = time.monotonic()
            received = await raw.recv_until_closed(timeout=2.0)
            await raw.close()
            assert CommandType.PING in [c.type for c in received]
            assert 0.15 <= time.monotonic() - started < 1.5

    run(scenario())


def test_a_peer_that_trickles_bytes_without_connect_is_closed_at_the_first_keepalive_check() -> None:
    """As Pulsar's handler: the handshake must be done by the first keep-alive check; bytes that never
    make a CONNECT do not keep the connection (and its descriptor) alive."""

    async def scenario() -> None:
        async with serving(FakeApi(), ping_interval=0.2) as server:
            raw = await RawClient.open(server)
            await raw.send_raw(struct.pack(">I", 10_000))  # a frame whose body never comes in full
            started = time.monotonic()
            closed = False
            while time.monotonic() - started < 3.0:
                try:
                    await raw.send_raw(b"\x00")
                except ConnectionError:
                    closed = True
                    break
                try:
                    async with asyncio.timeout(0.05):
                        if not await raw.reader.read(1):
                            closed = True
                            break
                except TimeoutError:
                    pass
                except ConnectionError:
                    closed = True
                    break
            await raw.close()
            assert closed and time.monotonic() - started < 1.5

    run(scenario())


def test_an_error_answer_quotes_a_bounded_part_of_the_requested_topic() -> None:
    async def scenario() -> None:
        async with serving(FakeApi()) as server, connected(server) as raw:
            await raw.send(CommandLookupTopic(topic="t" * 100_000, request_id=1))
            answer = (await raw.recv()).lookup_topic_response
            assert answer is not None and answer.error == ServerError.TopicNotFound
            assert len(answer.message) < 1000 and "100000 characters" in answer.message

    run(scenario())


def test_a_client_that_does_not_read_its_answers_is_not_read_either(monkeypatch: pytest.MonkeyPatch) -> None:
    """Back-pressure: once the answers wait for the client to read them, the server stops reading its
    requests, so a client sending without reading fills socket buffers, not the server's memory.

    What is checked is the server's own buffer of answers, sampled while the client floods it, and
    that the flood stalls. How much the client gets to send before the stall is the kernel's business:
    the server's receive buffer autotunes up to ``tcp_rmem``'s maximum (32 MB here), so a bound on
    the bytes sent failed on a loaded machine (session 22: 5.3 MB against a 4 MB bound)."""
    import pulsar_txn.server as server_module

    monkeypatch.setattr(server_module, "_WRITE_HIGH_WATER", 4096)
    lookup = encode_command(wrap(CommandLookupTopic(topic="u" * 300, request_id=7)))
    budget = 256 << 20  # far beyond what the kernel buffers of both ends can hold

    def flood(port: int) -> int:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
            sock.connect(("127.0.0.1", port))
            sock.sendall(encode_command(wrap(CommandConnect(client_version="flood", protocol_version=20))))
            sock.settimeout(2.0)
            chunk = lookup * 100
            sent = 0
            try:
                while sent < budget:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except TimeoutError:
                pass
            return sent

    async def scenario() -> tuple[int, int]:
        async with serving(FakeApi()) as server:
            flooding = asyncio.ensure_future(asyncio.to_thread(flood, server.port))
            most = 0
            while not flooding.done():
                for conn in list(server._connections):
                    most = max(most, conn._writer.transport.get_write_buffer_size())
                await asyncio.sleep(0.005)
            return await flooding, most

    sent, most_buffered = run(scenario())
    assert sent < budget, "the server read every request although no answer was read"
    # Answers of the requests in hand (at most _MAX_IN_FLIGHT) beyond the high-water mark; without
    # back-pressure this grows with the flood (tens of MB).
    assert most_buffered < 1 << 20, most_buffered


def test_stop_closes_connections_and_cancels_requests_in_flight() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.end_gate = asyncio.Event()
        txn = await api.new_txn(0, 0)
        server = CoordinatorServer(api)
        await server.start()
        raw = await RawClient.open(server)
        await raw.handshake()
        await raw.send(
            CommandEndTxn(request_id=1, txnid_least_bits=txn.least_bits, txn_action=TxnAction.COMMIT)
        )
        await asyncio.sleep(0.05)
        await server.stop()
        assert await raw.recv_until_closed() == []
        await raw.close()
        assert api.status[txn] == "OPEN"

    run(scenario())


# -- TcClient ---------------------------------------------------------------------------------------


def test_client_discovers_tcs_and_runs_a_transaction() -> None:
    async def scenario() -> None:
        api = FakeApi(num_tcs=3, owned=(0, 1, 2))
        async with serving(api) as server, tc_client(server.url) as client:
            await client.connect()
            assert client.num_tcs == 3
            txns = [await client.new_txn(1500) for _ in range(4)]
            assert [t.tc_id for t in txns] == [0, 1, 2, 0]  # round-robin
            assert api.new_txn_calls[0] == (0, 1500)  # milliseconds travel unchanged
            txn = txns[1]
            await client.add_partitions(txn, ["a-partition-0"])
            await client.add_subscriptions(txn, [("a", "sub")])
            await client.end_txn(txn, TxnAction.COMMIT)
            assert api.status[txn] == "COMMIT"
            with pytest.raises(InvalidTxnStatusError):
                await client.end_txn(txn, TxnAction.ABORT)
            with pytest.raises(TransactionNotFound):
                await client.end_txn(TxnID(0, 12345), TxnAction.ABORT)
            assert sorted(api.check_serving_calls) == [0, 1, 2]  # one TC connect per TC

    run(scenario())


def test_client_times_out_when_the_coordinator_does_not_answer() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.end_gate = asyncio.Event()
        async with serving(api) as server, tc_client(server.url, operation_timeout=0.3, num_tcs=2) as client:
            txn = await client.new_txn(0)
            started = time.monotonic()
            with pytest.raises(Timeout):
                await client.end_txn(txn, TxnAction.COMMIT)
            assert time.monotonic() - started < 1.0

    run(scenario())


def test_client_retries_service_not_ready_then_succeeds() -> None:
    async def scenario() -> None:
        api = FakeApi()
        async with serving(api) as server, tc_client(server.url, num_tcs=2) as client:
            api.fail_next = [ServiceNotReady("warming up"), ServiceNotReady("still warming up")]
            txn = await client.new_txn(0, tc_id=1)
            assert txn.tc_id == 1
            assert len(api.new_txn_calls) == 3

    run(scenario())


def test_client_gives_up_with_timeout_naming_the_last_retriable_error() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.recovering.add(0)
        async with serving(api) as server, tc_client(server.url, num_tcs=2, operation_timeout=0.4) as client:
            with pytest.raises(Timeout, match="ServiceNotReady"):
                await client.new_txn(0, tc_id=0)

    run(scenario())


def test_client_follows_a_lookup_redirect_to_the_owner() -> None:
    async def scenario() -> None:
        front_api, owner_api = FakeApi(num_tcs=1, owned=()), FakeApi(num_tcs=1, owned=(0,))
        async with serving(front_api) as front, serving(owner_api) as owner:
            front_api.owners[0] = owner.url
            async with tc_client(front.url) as client:
                txn = await client.new_txn(0)
                await client.end_txn(txn, TxnAction.ABORT)
            assert owner_api.status[txn] == "ABORT"
            assert front_api.new_txn_calls == []

    run(scenario())


def test_client_finds_the_new_owner_after_the_tc_moves() -> None:
    async def scenario() -> None:
        first, second = FakeApi(num_tcs=1, owned=(0,)), FakeApi(num_tcs=1, owned=())
        second.status = first.status  # the transaction log, shared
        async with serving(first) as first_server, serving(second) as second_server:
            async with tc_client(first_server.url) as client:
                txn = await client.new_txn(0)
                first.owned.clear()
                first.owners[0] = second_server.url
                second.owned.add(0)
                await client.end_txn(txn, TxnAction.COMMIT)
            assert first.status[txn] == "COMMIT"
            assert second.check_serving_calls == [0]  # the commit went to the new owner

    run(scenario())


def test_client_reconnects_after_the_connection_drops() -> None:
    async def scenario() -> None:
        api = FakeApi()
        server = CoordinatorServer(api)
        await server.start()
        port = server.port
        async with tc_client(server.url, num_tcs=2) as client:
            txn = await client.new_txn(0, tc_id=0)
            await server.stop()
            server = CoordinatorServer(api, port=port)
            await server.start()
            try:
                await client.end_txn(txn, TxnAction.COMMIT)
            finally:
                await server.stop()
        assert api.status[txn] == "COMMIT"

    run(scenario())


def test_client_answers_server_pings_so_its_connection_survives() -> None:
    async def scenario() -> None:
        api = FakeApi()
        # Intervals long enough for a loaded machine (CI with other work) to answer each ping in time
        # and to finish the handshake within the first interval (0.25 s was not, once, under load).
        async with serving(api, ping_interval=0.5) as server, tc_client(server.url, num_tcs=2) as client:
            await client.new_txn(0, tc_id=0)
            await asyncio.sleep(2.5)  # several ping intervals with no requests
            await client.new_txn(0, tc_id=0)
            assert api.check_serving_calls == [0]  # one TC connect: the connection was kept

    run(scenario())


def test_client_reports_an_unknown_tc_as_coordinator_not_found() -> None:
    async def scenario() -> None:
        async with serving(FakeApi(num_tcs=2)) as server, tc_client(server.url, num_tcs=5) as client:
            with pytest.raises(TransactionCoordinatorNotFoundError, match="TC 4 does not exist"):
                await client.new_txn(0, tc_id=4)

    run(scenario())


@contextmanager
def server_in_thread(api: FakeApi) -> Iterator[CoordinatorServer]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = CoordinatorServer(api)
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_sync_client_runs_a_transaction_from_blocking_code() -> None:
    api = FakeApi()
    with server_in_thread(api) as server, SyncTcClient(server.url, operation_timeout=5) as client:
        assert client.num_tcs == 2
        txn = client.new_txn(10_000)
        client.add_partitions(txn, ["t"])
        client.add_subscriptions(txn, [("t", "s")])
        client.end_txn(txn, TxnAction.ABORT)
        with pytest.raises(TransactionNotFound):
            client.end_txn(TxnID(1, 999), TxnAction.ABORT)
    assert api.status[txn] == "ABORT"
    assert api.new_txn_calls == [(0, 10_000)]


def test_a_write_that_stalls_part_way_drops_the_connection_so_later_requests_do_not_go_astray() -> None:
    """Half a frame may be on the wire after a write timed out: the server would read the next
    request's bytes as its rest. The connection must close (its callers then reconnect)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    release = threading.Event()

    def stalling_server() -> None:
        conn, _ = listener.accept()
        with conn:
            decoder = FrameDecoder(8 << 20)
            while not decoder.feed(conn.recv(65536)):
                pass
            conn.sendall(encode_command(wrap(CommandConnected(server_version="fake", protocol_version=20))))
            release.wait(10)  # never reads the big request in time

    server = threading.Thread(target=stalling_server, daemon=True)
    server.start()

    async def scenario() -> None:
        conn = await TcConnection.open("127.0.0.1", port, "pulsar://stall", None, 0.5, 8 << 20)
        big = add_partitions_call(TxnID(0, 1), ["p" * 1000] * 4000)  # ~4 MB: more than the buffers hold

        def send_big() -> BaseException | None:
            rid = conn.next_request_id()
            fut = conn.request_threadsafe(big.build(rid), big.response_type, rid, time.monotonic() + 10)
            return fut.exception(5)

        failure = await asyncio.to_thread(send_big)
        assert isinstance(failure, ConnectionClosed)
        assert conn.closed  # dropped, not left "ready" with half a frame on the stream

    try:
        run(scenario())
    finally:
        release.set()
        server.join(5)
        listener.close()


def test_failed_authentications_are_counted_and_logged_once_per_hundred(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer that connects with a wrong token in a loop must not flood the log (CLI review)."""
    caplog.set_level(logging.WARNING, logger="pulsar_txn.server")
    bad = CommandConnect(client_version="c", protocol_version=20, auth_method_name="token", auth_data=b"x")

    async def scenario() -> int:
        async with serving(FakeApi(), auth_token=TOKEN) as server:
            for _ in range(150):
                raw = await RawClient.open(server)
                await raw.send(bad)
                await raw.recv_until_closed()
                await raw.close()
            return server.failed_authentications

    assert run(scenario()) == 150
    assert len([r for r in caplog.records if "authentication failed" in r.getMessage()]) == 2
