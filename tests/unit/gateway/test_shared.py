"""One answer shared by every caller for a while (the admin port's check of the judge)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from kyai.gateway import GatewayMetrics, SharedAnswer
from kyai.gateway._proxy import Answer, error_response


class Producer:
    """Counts its calls; each waits for ``release`` (when set) and answers its number."""

    def __init__(self, clock: list[float] | None = None, takes: float = 0.0) -> None:
        self.calls = 0
        self.running = 0
        self.most_running = 0
        self.release: asyncio.Event | None = None
        #: How many of the next calls fail.
        self.failures = 0
        self.clock = clock
        self.takes = takes

    async def __call__(self) -> int:
        self.calls += 1
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if self.release is not None:
                await self.release.wait()
            if self.clock is not None:
                self.clock[0] += self.takes
            if self.failures:
                self.failures -= 1
                raise RuntimeError("no answer")
            return self.calls
        finally:
            self.running -= 1


def _shared(produce: Producer, clock: list[float], ttl_s: float = 5.0) -> SharedAnswer[int]:
    return SharedAnswer(produce, ttl_s, clock=lambda: clock[0])


async def test_concurrent_callers_share_one_production() -> None:
    clock = [100.0]
    produce = Producer()
    produce.release = asyncio.Event()
    shared = _shared(produce, clock)
    callers = [asyncio.create_task(shared.get()) for _ in range(5)]
    await asyncio.sleep(0)  # every caller is waiting now
    produce.release.set()
    assert await asyncio.gather(*callers) == [1] * 5
    assert (produce.calls, produce.most_running, shared.produced) == (1, 1, 1)


async def test_an_answer_is_reused_until_its_time_is_up() -> None:
    clock = [100.0]
    produce = Producer()
    shared = _shared(produce, clock, ttl_s=5.0)
    assert await shared.get() == 1
    clock[0] = 104.999
    assert await shared.get() == 1
    clock[0] = 105.0
    assert await shared.get() == 2
    assert produce.calls == 2


async def test_the_time_counts_from_the_answers_arrival() -> None:
    """A producer slower than the cache time still serves the callers after it."""
    clock = [100.0]
    produce = Producer(clock, takes=7.0)
    shared = _shared(produce, clock, ttl_s=5.0)
    assert await shared.get() == 1  # arrived at 107
    clock[0] = 111.0
    assert await shared.get() == 1
    assert produce.calls == 1


async def test_a_zero_cache_time_still_shares_a_production_between_concurrent_callers() -> None:
    clock = [100.0]
    produce = Producer()
    produce.release = asyncio.Event()
    shared = _shared(produce, clock, ttl_s=0.0)
    first = asyncio.create_task(shared.get())
    second = asyncio.create_task(shared.get())
    await asyncio.sleep(0)
    produce.release.set()
    # Without a cache time the second caller produces again, but only after the first.
    assert await asyncio.gather(first, second) == [1, 2]
    assert produce.most_running == 1


async def test_a_failure_is_not_kept_and_a_waiting_caller_produces_again() -> None:
    clock = [100.0]
    produce = Producer()
    produce.release = asyncio.Event()
    produce.failures = 1
    shared = _shared(produce, clock)
    first = asyncio.create_task(shared.get())
    second = asyncio.create_task(shared.get())
    await asyncio.sleep(0)
    produce.release.set()
    with pytest.raises(RuntimeError):
        await first
    assert await second == 2
    assert await shared.get() == 2


async def test_a_cancelled_caller_leaves_the_production_to_the_next() -> None:
    clock = [100.0]
    produce = Producer()
    produce.release = asyncio.Event()
    shared = _shared(produce, clock)
    first = asyncio.create_task(shared.get())
    second = asyncio.create_task(shared.get())
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    produce.release.set()
    assert await second == 2
    assert first.cancelled() and produce.most_running == 1


def test_a_kept_answer_is_sent_again_as_it_was() -> None:
    response = error_response(502, "UpstreamUnreachable", "down", {"Retry-After": "3"})
    answer = Answer.of(response)
    assert answer.status == 502
    assert answer.headers == {"Content-Type": "application/json", "Retry-After": "3"}
    for _ in range(2):
        again = answer.response()
        assert isinstance(again, web.Response) and again is not response
        assert (again.status, again.body) == (502, response.body)
        assert dict(again.headers) == dict(response.headers)


def test_the_checks_are_counted_by_status() -> None:
    metrics = GatewayMetrics()
    for code in (200, 200, 502):
        metrics.checked(code)
    text = metrics.exposition().decode()
    assert 'kyai_judge_gateway_upstream_checks_total{code="200"} 2.0' in text
    assert 'kyai_judge_gateway_upstream_checks_total{code="502"} 1.0' in text
    assert "# HELP kyai_judge_gateway_upstream_checks_total Answers of the admin port's" in text
