"""The Retry-After of a full namespace follows its recent latency step by step (issue 36's
mutation pass)."""

from __future__ import annotations

import pytest

from kyai.gateway import LimitExceededError, Limits, NamespaceLimiter


async def test_each_latency_moves_the_mean_a_fifth_of_the_way() -> None:
    limits = Limits.model_validate(
        {"concurrency": 1, "queue": 0, "queue_timeout_seconds": 1.0,
         "requests_per_second": 1000.0, "burst": 1000}
    )  # fmt: skip
    limiter = NamespaceLimiter("team-a", limits, lambda: 1000.0)
    assert limiter.latency_s == 1.0
    limiter.observe(11.0)  # 1 + (11 - 1) / 5
    assert limiter.latency_s == pytest.approx(3.0)
    limiter.observe(3.0)
    assert limiter.latency_s == pytest.approx(3.0)
    await limiter.acquire()
    with pytest.raises(LimitExceededError) as refused:
        await limiter.acquire()
    assert refused.value.retry_after == 3
