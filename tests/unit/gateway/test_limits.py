"""Per-namespace limits: the token bucket, the slots and their queue, namespace isolation."""

from __future__ import annotations

import asyncio

import pytest

from kyai.gateway import (
    GatewaySettings,
    Limiter,
    LimitExceededError,
    Limits,
    NamespaceLimiter,
    TokenBucket,
    retry_after_seconds,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limits(**values: float) -> Limits:
    base = {
        "concurrency": 2,
        "queue": 2,
        "queue_timeout_seconds": 1.0,
        "requests_per_second": 1000.0,
        "burst": 1000,
    }
    return Limits.model_validate({**base, **values})


def test_the_bucket_gives_its_burst_then_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=0.0)
    assert [bucket.take(0.0, max_wait=0, max_reserved=0) for _ in range(3)] == [0.0] * 3
    with pytest.raises(ValueError) as refused:
        bucket.take(0.0, max_wait=0, max_reserved=0)
    assert refused.value.args[0] == pytest.approx(0.5)  # one token every half second
    assert bucket.take(0.5, max_wait=0, max_reserved=0) == 0.0
    # Refilled up to the burst, never beyond it.
    for _ in range(3):
        bucket.take(100.0, max_wait=0, max_reserved=0)
    with pytest.raises(ValueError):
        bucket.take(100.0, max_wait=0, max_reserved=0)


def test_the_bucket_reserves_ahead_within_the_queue_and_the_wait() -> None:
    bucket = TokenBucket(rate=10.0, burst=1, now=0.0)
    assert bucket.take(0.0, max_wait=1.0, max_reserved=3) == 0.0
    waits = [bucket.take(0.0, max_wait=1.0, max_reserved=3) for _ in range(3)]
    assert waits == pytest.approx([0.1, 0.2, 0.3])
    with pytest.raises(ValueError):  # a fourth reservation: over the queue
        bucket.take(0.0, max_wait=1.0, max_reserved=3)
    slow = TokenBucket(rate=1.0, burst=1, now=0.0)
    slow.take(0.0, max_wait=0.5, max_reserved=9)
    with pytest.raises(ValueError):  # within the queue, over the wait
        slow.take(0.0, max_wait=0.5, max_reserved=9)


def test_retry_after_is_whole_seconds_between_1_and_60() -> None:
    assert [retry_after_seconds(s) for s in (0.0, 0.01, 1.0, 1.2, 59.5, 3600)] == [
        1, 1, 1, 2, 60, 60,
    ]  # fmt: skip


async def test_slots_queue_then_refuse_and_hand_over_in_order() -> None:
    limiter = NamespaceLimiter("team-a", limits(concurrency=2, queue=2), Clock())
    await limiter.acquire()
    await limiter.acquire()
    assert limiter.in_flight == 2
    order: list[int] = []

    async def waiter(number: int) -> None:
        await limiter.acquire()
        order.append(number)

    first = asyncio.create_task(waiter(1))
    second = asyncio.create_task(waiter(2))
    await asyncio.sleep(0)
    assert limiter.waiting == 2
    with pytest.raises(LimitExceededError) as refused:
        await limiter.acquire()
    assert refused.value.limit == "concurrency"
    assert "namespace team-a has 2 judge requests in flight and 2 waiting" in str(refused.value)
    limiter.release()
    await first
    limiter.release()
    await second
    assert order == [1, 2] and limiter.in_flight == 2 and limiter.waiting == 0
    limiter.release()
    limiter.release()
    assert limiter.in_flight == 0


async def test_a_waiter_gives_up_after_the_queue_timeout() -> None:
    limiter = NamespaceLimiter("team-a", limits(concurrency=1, queue_timeout_seconds=0.05), Clock())
    await limiter.acquire()
    with pytest.raises(LimitExceededError) as refused:
        await limiter.acquire()
    assert refused.value.retry_after >= 1
    assert limiter.waiting == 0 and limiter.in_flight == 1
    limiter.release()
    assert limiter.in_flight == 0


async def test_a_cancelled_waiter_leaves_its_place_and_no_slot_leaks() -> None:
    limiter = NamespaceLimiter("team-a", limits(concurrency=1), Clock())
    await limiter.acquire()
    task = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.waiting == 0
    limiter.release()
    assert limiter.in_flight == 0
    # Handed over, then cancelled before it ran: the slot goes back.
    await limiter.acquire()
    task = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    limiter.release()  # hands the slot to the waiter
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.in_flight == 0


async def test_the_rate_limit_refuses_with_the_time_to_the_next_token() -> None:
    clock = Clock()
    limiter = NamespaceLimiter("team-a", limits(requests_per_second=0.25, burst=1, queue=0), clock)
    await limiter.acquire()
    limiter.release()
    with pytest.raises(LimitExceededError) as refused:
        await limiter.acquire()
    assert refused.value.limit == "rate"
    assert refused.value.retry_after == 4
    assert "over its judge rate of 0.25 requests per second (burst 1)" in str(refused.value)
    clock.now += 4
    await limiter.acquire()


async def test_the_rate_limit_lets_a_few_wait_for_their_token() -> None:
    limiter = NamespaceLimiter(
        "team-a", limits(requests_per_second=50, burst=1, queue=2, concurrency=10), Clock()
    )
    # The clock does not move: waits are computed, then slept for real (0.02 s and 0.04 s).
    started = asyncio.get_running_loop().time()
    await asyncio.gather(limiter.acquire(), limiter.acquire(), limiter.acquire())
    assert asyncio.get_running_loop().time() - started >= 0.035
    with pytest.raises(LimitExceededError):
        await limiter.acquire()


async def test_namespaces_have_their_own_limits_and_overrides() -> None:
    settings = GatewaySettings(
        upstream_url="http://judge:8000",
        model="m",
        concurrency=1,
        queue=0,
        namespace_limits={"big": {"concurrency": 3}},  # type: ignore[dict-item]
    )
    limiter = Limiter(settings.limits_for)
    async with limiter.admit("team-a"):
        with pytest.raises(LimitExceededError):
            async with limiter.admit("team-a"):
                pass
        # Another namespace is untouched by team-a's full slots.
        async with limiter.admit("team-b"), limiter.admit("big"), limiter.admit("big"):
            assert limiter.in_flight() == {"team-a": 1, "team-b": 1, "big": 2}
    assert limiter.in_flight() == {"team-a": 0, "team-b": 0, "big": 0}
    assert limiter.of("big").limits.concurrency == 3
    assert limiter.of("team-a").limits.concurrency == 1


async def test_a_full_namespace_says_to_retry_after_its_recent_latency() -> None:
    limiter = NamespaceLimiter("team-a", limits(concurrency=1, queue=0), Clock())
    for _ in range(50):
        limiter.observe(7.6)
    assert limiter.latency_s == pytest.approx(7.6, abs=0.01)
    await limiter.acquire()
    with pytest.raises(LimitExceededError) as refused:
        await limiter.acquire()
    assert refused.value.retry_after == 8
