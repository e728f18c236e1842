"""The one worker-side status reporter: what a worker Job writes into its EvaluationRun.

Every worker (``kyai generate``, ``kyai judge``, ``kyai run``, ``kyai lm-eval``) patches only
the fields of :class:`~kyai.api.WorkerStatus` of its own run (the operator owns phase,
conditions and plan; the worker's service account may patch nothing else). Progress is sent
at most every ``interval_s`` seconds from a background task, never blocking the work; the
final result must get through (five tries, backing off), or :class:`ReportError` is raised
and the worker fails, so that its Job retries.

Progress carries a ``message`` (``status.progress.message``; null when there is nothing to
say): what the worker is retrying (``candidate unreachable: connection refused; attempt 3 of
6, next in 4 s``), or, in phase ``preflight``, why its endpoint checks failed (the text leads
with the reason, ``JudgeUnreachable: ...``). A message appearing or going away is sent at
once; its changes in between, at the interval.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from kyai._clock import now
from kyai.api import Progress, WorkerStatus, status_patch
from kyai.constants import GROUP, KINDS, VERSION

log = logging.getLogger(__name__)

#: A merge patch of one run's status subresource (``{"status": {...}}``).
Patcher = Callable[[dict[str, Any]], None]

#: Tries of the final report before the worker gives up.
FINAL_ATTEMPTS = 5


class ReportError(RuntimeError):
    """The final result could not be written into the EvaluationRun's status."""


def run_status_patcher(namespace: str, name: str) -> Patcher:
    """A merge-patcher of one EvaluationRun's status subresource.

    In a pod, with its service account (unless ``$KUBECONFIG`` is set); elsewhere, with the
    kubeconfig as kubectl reads it.
    """
    from kubernetes import client, config

    from kyai._kubeconfig import load_kube_config

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config()
    else:
        load_kube_config()
    api = client.CustomObjectsApi()
    plural = KINDS["EvaluationRun"][0]

    def patch(body: dict[str, Any]) -> None:
        api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, name, body)

    return patch


def worker_patch(status: WorkerStatus) -> dict[str, Any]:
    """The merge patch of the fields set in ``status`` (camelCase, as the API spells them)."""
    return {"status": status_patch(status)}


#: The key of ``status.progress`` holding what the worker is retrying or why it stopped.
PROGRESS_MESSAGE = "message"


def progress_patch(progress: Progress, message: str | None) -> dict[str, Any]:
    """The merge patch of ``status.progress``: ``progress``'s fields set, and ``message``.

    ``message`` is always in the patch (null removes an earlier one).
    """
    body = worker_patch(WorkerStatus(progress=progress))
    body["status"]["progress"][PROGRESS_MESSAGE] = message
    return body


class WorkerStatusReporter:
    """Sends progress now and then, and the result once, to one EvaluationRun.

    An async context manager: entering starts the progress sender, leaving sends the latest
    progress not sent yet.
    """

    def __init__(self, patch: Patcher, *, interval_s: float = 5.0) -> None:
        self._patch = patch
        self._interval = interval_s
        self._latest: tuple[Progress, str | None] | None = None
        self._sent: tuple[Progress, str | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._leaving = asyncio.Event()

    async def __aenter__(self) -> WorkerStatusReporter:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # The sender also stops by itself: Python 3.11's asyncio.wait_for drops a
        # cancellation that arrives as the wake it waits for is set.
        self._leaving.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self._flush()

    def progress(
        self, progress: Progress, *, message: str | None = None, finished: bool = False
    ) -> None:
        """Keep ``progress`` and ``message`` for the next send.

        Sent at once when the phase has ``finished``, and when a message appears or goes away
        (a worker starting to retry, or done with it); else at the next interval.
        """
        sent_message = self._sent[1] if self._sent is not None else None
        self._latest = (progress, message)
        if finished or (message is None) != (sent_message is None):
            self._wake.set()

    async def _run(self) -> None:
        while not self._leaving.is_set():
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
            except TimeoutError:
                pass
            if self._leaving.is_set():
                return  # leaving sends what is left itself
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        latest = self._latest
        if latest is None or latest == self._sent:
            return
        progress, message = latest
        stamped = progress.model_copy(update={"updated_at": now()})
        stamped.model_fields_set.add("updated_at")
        try:
            await asyncio.to_thread(self._patch, progress_patch(stamped, message))
        except Exception as exc:  # progress is best effort: the work goes on
            log.warning("Could not report progress to the EvaluationRun: %s", exc)
        else:
            self._sent = latest

    async def final(self, status: WorkerStatus) -> None:
        """Report the result; raise :class:`ReportError` when it cannot be written."""
        await send_final(self._patch, status)


async def send_final(patch: Patcher, status: WorkerStatus) -> None:
    """Write ``status`` into the run, trying :data:`FINAL_ATTEMPTS` times (1, 2, 4, 8 s apart).

    Raises :class:`ReportError` naming the last error when no try got through.
    """
    body = worker_patch(status)
    last_error: Exception | None = None
    for attempt in range(FINAL_ATTEMPTS):
        try:
            await asyncio.to_thread(patch, body)
            return
        except Exception as exc:
            last_error = exc
            if attempt + 1 < FINAL_ATTEMPTS:
                await asyncio.sleep(min(2.0**attempt, 10.0))
    raise ReportError(
        f"Could not write the result into the EvaluationRun's status: {last_error}"
    ) from last_error
