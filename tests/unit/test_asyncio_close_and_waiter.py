"""asyncio wrappers: a cancelled close still closes the client, and a receive error ends only its
own slice (found in review, session 35; each failed before its fix)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pulsar_txn.asyncio import AsyncClient, _Pool
from pulsar_txn.compat.asyncio import _Waiter
from pulsar_txn.errors import PersistenceError, PulsarTxnError


class _Closable:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_cancelled_close_still_closes_the_client_it_owns() -> None:
    """With the pool busy, ``wait_for(close(), 0.1)`` cancelled the queued close job, and a second
    close() returned at once: the client (its connections, an embedded broker) stayed open."""
    sync = _Closable()

    async def main() -> None:
        client = AsyncClient.__new__(AsyncClient)
        client._owns, client.sync, client._pool, client._closed = True, sync, _Pool(1), False  # type: ignore[assignment]
        busy = asyncio.ensure_future(client._pool.run(time.sleep, 0.3))  # another task's call
        await asyncio.sleep(0.05)
        try:
            await asyncio.wait_for(client.close(), 0.1)
        except TimeoutError:
            pass
        await busy
        await client.close()
        for _ in range(100):
            if sync.closed:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert sync.closed


def test_a_receive_error_ends_its_own_slice_only() -> None:
    """Every later receive re-raised the first error without reading again."""
    calls = [0]

    def next_message(_ms: int) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise PersistenceError("transient", retriable=True)
        return f"msg{calls[0]}"

    async def main() -> list[str]:
        waiter = _Waiter(next_message)
        out = []
        for _ in range(3):
            try:
                out.append(await waiter.next())
            except PulsarTxnError as exc:
                out.append(type(exc).__name__)
        return out

    assert asyncio.run(main()) == ["PersistenceError", "msg2", "msg3"]


def test_a_slice_left_by_a_cancelled_receive_that_fails_is_not_logged_as_never_retrieved() -> None:
    """Cancel a compat ``receive()``, then close the consumer: the slice left running ended in
    AlreadyClosed that nobody awaited, and asyncio logged "Task exception was never retrieved"
    (session 39's docs review)."""
    from pulsar_txn.errors import AlreadyClosed

    def next_message(_ms: int) -> Any:
        time.sleep(0.1)
        raise AlreadyClosed("consumer is closed")

    unretrieved: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx))
        waiter = _Waiter(next_message)
        receive = asyncio.ensure_future(waiter.next())
        await asyncio.sleep(0.02)
        receive.cancel()
        await asyncio.sleep(0.3)  # the slice ends with its error
        del waiter, receive
        import gc

        gc.collect()  # an unretrieved exception is reported when its future is collected

    asyncio.run(main())
    assert unretrieved == []
