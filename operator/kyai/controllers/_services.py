"""What every handler needs, built once at start-up and kept in kopf's memo."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf

from kyai.controllers._endpoints import EndpointChecks
from kyai.controllers._events import EventRecorder
from kyai.controllers._kube import KubeClient
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings

#: Priorities of a reconcile waiting for a slot (lower first): a finished Job moves a started
#: run on before a burst of new runs is looked at; the rest in between.
URGENT, NORMAL, NEW = 0, 1, 2

#: How many parsed specs and plans :meth:`Services.parsed` keeps.
PARSED_CACHE_SIZE = 4096

_T = TypeVar("_T")

#: A cached object's key: (kind, namespace, name).
Key = tuple[str, str, str]

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
        #: Waiters not handed a slot yet (the heap also holds cancelled ones until popped):
        #: counted, so that :meth:`locked` does not scan a backlog of thousands per call.
        self._waiting = 0

    def locked(self) -> bool:
        """Whether an acquire would wait."""
        return self._free == 0 or self._waiting > 0

    async def acquire(self, priority: int = NORMAL) -> None:
        """Take a slot, after every waiter of a lower ``priority`` number."""
        if not self.locked():
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        self._waiting += 1
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a slot while being cancelled: pass it on
            else:
                future.cancel()
                self._waiting -= 1  # never handed one: no longer waiting
            raise

    def release(self) -> None:
        """Give the slot to the first waiter still waiting, else free it."""
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                self._waiting -= 1
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


def _waiting(status: Mapping[str, Any]) -> bool:
    """Whether a run's status says it waits: Pending, or its Progressing condition False."""
    if status.get("phase") == "Pending":
        return True
    return any(
        condition.get("type") == "Progressing" and condition.get("status") == "False"
        for condition in status.get("conditions") or ()
        if isinstance(condition, Mapping)
    )


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
    finished: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """The uid of each run last seen finished, by key: a finished run is not kept in
    :attr:`seen`, and a copy of it that is not finished arriving later is stale (the watch
    behind the operator's own writes delivering the run's create event after it Succeeded);
    :meth:`remember` refuses it, so that nothing is cached or reconciled from it."""
    pending: set[tuple[str, str, str]] = field(default_factory=set)
    """The keys in :attr:`seen` of waiting runs: Pending, or held in their phase (their
    Progressing condition False: a run waiting for its baseline). An index: an object
    becoming ready looks for the runs waiting for it among these, not among every unfinished
    run."""
    _references_of: Callable[[Mapping[str, Any]], Iterable[Hashable]] | None = None
    _waits: dict[tuple[str, Hashable], set[Key]] = field(default_factory=dict)
    _waits_of: dict[Key, tuple[tuple[Any, Any], tuple[Hashable, ...]]] = field(default_factory=dict)
    endpoints: EndpointChecks = field(default_factory=EndpointChecks)
    """Checks of the endpoints runs call before their Jobs, shared between runs."""
    events: EventRecorder = field(init=False)
    """Kubernetes Events about the operator's objects, posted in the background."""

    def __post_init__(self) -> None:
        self.events = EventRecorder(self.kube)

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

    def index_pending(
        self, references_of: Callable[[Mapping[str, Any]], Iterable[Hashable]]
    ) -> None:
        """Index :attr:`pending` by what each waiting run waits for (``references_of`` a run).

        A second index beside :attr:`pending`: with 10,000 runs Pending (created with their
        Workloads, in one sync), each Workload turning Ready looked at every one of them
        (10,000 specs read per event); :meth:`waiting_on` finds the runs of one reference.
        A run is indexed when it becomes waiting, and again when its uid or generation
        changes (its spec, hence what it waits for).
        """
        self._references_of = references_of
        self._waits.clear()
        self._waits_of.clear()
        for key in self.pending:
            self._index(key, self.seen[key])

    def waiting_on(self, namespace: str, reference: Hashable) -> set[Key]:
        """The keys of the waiting runs of ``namespace`` that wait for ``reference``."""
        return set(self._waits.get((namespace, reference), ()))

    def _pend(self, key: Key, body: Mapping[str, Any]) -> None:
        self.pending.add(key)
        self._index(key, body)

    def _index(self, key: Key, body: Mapping[str, Any]) -> None:
        if self._references_of is None:
            return
        meta = body.get("metadata") or {}
        stamp = (meta.get("uid"), meta.get("generation"))
        known = self._waits_of.get(key)
        if known is not None and known[0] == stamp:
            return
        self._unindex(key)
        refs = tuple(self._references_of(body))
        self._waits_of[key] = (stamp, refs)
        for ref in refs:
            self._waits.setdefault((key[1], ref), set()).add(key)

    def _unpend(self, key: Key) -> None:
        self.pending.discard(key)
        self._unindex(key)

    def _unindex(self, key: Key) -> None:
        known = self._waits_of.pop(key, None)
        for ref in known[1] if known is not None else ():
            keys = self._waits.get((key[1], ref))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._waits[(key[1], ref)]

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Drop the lock and the cached copy of a deleted object."""
        self._locks.pop((kind, namespace, name), None)
        self.seen.pop((kind, namespace, name), None)
        self._unpend((kind, namespace, name))
        self.finished.pop((kind, namespace, name), None)

    def remember(self, body: Mapping[str, Any]) -> bool:
        """Keep ``body`` (a watch event's object or a write's answer) unless newer is known.

        Returns whether it is current (False: stale, act on nothing it says). A finished run
        is dropped instead (nothing reads it any more), its uid kept in :attr:`finished`: a
        later copy of that run saying it is not finished is stale.
        """
        meta = body.get("metadata") or {}
        kind = str(body.get("kind") or "")
        if kind not in CACHED_KINDS or not meta.get("namespace") or not meta.get("name"):
            return True
        key = (kind, str(meta["namespace"]), str(meta["name"]))
        if kind == "EvaluationRun":
            uid = str(meta.get("uid") or "")
            if (body.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                self.seen.pop(key, None)
                self._unpend(key)
                if uid:
                    self.finished[key] = uid
                return True
            if uid and self.finished.get(key) == uid:
                return False  # that run has finished: a finished run never goes back
        if not _newer(body, self.seen.get(key)):
            return False
        self.seen[key] = dict(body)
        if kind == "EvaluationRun" and _waiting(body.get("status") or {}):
            self._pend(key, body)
        else:
            self._unpend(key)
        return True

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
