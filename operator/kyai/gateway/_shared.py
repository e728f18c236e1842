"""One answer shared by every caller for a while: a single flight and a short cache.

:class:`SharedAnswer` calls its ``produce`` coroutine for one caller at a time; callers that
come while it runs wait for it and get its value, and so does every caller within ``ttl_s``
seconds of that value's arrival. An exception is not kept: the next caller (one waiting
included) produces again. Used by the gateway's ``GET /upstream/v1/models`` check, which is
on a port every pod may reach and must not let them hammer the judge.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedAnswer(Generic[T]):
    """``produce()``'s value, produced once at a time and reused for ``ttl_s`` seconds."""

    def __init__(
        self,
        produce: Callable[[], Awaitable[T]],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._produce = produce
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = asyncio.Lock()
        #: The last value and when it stops being reused (the clock's time).
        self._cached: tuple[T, float] | None = None
        #: How many times ``produce`` was called.
        self.produced = 0

    def _fresh(self) -> tuple[T] | None:
        cached = self._cached
        return (cached[0],) if cached is not None and self._clock() < cached[1] else None

    async def get(self) -> T:
        """The shared value: the cached one while fresh, else the one being produced."""
        fresh = self._fresh()
        if fresh is None:
            async with self._lock:
                fresh = self._fresh()  # produced while this caller waited
                if fresh is None:
                    self.produced += 1
                    value = await self._produce()
                    # From the value's arrival on: a slow producer's value is reused too.
                    self._cached = (value, self._clock() + self.ttl_s)
                    return value
        return fresh[0]
