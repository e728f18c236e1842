"""A fixed pool of workers over a list of items: at most ``concurrency`` in flight, in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def run_pool(
    items: Sequence[T], concurrency: int, handle: Callable[[T], Awaitable[None]]
) -> None:
    """Call ``handle`` on every item, dispatched in order, ``concurrency`` at a time.

    A fixed set of workers pulls the next item when it is free, so memory stays flat however
    many items there are (no task per item is created up front). The first exception a
    handler raises stops the pool: the other workers are cancelled and the exception is
    raised; cancelling the caller cancels every worker too.
    """
    # One iterator shared by the workers: taking the next item never awaits, so no two
    # workers can take the same one (and nothing is copied up front).
    pending = iter(items)

    async def worker() -> None:
        for item in pending:
            await handle(item)

    count = max(1, min(concurrency, len(items) or 1))
    tasks = [asyncio.create_task(worker()) for _ in range(count)]
    try:
        _done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
