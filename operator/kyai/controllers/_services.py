"""What every handler needs, built once at start-up and kept in kopf's memo."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import kopf

from kyai.controllers._kube import KubeClient
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings


@dataclass
class Services:
    """The operator's clients and settings."""

    kube: KubeClient
    settings: OperatorSettings
    metrics: RunMetrics
    _locks: dict[tuple[str, str, str], asyncio.Lock] = field(default_factory=dict)
    _slots: asyncio.Semaphore | None = None
    ready: set[tuple[str, str, str]] = field(default_factory=set)
    """Workloads and Snapshots last seen Ready (their becoming Ready wakes waiting runs)."""

    @contextlib.asynccontextmanager
    async def locked(self, kind: str, namespace: str, name: str) -> AsyncIterator[None]:
        """Serialise reconciles of one object (a Job event and a timer may coincide).

        At most ``settings.max_concurrent_reconciles`` reconciles run at once: with 1,000 runs
        created together, 1,000 reconciles sharing the API client in lock step would finish
        all at the end; bounded, they finish in order, each in a few round trips.
        """
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.max_concurrent_reconciles)
        lock = self._locks.setdefault((kind, namespace, name), asyncio.Lock())
        async with lock, self._slots:
            yield

    @contextlib.asynccontextmanager
    async def locked_if_idle(self, kind: str, namespace: str, name: str) -> AsyncIterator[bool]:
        """Like :meth:`locked`, but only when a slot and the object are free at once.

        Yields False (and holds nothing) otherwise: for the periodic resync, a safety net that
        must never queue ahead of the reconciles events ask for.
        """
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.max_concurrent_reconciles)
        lock = self._locks.setdefault((kind, namespace, name), asyncio.Lock())
        if self._slots.locked() or lock.locked():
            yield False
            return
        async with lock, self._slots:
            yield True

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Drop the lock of a deleted object."""
        self._locks.pop((kind, namespace, name), None)


def services(memo: kopf.Memo) -> Services:
    """The services kept in kopf's memo by the start-up handler."""
    value: Any = memo["services"]
    assert isinstance(value, Services)
    return value


def post_event(body: Any, *, type_: str, reason: str, message: str) -> None:
    """A Kubernetes Event about ``body`` (best effort: never fails a reconcile)."""
    with contextlib.suppress(Exception):
        kopf.event(body, type=type_, reason=reason, message=message)
