"""The TC protocol server before authentication: an unCONNECTed peer gets nothing and can make us hold
little. After CONNECT the full frame size applies."""

from __future__ import annotations

import logging
import struct
from contextlib import suppress
from typing import Any, cast

import pytest

from pulsar_txn.protocol import (
    BaseCommand,
    CommandConnect,
    CommandLookupTopic,
    CommandNewTxn,
    CommandType,
    encode_command,
    wrap,
)
from tests.unit.test_protocol_server import RawClient, run, serving

TOKEN = "tc-s3cret-token"


class NoApi:
    """Any call into the coordinator would be work done for the peer: these tests make none."""

    num_tcs = 1

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        raise AssertionError(f"the api was called: {name}")


def serving_nothing(api: NoApi | None = None, **kwargs: Any) -> Any:
    return serving(cast(Any, api or NoApi()), **kwargs)


def test_a_peer_that_never_connects_cannot_make_the_server_buffer_a_max_size_frame(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_txn.server")

    async def scenario() -> None:
        async with serving_nothing() as server:  # default max frame size: 1 MiB
            client = await RawClient.open(server)
            # Announce a 900 KiB frame and start sending it, without ever saying CONNECT.
            await client.send_raw(struct.pack(">I", 900 * 1024))
            with suppress(ConnectionError):
                for _ in range(4):
                    await client.send_raw(b"\x00" * (64 * 1024))
            # The server hangs up well before the frame is complete (not after the 60 s silence limit).
            assert await client.recv_until_closed(timeout=5) == []
            await client.close()

    run(scenario())
    assert "before CONNECT" in caplog.text


def test_a_connect_with_a_large_token_and_large_frames_after_it_still_work() -> None:
    big_token = "t" * (16 * 1024)  # a long JWT fits easily under the pre-CONNECT limit

    async def scenario() -> None:
        async with serving_nothing(auth_token=big_token) as server:
            client = await RawClient.open(server)
            connect = CommandConnect(
                client_version="t",
                protocol_version=20,
                auth_method_name="token",
                auth_data=big_token.encode(),
            )
            # After CONNECT, a frame far above the pre-CONNECT limit is accepted (in the same write, too).
            lookup = CommandLookupTopic(topic="x" * (512 * 1024), request_id=7)
            await client.send_raw(encode_command(wrap(connect)) + encode_command(wrap(lookup)))
            got = [await client.recv(timeout=5), await client.recv(timeout=5)]
            assert [c.type for c in got] == [CommandType.CONNECTED, CommandType.LOOKUP_RESPONSE]
            await client.close()

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
        async with serving_nothing(api, auth_token=TOKEN) as server:
            client = await RawClient.open(server)
            # Requests pipelined behind the refused frame, in the same write.
            await client.send_raw(
                encode_command(first) + encode_command(wrap(CommandNewTxn(request_id=2))) * 3
            )
            received = await client.recv_until_closed(timeout=5)
            assert [c.type for c in received] == [CommandType.ERROR]
            await client.close()

    run(scenario())
    assert api.calls == []
