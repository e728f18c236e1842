"""The worker pool: bounded concurrency, row order, and stopping on the first error."""

from __future__ import annotations

import asyncio
import gc

import pytest

from kyai.evaluation._pool import YOUNG_THRESHOLD, quiet_collector, run_pool


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


async def test_the_collector_is_quiet_while_a_pool_runs_and_restored_after() -> None:
    before = gc.get_threshold()
    seen: list[tuple[tuple[int, int, int], int]] = []

    async def handle(item: int) -> None:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        await asyncio.sleep(0)

    await run_pool(list(range(5)), 2, handle)
    assert all(threshold[0] == max(before[0], YOUNG_THRESHOLD) for threshold, _ in seen)
    assert all(threshold[1:] == before[1:] for threshold, _ in seen)
    assert all(frozen > 0 for _, frozen in seen)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_the_collector_is_restored_when_a_handler_fails() -> None:
    before = gc.get_threshold()

    async def handle(item: int) -> None:
        raise LookupError("boom")

    with pytest.raises(LookupError):
        await run_pool([1, 2, 3], 2, handle)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_nested_and_disabled_collectors_are_left_alone() -> None:
    before = gc.get_threshold()
    with quiet_collector():
        raised = gc.get_threshold()
        with quiet_collector():  # an inner phase changes nothing
            assert gc.get_threshold() == raised
        assert gc.get_threshold() == raised
    assert gc.get_threshold() == before
    gc.set_threshold(0, *before[1:])
    try:
        with quiet_collector():
            assert gc.get_threshold()[0] == 0  # a collector that is off stays off
            assert gc.get_freeze_count() == 0
    finally:
        gc.set_threshold(*before)
