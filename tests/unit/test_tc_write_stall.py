"""A coordinator that stops reading (its socket open, the kernel's send buffer full) holds a write for
at most ``_WRITE_STALL_S``: before, the connect timeout (10 s), during which the client's event loop
(every TC call of the client, also to healthy coordinators) was frozen, past the operation timeout."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from pulsar_txn.errors import PulsarTxnError
from tests.unit.test_protocol_server import FakeApi, run, serving, tc_client
from tests.unit.test_tc_client_keep_alive import FreezingOwner


def test_a_coordinator_that_stops_reading_holds_a_write_for_at_most_the_stall_limit() -> None:
    async def scenario() -> tuple[list[float], list[float]]:
        owner = FreezingOwner()
        url = await owner.start()
        loop = asyncio.get_running_loop()
        gaps: list[float] = []  # how late the client's event loop ran a 50 ms sleep, while calls fail

        async def ticker() -> None:
            while True:
                started = loop.time()
                await asyncio.sleep(0.05)
                gaps.append(loop.time() - started - 0.05)

        try:
            front_api = FakeApi(num_tcs=1, owned=())  # lookups name the owner
            front_api.owners[0] = url
            async with (
                serving(front_api) as front,
                tc_client(front.url, operation_timeout=2.0, keep_alive_interval=300) as client,
            ):
                txn = await client.new_txn(60_000, tc_id=0)  # answered; the owner freezes now
                owner.stop_reading()
                partitions = [f"persistent://public/default/t-{i:06d}-" + "x" * 200 for i in range(12_000)]
                watching = asyncio.create_task(ticker())
                took = []
                for _ in range(3):  # the kernel's buffers fill with the first; later writes make no progress
                    started = loop.time()
                    try:
                        await client.add_partitions(txn, partitions)  # ~3 MB, written on the loop
                    except PulsarTxnError:
                        pass
                    took.append(loop.time() - started)
                watching.cancel()
                return took, gaps
        finally:
            await owner.stop()

    took, gaps = run(scenario())
    assert max(took) < 2.0 + 1.5, took  # the operation timeout, not the 10 s connect timeout
    assert max(gaps) < 3.5, max(gaps)


def test_a_peer_reading_a_large_frame_slowly_is_not_given_up() -> None:
    """The stall limit bounds each wait for room, not the whole frame (a ``sendall`` timeout bounds
    the whole call): a frame that takes longer than it to be read, steadily, still goes through."""
    from types import SimpleNamespace

    from pulsar_txn import _tc_connection

    listener = socket.create_server(("127.0.0.1", 0))
    ours = socket.create_connection(listener.getsockname())
    peer, _ = listener.accept()
    listener.close()
    for s in (ours, peer):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    ours.settimeout(_tc_connection._WRITE_STALL_S)  # as TcConnection sets it
    frame = b"x" * (5 * 1024 * 1024)
    got = bytearray()

    def read_slowly() -> None:  # ~2.5-3 MB/s: the frame takes twice the stall limit
        while len(got) < len(frame):
            try:
                chunk = peer.recv(64 * 1024)
            except OSError:  # closed by the test (it failed)
                return
            if not chunk:
                return
            got.extend(chunk)
            time.sleep(0.025)

    reading = threading.Thread(target=read_slowly, daemon=True)
    reading.start()
    try:
        conn = SimpleNamespace(_wsock=ours, _write_timeout=30.0)
        started = time.monotonic()
        _tc_connection.TcConnection._write_all(conn, frame)  # type: ignore[arg-type]
        reading.join(30)
        assert len(got) == len(frame)
        assert time.monotonic() - started > _tc_connection._WRITE_STALL_S  # outlasted the limit
    finally:
        ours.close()
        peer.close()
