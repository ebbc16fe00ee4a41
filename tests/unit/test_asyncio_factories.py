"""AsyncClient's factories check their arguments before anything starts, and what starts for a
caller that is cancelled meanwhile is stopped (found by a review of session 32; each test failed
before its fix). No broker: ``Client.embedded`` is replaced by a recorder."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pulsar_txn import ConfigError
from pulsar_txn.asyncio import AsyncClient
from pulsar_txn.client import Client


class _Started:
    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "4", None, True])
def test_embedded_refuses_bad_max_workers_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, bad: object
) -> None:
    started: list[_Started] = []
    monkeypatch.setattr(
        Client, "embedded", classmethod(lambda cls, **kw: started.append(_Started()) or started[-1])
    )
    with pytest.raises(ConfigError, match="max_workers"):
        asyncio.run(AsyncClient.embedded(max_workers=bad))  # type: ignore[arg-type]
    assert started == []


def test_an_embedded_client_started_for_a_cancelled_caller_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[_Started] = []

    def slow_embedded(cls: type[Client], **kwargs: object) -> _Started:
        time.sleep(0.3)  # the caller is cancelled meanwhile
        started.append(_Started())
        return started[-1]

    monkeypatch.setattr(Client, "embedded", classmethod(slow_embedded))

    async def main() -> None:
        task = asyncio.create_task(AsyncClient.embedded())
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)

    asyncio.run(main())
    (client,) = started
    assert client.closed.wait(5)


@pytest.mark.parametrize("bad", [0, "5", None, 1.5, True])
def test_create_producer_refuses_a_bad_max_pending_messages_with_a_config_error(bad: object) -> None:
    async def main() -> None:
        async with AsyncClient("pulsar://127.0.0.1:1", bootstrap_servers="127.0.0.1:1") as client:
            await client.create_producer("t", max_pending_messages=bad)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match="max_pending_messages"):
        asyncio.run(main())
