"""The TC protocol server before authentication: an unCONNECTed peer gets nothing and can make us hold
little. After CONNECT the full frame size applies."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Coroutine
from contextlib import suppress
from typing import Any, TypeVar, cast

import pytest

from pulsar_txn.protocol import (
    BaseCommand,
    CommandConnect,
    CommandLookupTopic,
    CommandNewTxn,
    CommandType,
    FrameDecoder,
    encode_command,
    wrap,
)
from pulsar_txn.server import CoordinatorServer

T = TypeVar("T")
TOKEN = "tc-s3cret-token"


class NoApi:
    """Any call into the coordinator would be work done for the peer: these tests make none."""

    num_tcs = 1

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        raise AssertionError(f"the api was called: {name}")


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(20):
            return await coro

    return asyncio.run(bounded())


async def start(api: NoApi | None = None, **kwargs: Any) -> CoordinatorServer:
    server = CoordinatorServer(cast(Any, api or NoApi()), **kwargs)
    await server.start()
    return server


async def read_until_closed(reader: asyncio.StreamReader, timeout: float) -> list[BaseCommand]:
    decoder = FrameDecoder()
    received: list[BaseCommand] = []
    async with asyncio.timeout(timeout):
        while True:
            try:
                data = await reader.read(65536)
            except ConnectionResetError:
                return received
            if not data:
                return received
            received.extend(f.command for f in decoder.feed(data))


def test_a_peer_that_never_connects_cannot_make_the_server_buffer_a_max_size_frame(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_txn.server")

    async def scenario() -> None:
        server = await start()  # default max frame size: 5 MiB
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            # Announce a 4 MiB frame and start sending it, without ever saying CONNECT.
            writer.write(struct.pack(">I", 4 * 1024 * 1024))
            with suppress(ConnectionError):
                for _ in range(4):
                    writer.write(b"\x00" * (64 * 1024))
                    await writer.drain()
            # The server hangs up well before the frame is complete (not after the 60 s silence limit).
            assert await read_until_closed(reader, timeout=5) == []
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
        finally:
            await server.stop()

    run(scenario())
    assert "before CONNECT" in caplog.text


def test_a_connect_with_a_large_token_and_large_frames_after_it_still_work() -> None:
    big_token = "t" * (16 * 1024)  # a long JWT fits easily under the pre-CONNECT limit

    async def scenario() -> None:
        server = await start(auth_token=big_token)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            connect = CommandConnect(
                client_version="t",
                protocol_version=20,
                auth_method_name="token",
                auth_data=big_token.encode(),
            )
            # After CONNECT, a frame far above the pre-CONNECT limit is accepted (in the same write, too).
            lookup = CommandLookupTopic(topic="x" * (512 * 1024), request_id=7)
            writer.write(encode_command(wrap(connect)) + encode_command(wrap(lookup)))
            await writer.drain()
            decoder = FrameDecoder()
            got: list[BaseCommand] = []
            async with asyncio.timeout(5):
                while len(got) < 2:
                    data = await reader.read(65536)
                    assert data, "closed"
                    got.extend(f.command for f in decoder.feed(data))
            assert [c.type for c in got] == [CommandType.CONNECTED, CommandType.LOOKUP_RESPONSE]
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
        finally:
            await server.stop()

    run(scenario())


@pytest.mark.parametrize(
    "first",
    [
        wrap(CommandNewTxn(request_id=1)),
        wrap(CommandConnect(client_version="c", protocol_version=20)),
        wrap(
            CommandConnect(client_version="c", protocol_version=20, auth_method_name="token", auth_data=b"x")
        ),
    ],
    ids=["request-before-connect", "connect-without-token", "connect-with-wrong-token"],
)
def test_nothing_behind_an_unauthenticated_frame_reaches_the_coordinator(first: BaseCommand) -> None:
    api = NoApi()

    async def scenario() -> None:
        server = await start(api, auth_token=TOKEN)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            # Requests pipelined behind the refused frame, in the same write.
            writer.write(encode_command(first) + encode_command(wrap(CommandNewTxn(request_id=2))) * 3)
            await writer.drain()
            received = await read_until_closed(reader, timeout=5)
            assert [c.type for c in received] == [CommandType.ERROR]
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
        finally:
            await server.stop()

    run(scenario())
    assert api.calls == []
