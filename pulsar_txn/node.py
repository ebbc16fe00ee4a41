"""A coordinator node: the service, its Pulsar-protocol server and the optional admin endpoint.

Used by ``pulsar-txn coordinator`` / ``standalone`` (foreground) and by ``EmbeddedCoordinator``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kafka_store import KafkaConfig, TopicAdmin
from pulsar_txn import _prometheus
from pulsar_txn.admin_http import AdminHttpServer, TextBody
from pulsar_txn.buffer.service import TransactionBufferService
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.endpoints import TxnEndpoints
from pulsar_txn.coordinator.service import CoordinatorService, adopt_tc_count
from pulsar_txn.server import CoordinatorServer


@dataclass
class Node:
    service: CoordinatorService
    server: CoordinatorServer | None
    admin: AdminHttpServer | None
    buffer: TransactionBufferService | None = None

    @property
    def url(self) -> str:
        return self.service.advertised_url

    @property
    def admin_url(self) -> str | None:
        return self.admin.url if self.admin is not None else None

    async def stop(self) -> None:
        if self.admin is not None:
            await self.admin.stop()
        if self.server is not None:
            await self.server.stop()
        await self.service.stop()
        if self.buffer is not None:
            await asyncio.to_thread(self.buffer.stop)


async def start_node(
    kafka: KafkaConfig,
    config: CoordinatorConfig,
    *,
    serve: bool = True,
    endpoints: TxnEndpoints | None = None,
) -> Node:
    # Before anything is made from it: the TB service must fold with the cluster's TC count too.
    config = await asyncio.to_thread(adopt_tc_count, TopicAdmin(kafka), config)
    service = CoordinatorService(kafka, config, endpoints=endpoints)
    server: CoordinatorServer | None = None
    admin: AdminHttpServer | None = None
    buffer = TransactionBufferService(kafka, config) if config.tb_service_enabled else None
    token = config.auth_token.get_secret_value() if config.auth_token else None
    service_started = False
    try:
        if serve:
            # Bind first so the advertised URL (with the real port) goes into ownership records.
            server = CoordinatorServer(
                service,
                host=config.host,
                port=config.port,
                auth_token=token,
                advertised_url=config.advertised_url,
                max_connections=config.max_connections,
                max_connections_per_ip=config.max_connections_per_ip,
            )
            await server.start()
            service.advertised_url = config.advertised_url or server.url
        if config.admin_port is not None:
            admin = _admin_server(config, config.admin_port, service, buffer, token)
            await admin.start()
        service_started = True  # set first: a start cancelled midway has joined the group already
        await service.start()
        if buffer is not None:
            await asyncio.to_thread(buffer.start)
    except BaseException:
        # Whatever failed (a port taken, Kafka unreachable, the TB service), nothing started stays
        # listening, and the coordinator service leaves its group (else it would hold TCs it serves
        # to nobody until its session timed out, or for good while the process lives).
        if server is not None:
            await server.stop()
        if admin is not None:
            await admin.stop()
        if service_started:
            await service.stop()
        if buffer is not None:
            await asyncio.to_thread(buffer.stop)
        raise
    return Node(service, server, admin, buffer)


def _admin_server(
    config: CoordinatorConfig,
    port: int,
    service: CoordinatorService,
    buffer: TransactionBufferService | None,
    token: str | None,
) -> AdminHttpServer:
    return AdminHttpServer(
        {
            "/admin/v2/transactions/coordinatorStats": service.stats,
            "/admin/v2/health": lambda: {"owned_tcs": service.owned_tcs()},
            "/admin/v2/transactions/transactionBufferStats": (
                buffer.stats if buffer is not None else lambda: {"partitions": {}}
            ),
            "/metrics": lambda: TextBody(
                _prometheus.render(service.stats(), buffer.stats() if buffer is not None else None),
                _prometheus.CONTENT_TYPE,
            ),
        },
        host=config.host,
        port=port,
        auth_token=token,
        path_tokens={"/metrics": config.metrics_token.get_secret_value()} if config.metrics_token else None,
    )
