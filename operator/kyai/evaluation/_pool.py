"""A fixed pool of workers over a list of items: at most ``concurrency`` in flight, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def run_pool(
    items: Sequence[T], concurrency: int, handle: Callable[[T], Awaitable[None]]
) -> None:
    """Call ``handle`` on every item, dispatched in order, ``concurrency`` at a time.

    A fixed set of workers pulls the next item when it is free, so memory stays flat however
    many items there are (no task per item is created up front).
    """
    queue: asyncio.Queue[T] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)

    async def worker() -> None:
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await handle(item)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(items) or 1)))))
