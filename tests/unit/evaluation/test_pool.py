"""The worker pool: bounded concurrency, row order, and stopping on the first error."""

from __future__ import annotations

import asyncio

import pytest

from kyai.evaluation._pool import run_pool


async def test_at_most_concurrency_in_flight_dispatched_in_order() -> None:
    started: list[int] = []
    in_flight = peak = 0

    async def handle(item: int) -> None:
        nonlocal in_flight, peak
        started.append(item)
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (item % 3))
        in_flight -= 1

    await run_pool(list(range(50)), 4, handle)
    assert started == list(range(50))
    assert peak == 4


async def test_first_error_cancels_the_other_workers() -> None:
    finished: list[int] = []
    cancelled: list[int] = []

    async def handle(item: int) -> None:
        if item == 3:
            raise LookupError("stop here")
        try:
            await asyncio.sleep(0.01 if item < 3 else 5)
        except asyncio.CancelledError:
            cancelled.append(item)
            raise
        finished.append(item)

    started = asyncio.get_running_loop().time()
    with pytest.raises(LookupError, match="stop here"):
        await run_pool(list(range(100)), 4, handle)
    assert asyncio.get_running_loop().time() - started < 2
    assert cancelled  # the slow ones did not run on
    assert len(finished) < 10
