"""Reconcile-again timers, one per object: the earliest time asked for wins.

A reconcile step returns when it wants to be looked at again (``Result.requeue_after``, as
controller-runtime's ``RequeueAfter``); the run scheduler and the sweep controller keep these
timers per object key and call back when one is due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

_K = TypeVar("_K", bound=Hashable)


class Requeues(Generic[_K]):
    """At most one pending timer per key; ``fire(key)`` runs on the loop when it is due."""

    def __init__(self, fire: Callable[[_K], None]) -> None:
        self._fire = fire
        self._timers: dict[_K, tuple[float, asyncio.TimerHandle]] = {}

    def ask(self, key: _K, after: float | None) -> None:
        """Fire ``key`` in ``after`` seconds, unless it is already due sooner (None: nothing)."""
        if after is None:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + after
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._timers[key] = (due, loop.call_at(due, self._due, key))

    def _due(self, key: _K) -> None:
        self._timers.pop(key, None)
        self._fire(key)

    def cancel(self, key: _K) -> None:
        """Forget ``key``'s timer, if any."""
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending[1].cancel()

    def close(self) -> None:
        """Cancel every timer."""
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
