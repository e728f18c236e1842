"""What every handler needs, built once at start-up and kept in kopf's memo."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf

from kyai.controllers._kube import KubeClient
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings

#: Priorities of a reconcile waiting for a slot (lower first): a finished Job moves a started
#: run on before a burst of new runs is looked at; the rest in between.
URGENT, NORMAL, NEW = 0, 1, 2

#: How many parsed specs and plans :meth:`Services.parsed` keeps.
PARSED_CACHE_SIZE = 4096

_T = TypeVar("_T")

#: The kinds whose objects :class:`Services` keeps as last seen by a watch (runs read them).
CACHED_KINDS = ("EngineArgsSet", "Workload", "Snapshot", "EvaluationRun")


class Slots:
    """A semaphore whose waiters are served by priority, then in arrival order.

    With 1,000 runs created at once, a plain FIFO semaphore made the reconcile a finished
    Job asks for wait behind every create: "Job complete -> Judging" then took as long as
    the whole burst.
    """

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def locked(self) -> bool:
        """Whether an acquire would wait."""
        return self._free == 0 or any(not fut.done() for _, _, fut in self._waiters)

    async def acquire(self, priority: int = NORMAL) -> None:
        """Take a slot, after every waiter of a lower ``priority`` number."""
        if not self.locked():
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a slot while being cancelled: pass it on
            raise

    def release(self) -> None:
        """Give the slot to the first waiter still waiting, else free it."""
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1


def _newer(seen: Mapping[str, Any], known: Mapping[str, Any] | None) -> bool:
    """Whether ``seen`` is not older than ``known``.

    resourceVersions are compared as numbers when both are (an API server's are etcd
    revisions, the devcluster's too); otherwise the later one to arrive wins.
    """
    if known is None:
        return True
    new = str((seen.get("metadata") or {}).get("resourceVersion") or "")
    old = str((known.get("metadata") or {}).get("resourceVersion") or "")
    if new.isdigit() and old.isdigit():
        return int(new) >= int(old)
    return True


@dataclass
class Services:
    """The operator's clients and settings."""

    kube: KubeClient
    settings: OperatorSettings
    metrics: RunMetrics
    _locks: dict[tuple[str, str, str], asyncio.Lock] = field(default_factory=dict)
    _slots: Slots | None = None
    ready: set[tuple[str, str, str]] = field(default_factory=set)
    """Workloads and Snapshots last seen Ready (their becoming Ready wakes waiting runs)."""
    seen: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    """Workloads, Snapshots and unfinished runs as last seen by a watch or written (a cache,
    as an informer's: reconciles read it instead of a GET each; see :meth:`cached`)."""
    _parsed: OrderedDict[tuple[str, str], Any] = field(default_factory=OrderedDict)
    rejudging: set[tuple[str, str, str]] = field(default_factory=set)
    """The keys in :attr:`seen` of runs with ``spec.generationFrom`` (an index: a finished
    run looks for the runs that re-judge it among these, not among every unfinished run)."""

    @property
    def slots(self) -> Slots:
        """The reconcile slots (``settings.max_concurrent_reconciles`` of them)."""
        if self._slots is None:
            self._slots = Slots(self.settings.max_concurrent_reconciles)
        return self._slots

    @contextlib.asynccontextmanager
    async def locked(
        self, kind: str, namespace: str, name: str, *, priority: int = NORMAL
    ) -> AsyncIterator[None]:
        """Serialise reconciles of one object (a Job event and a resync may coincide).

        At most ``settings.max_concurrent_reconciles`` reconciles run at once: with 1,000 runs
        created together, 1,000 reconciles sharing the API client in lock step would finish
        all at the end; bounded, they finish in order, each in a few round trips. Waiters
        are served by ``priority`` (:data:`URGENT` first).
        """
        lock = self._locks.setdefault((kind, namespace, name), asyncio.Lock())
        async with lock:
            await self.slots.acquire(priority)
            try:
                yield
            finally:
                self.slots.release()

    @contextlib.asynccontextmanager
    async def locked_if_idle(self, kind: str, namespace: str, name: str) -> AsyncIterator[bool]:
        """Like :meth:`locked`, but only when a slot and the object are free at once.

        Yields False (and holds nothing) otherwise: for the periodic resync, a safety net that
        must never queue ahead of the reconciles events ask for.
        """
        lock = self._locks.setdefault((kind, namespace, name), asyncio.Lock())
        if self.slots.locked() or lock.locked():
            yield False
            return
        async with lock:
            await self.slots.acquire()
            try:
                yield True
            finally:
                self.slots.release()

    def parsed(self, uid: str | None, what: str, parse: Callable[[], _T]) -> _T:
        """``parse()``, remembered for (``uid``, ``what``): for what never changes once set.

        A started run's accepted spec and plan are fixed: read once, not at each of its
        reconciles. Bounded (least recently used out); without a uid, parsed every time.
        """
        if not uid:
            return parse()
        key = (uid, what)
        if key in self._parsed:
            self._parsed.move_to_end(key)
            found: _T = self._parsed[key]
            return found
        value = parse()
        self._parsed[key] = value
        while len(self._parsed) > PARSED_CACHE_SIZE:
            self._parsed.popitem(last=False)
        return value

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Drop the lock and the cached copy of a deleted object."""
        self._locks.pop((kind, namespace, name), None)
        self.seen.pop((kind, namespace, name), None)
        self.rejudging.discard((kind, namespace, name))

    def remember(self, body: Mapping[str, Any]) -> None:
        """Keep ``body`` (a watch event's object or a write's answer) unless newer is kept.

        A finished run is dropped instead (nothing reads it any more).
        """
        meta = body.get("metadata") or {}
        kind = str(body.get("kind") or "")
        if kind not in CACHED_KINDS or not meta.get("namespace") or not meta.get("name"):
            return
        key = (kind, str(meta["namespace"]), str(meta["name"]))
        if kind == "EvaluationRun" and (body.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            self.seen.pop(key, None)
            self.rejudging.discard(key)
            return
        if _newer(body, self.seen.get(key)):
            self.seen[key] = dict(body)
            if kind == "EvaluationRun" and (body.get("spec") or {}).get("generationFrom"):
                self.rejudging.add(key)

    async def cached(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as last seen, else as the API server has it (None: it does not exist).

        Only watch events and the operator's own writes fill the cache (a GET does not: what
        no watch follows could not be kept up to date).
        """
        found = self.seen.get((kind, namespace, name))
        if found is not None:
            return found
        return await self.kube.get(kind, namespace, name)


def services(memo: kopf.Memo) -> Services:
    """The services kept in kopf's memo by the start-up handler."""
    value: Any = memo["services"]
    assert isinstance(value, Services)
    return value


def post_event(body: Any, *, type_: str, reason: str, message: str) -> None:
    """A Kubernetes Event about ``body`` (best effort: never fails a reconcile)."""
    with contextlib.suppress(Exception):
        kopf.event(body, type=type_, reason=reason, message=message)
