"""Kubernetes Events about the operator's objects, posted in the background.

As client-go's EventRecorder: ``record`` never blocks nor fails a reconcile.

``kopf.event`` only works inside a kopf handler's own task (its event queue lives in a
context variable set per object): an event recorded from the run scheduler's resync, a
reconcile-again timer or the sweeps' work queue was lost without a word. This recorder posts
through the operator's own client from wherever it is called in the event loop.

Events of one object are posted in the order recorded (one of ``WORKERS`` queues per object,
chosen by its uid), different objects' concurrently. An event that cannot be posted is logged
(kind, name, reason; never its message, which may quote a server's answer) and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kyai.constants import MANAGER
from kyai.controllers._kube import KubeClient, resource_path

log = logging.getLogger(__name__)

#: The Event API's limit on a message (longer ones are cut in the middle, as kopf does).
MAX_MESSAGE_LENGTH = 1024
#: Concurrent posters (each object's events go through one of them, in order).
WORKERS = 4
#: Events waiting per poster beyond which new ones are dropped (and counted in the log).
BACKLOG = 10_000


def _cut(message: str) -> str:
    if len(message) <= MAX_MESSAGE_LENGTH:
        return message
    half = (MAX_MESSAGE_LENGTH - 3) // 2
    return f"{message[:half]}...{message[len(message) - (MAX_MESSAGE_LENGTH - 3 - half) :]}"


def event_body(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> dict[str, Any]:
    """The core/v1 Event about ``obj`` (as kopf and client-go write it)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    reference = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": namespace,
        "uid": meta.get("uid"),
    }
    now = datetime.now(UTC).isoformat()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"namespace": namespace, "generateName": f"{meta.get('name') or 'kyai'}."},
        "type": type_,
        "reason": reason,
        "message": _cut(message),
        "action": reason,
        "reportingComponent": MANAGER,
        "reportingInstance": MANAGER,
        "source": {"component": MANAGER},
        "involvedObject": {key: value for key, value in reference.items() if value},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class EventRecorder:
    """Records events now, posts them in the background; ``aclose`` posts what is left."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._queues: list[asyncio.Queue[dict[str, Any]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.dropped = 0

    def record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post an Event about ``obj`` soon (outside a running event loop: not at all)."""
        if not self._tasks:
            try:
                self._start()
            except RuntimeError:  # no running loop (a synchronous caller): nothing to post on
                log.debug("no event loop: the %s event %s is not posted", type_, reason)
                return
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        queue = self._queues[zlib.crc32(uid.encode()) % WORKERS]
        try:
            queue.put_nowait(event_body(obj, type_, reason, message))
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("dropped the %s event %s: %d events wait to be posted", type_, reason,
                        queue.qsize())  # fmt: skip

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._queues = [asyncio.Queue(maxsize=BACKLOG) for _ in range(WORKERS)]
        self._tasks = [
            loop.create_task(self._post(queue), name=f"kyai-events-{i}")
            for i, queue in enumerate(self._queues)
        ]

    async def _post(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        while True:
            event = await queue.get()
            try:
                path = resource_path("Event", event["metadata"]["namespace"])
                await self._kube.request("POST", path, body=event)
            except Exception as exc:  # best effort: the poster goes on with the next one
                involved = event["involvedObject"]
                log.warning(
                    "could not post the %s event %s about %s %s/%s: %s",
                    event["type"], event["reason"], involved.get("kind"),
                    involved.get("namespace"), involved.get("name"),
                    getattr(exc, "status", None) or type(exc).__name__,
                )  # fmt: skip
            finally:
                queue.task_done()

    async def aclose(self, timeout: float = 5.0) -> None:
        """Post the events still queued (for at most ``timeout`` s), then stop."""
        if self._queues:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(queue.join() for queue in self._queues)), timeout
                )
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
