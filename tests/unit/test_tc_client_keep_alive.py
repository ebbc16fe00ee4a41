"""TC client keep-alive (Pulsar's ClientCnx): a coordinator connection silent for the keep-alive
interval gets a PING; silent for twice that, it is given up, so a frozen or half-open owner does not
keep every call to its TCs timing out while lookups already name a healthy owner. A healthy idle
connection answers the PING and stays."""

from __future__ import annotations

import asyncio
import time

from pulsar_txn.errors import Timeout
from pulsar_txn.protocol import (
    CommandConnected,
    CommandLookupTopicResponse,
    CommandNewTxnResponse,
    CommandTcClientConnectResponse,
    CommandType,
    FrameDecoder,
    LookupType,
    encode_command,
    wrap,
)
from tests.unit.test_protocol_server import FakeApi, run, serving, tc_client


class FreezingOwner:
    """Answers the handshake, TC_CLIENT_CONNECT and the first NEW_TXN, then freezes: keeps the
    socket open and reads, but never answers again (as a SIGSTOPped coordinator does).
    ``stop_reading()``: it stops reading too, so the client's writes fill the socket buffers."""

    def __init__(self) -> None:
        self.frozen = False
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self._reading = asyncio.Event()
        self._reading.set()

    def stop_reading(self) -> None:
        self._reading.clear()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"pulsar://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder()
        while (await self._reading.wait()) and (data := await reader.read(65536)):
            for frame in decoder.feed(data):
                cmd = frame.command
                if self.frozen:
                    continue
                if cmd.type == CommandType.CONNECT:
                    out = wrap(CommandConnected(server_version="x", protocol_version=20))
                elif cmd.type == CommandType.TC_CLIENT_CONNECT_REQUEST:
                    out = wrap(
                        CommandTcClientConnectResponse(request_id=cmd.tc_client_connect_request.request_id)
                    )
                elif cmd.type == CommandType.LOOKUP:
                    out = wrap(
                        CommandLookupTopicResponse(
                            request_id=cmd.lookup_topic.request_id,
                            response=LookupType.Connect,
                            authoritative=True,
                        )
                    )
                elif cmd.type == CommandType.NEW_TXN:
                    out = wrap(CommandNewTxnResponse(request_id=cmd.new_txn.request_id, txnid_least_bits=1))
                    self.frozen = True
                else:
                    continue
                writer.write(encode_command(out))

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await self.server.wait_closed()


def test_a_frozen_owner_is_given_up_and_the_tc_reached_at_its_new_owner() -> None:
    async def scenario() -> tuple[int, int]:
        front_api = FakeApi(num_tcs=1, owned=())
        healthy_api = FakeApi(num_tcs=1, owned=(0,))
        zombie = FreezingOwner()
        zombie_url = await zombie.start()
        try:
            async with serving(front_api) as front, serving(healthy_api) as healthy:
                front_api.owners[0] = zombie_url
                async with tc_client(front.url, operation_timeout=0.5, keep_alive_interval=0.5) as client:
                    await client.new_txn(0, tc_id=0)  # served by the owner, which now freezes
                    front_api.owners[0] = healthy.url  # the TC moved: lookups name a healthy owner
                    timeouts = ok = 0
                    started = time.monotonic()
                    while time.monotonic() - started < 10 and not ok:
                        try:
                            await client.new_txn(0, tc_id=0)
                            ok += 1
                        except Timeout:
                            timeouts += 1
                    return timeouts, ok
        finally:
            await zombie.stop()

    timeouts, ok = run(scenario())
    assert ok == 1 and timeouts <= 4


def test_an_idle_healthy_connection_answers_the_ping_and_stays() -> None:
    async def scenario() -> bool:
        api = FakeApi(num_tcs=1, owned=(0,))
        # Not shorter: a connection silent for two intervals is dropped, and a loaded machine (the
        # suite runs on 2 cores, 2 workers) stalled a ping's answer past 2 x 0.2 s.
        async with serving(api) as server, tc_client(server.url, keep_alive_interval=0.5) as client:
            await client.new_txn(0, tc_id=0)
            (conn,) = client._connections.values()
            await asyncio.sleep(2.6)  # several keep-alive intervals without a call
            await client.new_txn(0, tc_id=0)
            return not conn.closed and list(client._connections.values()) == [conn]

    assert run(scenario())
