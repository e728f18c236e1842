"""Per-namespace limits: requests per second (a token bucket) and requests in flight.

Each namespace has its own bucket and its own slots, so one namespace at its limit never
waits on another's. A request first takes a token from the bucket, then a slot:

* **Rate**: the bucket holds ``burst`` tokens and refills at ``requests_per_second``. With no
  token left, a request may reserve the next one and wait for it, as long as fewer than
  ``queue`` requests already wait and the wait is within ``queue_timeout_seconds``;
  otherwise it is refused with the time until a token is free.
* **Concurrency**: ``concurrency`` requests run at once; up to ``queue`` more wait, first
  come first served, at most ``queue_timeout_seconds``; the others are refused at once.

A refusal is :class:`LimitExceededError`: HTTP 429 with ``Retry-After`` (whole seconds, at
least 1): the time until a token for the rate; the namespace's recent upstream latency for
concurrency (an estimate of when a slot frees). Waiting is bounded, never an unbounded queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from kyai.gateway._settings import Limits

#: Retry-After is at most this many seconds.
MAX_RETRY_AFTER_S = 60


class LimitExceededError(Exception):
    """A namespace is over one of its limits: answer 429 with ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int, limit: str) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        #: Which limit: ``rate`` or ``concurrency``.
        self.limit = limit


def retry_after_seconds(seconds: float) -> int:
    """``Retry-After``'s whole seconds for a wait of ``seconds`` (1 to 60)."""
    return max(1, min(MAX_RETRY_AFTER_S, math.ceil(seconds)))


class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` per second; tokens may be reserved ahead."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, now: float, *, max_wait: float, max_reserved: int) -> float:
        """Take a token: the seconds to wait for it (0: now).

        Raises ValueError carrying the wait when it would exceed ``max_wait`` or more than
        ``max_reserved`` tokens are already reserved ahead.
        """
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        deficit = 1.0 - self.tokens
        wait = deficit / self.rate
        if wait > max_wait or deficit > max_reserved:
            raise ValueError(wait)
        self.tokens -= 1.0
        return wait


class NamespaceLimiter:
    """One namespace's bucket and slots."""

    def __init__(self, namespace: str, limits: Limits, clock: Callable[[], float]) -> None:
        self.namespace = namespace
        self.limits = limits
        self._clock = clock
        self.bucket = TokenBucket(limits.requests_per_second, limits.burst, clock())
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: Exponentially weighted mean of the upstream's latency (seconds).
        self.latency_s = 1.0

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        return len(self._waiters)

    async def _rate(self) -> float:
        limits = self.limits
        try:
            wait = self.bucket.take(
                self._clock(), max_wait=limits.queue_timeout_seconds, max_reserved=limits.queue
            )
        except ValueError as exc:
            seconds = float(exc.args[0])
            raise LimitExceededError(
                f"namespace {self.namespace} is over its judge rate of "
                f"{limits.requests_per_second:g} requests per second (burst {limits.burst}); "
                f"retry in {seconds:.2f} s",
                retry_after_seconds(seconds),
                "rate",
            ) from None
        if wait > 0:
            await asyncio.sleep(wait)
        return wait

    def _full(self) -> LimitExceededError:
        limits = self.limits
        return LimitExceededError(
            f"namespace {self.namespace} has {limits.concurrency} judge requests in flight "
            f"and {limits.queue} waiting, its limit; retry later",
            retry_after_seconds(self.latency_s),
            "concurrency",
        )

    async def _slot(self, timeout: float) -> None:
        if self.in_flight < self.limits.concurrency and not self.waiting:
            self.in_flight += 1
            return
        if self.waiting >= self.limits.queue or timeout <= 0:
            raise self._full()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed over as this request gave up: keep it on a timeout
                # (it may go on), give it back on a cancellation.
                if isinstance(exc, TimeoutError):
                    return
                self.release()
                raise
            waiter.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise self._full() from None
            raise

    def release(self) -> None:
        """Free a slot: hand it to the first waiter, if any."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on: in_flight stays
                return
        self.in_flight -= 1

    def observe(self, seconds: float) -> None:
        """Note an upstream latency (for Retry-After of concurrency refusals)."""
        self.latency_s += 0.2 * (seconds - self.latency_s)

    async def acquire(self) -> None:
        """Take a rate token and a slot (LimitExceededError); :meth:`release` the slot after."""
        started = self._clock()
        await self._rate()
        remaining = self.limits.queue_timeout_seconds - (self._clock() - started)
        await self._slot(remaining)


class Limiter:
    """The limiters of every namespace seen, created on first use."""

    def __init__(
        self, limits_for: Callable[[str], Limits], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._limits_for = limits_for
        self._clock = clock
        self._namespaces: dict[str, NamespaceLimiter] = {}

    def of(self, namespace: str) -> NamespaceLimiter:
        """The limiter of ``namespace``."""
        limiter = self._namespaces.get(namespace)
        if limiter is None:
            limiter = NamespaceLimiter(namespace, self._limits_for(namespace), self._clock)
            self._namespaces[namespace] = limiter
        return limiter

    def in_flight(self) -> dict[str, int]:
        """Requests in flight per namespace seen."""
        return {name: limiter.in_flight for name, limiter in self._namespaces.items()}

    @asynccontextmanager
    async def admit(self, namespace: str) -> AsyncIterator[NamespaceLimiter]:
        """Hold a slot of ``namespace`` for the duration of the block (LimitExceededError)."""
        limiter = self.of(namespace)
        await limiter.acquire()
        try:
            yield limiter
        finally:
            limiter.release()
