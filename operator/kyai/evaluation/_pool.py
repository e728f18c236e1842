"""A fixed pool of workers over a list of items: at most ``concurrency`` in flight, in order."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

#: The youngest generation's collection threshold while a pool runs (CPython's default: 700).
YOUNG_THRESHOLD = 20_000

_quiet_depth = 0


@contextlib.contextmanager
def quiet_collector() -> Iterator[None]:
    """Make the cyclic garbage collector cheap while a phase runs.

    A phase keeps every record it stores (for the row-ordered rewrite) and creates none of
    the reference cycles the collector exists for, yet at the default thresholds the
    collector scans the young records and the whole heap (modules, the dataset) again and
    again: about a tenth of the client's CPU per row at concurrency 64-256. So, for the
    phase, the objects alive when it starts are frozen out of the scans (``gc.freeze``) and
    the youngest generation is collected every :data:`YOUNG_THRESHOLD` allocations instead of
    700; both are undone afterwards. A collector that is off (threshold 0) is left off.
    ``KYAI_GC_DEFAULTS=1`` keeps CPython's settings (to compare).
    """
    global _quiet_depth
    before = gc.get_threshold()
    if _quiet_depth or before[0] == 0 or os.environ.get("KYAI_GC_DEFAULTS") == "1":
        yield
        return
    _quiet_depth += 1
    gc.freeze()
    gc.set_threshold(max(before[0], YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
        _quiet_depth -= 1


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
    with quiet_collector():
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
