"""Listening sockets whose errors name the address (a bad ``--host`` said only "Name or service not
known")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[Any]]


async def start_server(handler: Handler, host: str, port: int, what: str) -> asyncio.Server:
    """``asyncio.start_server``; an ``OSError`` (host unknown, port taken) says what and where."""
    try:
        return await asyncio.start_server(handler, host, port)
    except OSError as exc:
        raise OSError(exc.errno, f"{what} cannot listen on {host}:{port}: {exc.strerror or exc}") from None
