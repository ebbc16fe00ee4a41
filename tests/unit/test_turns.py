"""Turns: coroutines go in ticket order; a ticket given up before its turn is passed over."""

from __future__ import annotations

import asyncio

from pulsar_txn._turns import Turns


async def _go(turns: Turns, ticket: int, out: list[int], hold: float = 0.0) -> None:
    try:
        await turns.wait(ticket)
        await asyncio.sleep(hold)
        out.append(ticket)
    finally:
        turns.done(ticket)


def test_turns_run_in_ticket_order_and_pass_over_a_cancelled_one() -> None:
    async def main() -> list[int]:
        turns, out = Turns(), []
        tickets = [turns.take() for _ in range(5)]
        # started in reverse order; the first holds its turn a while
        tasks = {
            t: asyncio.create_task(_go(turns, t, out, 0.05 if t == 0 else 0.0)) for t in reversed(tickets)
        }
        await asyncio.sleep(0.01)
        tasks[2].cancel()  # waiting, its turn not come yet
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        return out

    assert asyncio.run(main()) == [0, 1, 3, 4]
