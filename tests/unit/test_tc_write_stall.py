"""A coordinator that stops reading (its socket open, the kernel's send buffer full) holds a write for
at most ``_WRITE_STALL_S``: before, the connect timeout (10 s), during which the client's event loop
(every TC call of the client, also to healthy coordinators) was frozen, past the operation timeout."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.protocol import (
    CommandAddPartitionToTxnResponse,
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
from pulsar_txn.tc_client import SyncTcClient


class _StallingCoordinator:
    """Answers the handshake, lookups, TC connect, NEW_TXN and ADD_PARTITION_TO_TXN; once ``stall``
    is set it stops reading and answering, and keeps the connection open."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"pulsar://127.0.0.1:{self._listener.getsockname()[1]}"
        self.stall = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder(64 * 1024 * 1024)
        conn.settimeout(0.1)
        seq = 0
        while not self.stall.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            for frame in decoder.feed(data):
                cmd = frame.command
                if self.stall.is_set():
                    return
                if cmd.type == CommandType.CONNECT:
                    out = wrap(CommandConnected(server_version="stalling", protocol_version=20))
                elif cmd.type == CommandType.LOOKUP:
                    out = wrap(
                        CommandLookupTopicResponse(
                            request_id=cmd.lookup_topic.request_id,
                            response=LookupType.Connect,
                            broker_service_url=self.url,
                            authoritative=True,
                        )
                    )
                elif cmd.type == CommandType.TC_CLIENT_CONNECT_REQUEST:
                    req = cmd.tc_client_connect_request.request_id
                    out = wrap(CommandTcClientConnectResponse(request_id=req))
                elif cmd.type == CommandType.NEW_TXN:
                    seq += 1
                    req = cmd.new_txn.request_id
                    out = wrap(CommandNewTxnResponse(request_id=req, txnid_most_bits=0, txnid_least_bits=seq))
                elif cmd.type == CommandType.ADD_PARTITION_TO_TXN:
                    req = cmd.add_partition_to_txn.request_id
                    out = wrap(CommandAddPartitionToTxnResponse(request_id=req))
                else:
                    continue
                conn.sendall(encode_command(out))

    def close(self) -> None:
        self._listener.close()
        for conn in self._conns:
            conn.close()


def test_a_coordinator_that_stops_reading_holds_a_write_for_at_most_the_stall_limit() -> None:
    server = _StallingCoordinator()
    client = SyncTcClient(server.url, operation_timeout=2.0, num_tcs=1, keep_alive_interval=300)
    stalls: list[float] = []
    stop = threading.Event()

    def ticker() -> None:  # how long the client's event loop takes to run a no-op, while calls fail
        while not stop.is_set():
            started = time.monotonic()
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), client._loop).result(30)
            stalls.append(time.monotonic() - started)
            time.sleep(0.05)

    try:
        client.connect()
        txn = client.new_txn(60_000)
        server.stall.set()
        partitions = [f"persistent://public/default/t-{i:06d}-" + "x" * 200 for i in range(12_000)]  # ~3 MB
        watching = threading.Thread(target=ticker, daemon=True)
        watching.start()
        took = []
        for _ in range(3):  # the kernel's buffers fill with the first; later writes make no progress
            started = time.monotonic()
            try:
                client.add_partitions(txn, partitions)
            except PulsarTxnError:
                pass
            took.append(time.monotonic() - started)
        stop.set()
        watching.join(30)
        assert max(took) < 2.0 + 1.5, took  # the operation timeout, not the 10 s connect timeout
        assert max(stalls) < 3.5, max(stalls)
    finally:
        stop.set()
        server.close()
        client.close()


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
