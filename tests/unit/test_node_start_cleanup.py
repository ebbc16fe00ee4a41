"""start_node: when a later part cannot start (here the admin endpoint: its port is taken), the parts
already started stop again; the coordinator's protocol port is not left listening."""

from __future__ import annotations

import asyncio
import socket

import pytest

from kafka_store import KafkaConfig
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.node import start_node


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_failed_admin_start_leaves_the_protocol_port_free() -> None:
    port = _free_port()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        config = CoordinatorConfig(
            host="127.0.0.1",
            port=port,
            admin_port=blocker.getsockname()[1],
            tb_service_enabled=False,
            ownership="static",
            static_tc_ids=(0,),
            num_tcs=1,
        )

        async def scenario() -> None:
            with pytest.raises(OSError):
                await start_node(KafkaConfig(bootstrap_servers="127.0.0.1:1"), config)

        asyncio.run(scenario())
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))
