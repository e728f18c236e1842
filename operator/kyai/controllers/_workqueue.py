"""A work queue of (namespace, name) keys, as controller-runtime's, for the kinds that own runs.

EvaluationSweeps and EvaluationSchedules are reconciled from their own watch events and
their children's, not from kopf's create/update handlers: a key asked for while its
reconcile runs is reconciled once more after it (any number of asks coalesce into one), never
twice at once; a reconcile's :class:`~kyai.controllers._result.Result` asks for the next look
(the earliest of several asks wins); a failed API call (or a bug) asks for another look
``api_retry_seconds`` later; a resync asks for every key the subclass picks every
``run_resync_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable

from kyai.controllers._kube import KubeError
from kyai.controllers._requeues import Requeues
from kyai.controllers._result import Result, after
from kyai.controllers._services import Services

log = logging.getLogger(__name__)

Key = tuple[str, str]


class WorkQueue(ABC):
    """Reconciles of one kind's objects, one at a time per object (see the module's docstring)."""

    #: What an object is called in log lines ("sweep", "schedule").
    what: str = "object"

    def __init__(self, svc: Services) -> None:
        self.svc = svc
        self._running: dict[Key, asyncio.Task[None]] = {}
        self._again: set[Key] = set()
        self._requeues: Requeues[Key] = Requeues(self._fire)
        self._resync: asyncio.Task[None] | None = None

    @abstractmethod
    async def reconcile(self, namespace: str, name: str) -> Result:
        """One reconcile of ``namespace/name``; when to look again."""

    @abstractmethod
    def exists(self, key: Key) -> bool:
        """Whether the object is still there (a due look at a deleted one is dropped)."""

    @abstractmethod
    def resync_keys(self) -> Iterable[Key]:
        """The objects a resync looks at."""

    def enqueue(self, namespace: str, name: str) -> None:
        """Reconcile the object now, or once more after the reconcile running."""
        key = (namespace, name)
        if key in self._running:
            self._again.add(key)
            return
        self._running[key] = asyncio.ensure_future(self._work(key))

    def requeue(self, namespace: str, name: str, result: Result) -> None:
        """Reconcile the object when ``result`` asks (the earliest of several asks wins)."""
        self._requeues.ask((namespace, name), result.requeue_after)

    def cancel(self, namespace: str, name: str) -> None:
        """Forget the object's pending look (it was deleted)."""
        self._requeues.cancel((namespace, name))

    def _fire(self, key: Key) -> None:
        if self.exists(key):
            self.enqueue(*key)

    async def _work(self, key: Key) -> None:
        try:
            while True:
                self._again.discard(key)
                self.requeue(*key, await self._guarded(key))
                if key not in self._again:
                    return
        finally:
            self._running.pop(key, None)

    async def _guarded(self, key: Key) -> Result:
        """One reconcile; a failed API call (or a bug) asks for another look a little later."""
        retry = self.svc.settings.api_retry_seconds
        try:
            return await self.reconcile(*key)
        except KubeError as error:
            log.warning("%s %s/%s: %s; looking at it again in %g s", self.what, *key, error, retry)
        except Exception:
            log.exception("%s %s/%s: reconcile failed; again in %g s", self.what, *key, retry)
        return after(retry)

    async def idle(self) -> None:
        """Wait until no reconcile runs (tests)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    def resync_once(self) -> int:
        """Ask for a reconcile of every object :meth:`resync_keys` picks; how many."""
        keys = list(self.resync_keys())
        for key in keys:
            self.enqueue(*key)
        return len(keys)

    async def resync_forever(self) -> None:
        """:meth:`resync_once` every ``run_resync_seconds``."""
        interval = self.svc.settings.run_resync_seconds
        while True:
            await asyncio.sleep(interval)
            self.resync_once()

    def start(self) -> None:
        """Start the resync loop (inside the running event loop)."""
        self._resync = asyncio.create_task(self.resync_forever(), name=f"kyai-{self.what}-resync")

    async def aclose(self) -> None:
        """Stop the resync loop, the pending looks and the reconciles running."""
        self._requeues.close()
        tasks = [*self._running.values(), *([self._resync] if self._resync else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
