"""Runs a coordinator service (and optionally its protocol server) on a private event loop thread,
for single-process applications, tests and ``pulsar-txn standalone``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from kafka_store import KafkaConfig
from pulsar_txn import _loops
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.endpoints import TxnEndpoints
from pulsar_txn.coordinator.service import CoordinatorService
from pulsar_txn.errors import Timeout

T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a daemon thread; ``run`` executes a coroutine there and waits for it."""

    def __init__(self, name: str = "pulsar-txn-loop") -> None:
        self.loop = _loops.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise Timeout(f"operation did not finish within {timeout}s") from None

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def _drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        self.loop.close()


class EmbeddedCoordinator:
    """A coordinator service plus (if ``serve``) its Pulsar-protocol server, in-process.

    ``with EmbeddedCoordinator(kafka, config) as ec: ec.url`` gives ``pulsar://127.0.0.1:PORT``.
    """

    def __init__(
        self,
        kafka: KafkaConfig,
        config: CoordinatorConfig | None = None,
        *,
        serve: bool = True,
        endpoints: TxnEndpoints | None = None,
    ) -> None:
        self.kafka = kafka
        self.config = config or CoordinatorConfig(port=0)
        self._serve = serve
        self._endpoints = endpoints
        self._loop: LoopThread | None = None
        self.service: CoordinatorService | None = None
        self.server: Any = None
        self.node: Any = None
        self.url: str | None = None
        self.admin_url: str | None = None

    def start(self, wait_ready: float | None = 30.0) -> EmbeddedCoordinator:
        self._loop = LoopThread("embedded-coordinator")
        try:
            self._loop.run(self._start(), timeout=60)
        except BaseException:
            # start_node stopped what it had started; the loop thread goes too (no stop() needed).
            self._loop.close()
            self._loop = None
            raise
        if wait_ready:
            self.wait_ready(wait_ready)
        return self

    async def _start(self) -> None:
        from pulsar_txn.node import start_node  # the node imports the server; keep this module light

        self.node = await start_node(self.kafka, self.config, serve=self._serve, endpoints=self._endpoints)
        self.service = self.node.service
        self.config = self.service.config  # with the cluster's TC count if it was left to the default
        self.server = self.node.server
        self.url = self.node.url if self._serve else None
        self.admin_url = self.node.admin_url

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until this instance serves the TCs it is meant to own (static) or any TC (group)."""
        assert self._loop is not None and self.service is not None
        if not self._loop.run(self.service.wait_ready(timeout), timeout=timeout + 5):
            raise Timeout(f"coordinator did not become ready within {timeout}s (owns {self.owned_tcs()})")

    def owned_tcs(self) -> list[int]:
        assert self._loop is not None and self.service is not None
        service = self.service
        return self._loop.run(_call(service.owned_tcs), timeout=10)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        """Run a coroutine on the coordinator's loop (tests and tools use this to call the service)."""
        assert self._loop is not None
        return self._loop.run(coro, timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start a coroutine on the coordinator's loop without waiting for it."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop.loop)

    def stats(self) -> dict[str, Any]:
        assert self._loop is not None and self.service is not None
        service = self.service
        return self._loop.run(_call(service.stats), timeout=10)

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            self._loop.run(self._stop(), timeout=30)
        finally:
            self._loop.close()
            self._loop = None

    async def _stop(self) -> None:
        if self.node is not None:
            await self.node.stop()

    def __enter__(self) -> EmbeddedCoordinator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


async def _call(fn: Any) -> Any:
    return fn()
