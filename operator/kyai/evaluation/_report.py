"""Reporting to the EvaluationRun a worker Job serves: live progress, then the result.

Workers patch only ``status.progress`` and the result fields of their own EvaluationRun (the
operator owns ``phase`` and ``conditions``). Progress is sent at most every ``interval_s``
seconds from a background task, never blocking generation; the final result must get
through, or the worker fails (and its Job retries, resuming from the stored files).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from kyai._clock import now
from kyai.api import EvaluationRunStatus, status_patch
from kyai.api.evaluationrun import MAX_METRICS, JudgeResult, Progress
from kyai.constants import GROUP, KINDS, VERSION
from kyai.evaluation._progress import ProgressUpdate

log = logging.getLogger(__name__)

#: Per-question scores go into status only up to this many rows (etcd's object size limit).
MAX_STATUS_SCORES = 1000

Patcher = Callable[[dict[str, Any]], None]


class ReportError(RuntimeError):
    """The final result could not be written into the EvaluationRun's status."""


def kubernetes_patcher(namespace: str, name: str) -> Patcher:
    """A merge-patcher of one EvaluationRun's status subresource (in-cluster or kubeconfig)."""
    from kubernetes import client, config

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config()
    else:
        config.load_kube_config()
    api = client.CustomObjectsApi()
    plural = KINDS["EvaluationRun"][0]

    def patch(body: dict[str, Any]) -> None:
        api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, name, body)

    return patch


def progress_status(update: ProgressUpdate) -> dict[str, Any]:
    """The ``status.progress`` of an update."""
    progress = Progress(
        phase=update.phase,
        done=update.done,
        total=update.total,
        errors=update.errors,
        updated_at=now(),
    )
    return progress.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _judge_result(judge: Mapping[str, Any]) -> JudgeResult:
    return JudgeResult(
        name=judge["name"],
        avg_score=judge["avg_score"],
        comparison_key=judge["comparison_key"],
        error_count=judge["error_count"],
        judge_model=judge.get("judge_model"),
    )


# -- status.metrics: every judge's run-level metrics (issue 13) -------------------------------

_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]+")


def _metric_name(text: str) -> str:
    return _KEY_UNSAFE.sub("_", text).strip("_")[:100] or "metric"


def run_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """``status.metrics`` of a judged run, at most 64 entries.

    ``"<judge>/avg_score"`` and each judge's run metrics (IFEval's four accuracies, a Python
    grader's), keyed ``"<judge>/<metric>"``.
    """
    judges = summary.get("judges") or [
        {
            "name": summary.get("judge_name") or summary.get("judge_type") or "judge",
            "avg_score": summary.get("avg_score"),
            "metrics": summary.get("metrics"),
        }
    ]
    out: dict[str, float] = {}
    for judge in judges:
        name = _metric_name(str(judge.get("name") or "judge"))
        if isinstance(judge.get("avg_score"), int | float):
            out[f"{name}/avg_score"] = float(judge["avg_score"])
        for key, value in sorted((judge.get("metrics") or {}).items()):
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(f"{name}/{_metric_name(str(key))}", float(value))
    return dict(list(out.items())[:MAX_METRICS])


def result_status(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields a finished judge phase reports, through the API's status model."""
    status = EvaluationRunStatus(
        avg_score=summary["avg_score"],
        avg_latency_ms=summary["avg_latency_ms"],
        questions=summary["count"],
        errors=dict(summary["errors"]),
        error_count=summary["error_count"],
        comparison_key=summary["comparison_key"],
        judge_model=summary.get("judge_model"),
        dataset=summary.get("dataset"),
        dataset_version=summary.get("dataset_version"),
        dataset_sha256=summary.get("dataset_sha256"),
    )
    metrics = run_metrics(summary)
    if metrics:
        status.metrics = metrics
    scores = summary.get("scores") or []
    if len(scores) <= MAX_STATUS_SCORES:
        status.scores = list(scores)
    if summary.get("judges"):
        status.judges = [_judge_result(judge) for judge in summary["judges"]]
        status.agreement = {"pairs": list(summary.get("agreement") or [])}
    return status_patch(status)


class StatusReporter:
    """Sends progress now and then, and the result once, to one EvaluationRun."""

    def __init__(self, patch: Patcher, *, interval_s: float = 5.0) -> None:
        self._patch = patch
        self._interval = interval_s
        self._latest: ProgressUpdate | None = None
        self._sent: ProgressUpdate | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def __aenter__(self) -> StatusReporter:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self._flush()

    def listener(self, update: ProgressUpdate) -> None:
        """A progress listener: keeps the latest update for the next send."""
        self._latest = update
        if update.done >= update.total:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
            except TimeoutError:
                pass
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        update = self._latest
        if update is None or update == self._sent:
            return
        try:
            await asyncio.to_thread(self._patch, {"status": {"progress": progress_status(update)}})
        except Exception as exc:  # progress is best effort: the run goes on
            log.warning("Could not report progress to the EvaluationRun: %s", exc)
        else:
            self._sent = update

    async def final(self, summary: Mapping[str, Any]) -> None:
        """Report the result; raise :class:`ReportError` when it cannot be written."""
        body = {"status": result_status(summary)}
        last_error: Exception | None = None
        for attempt in range(5):
            try:
                await asyncio.to_thread(self._patch, body)
                return
            except Exception as exc:
                last_error = exc
                await asyncio.sleep(min(2.0**attempt, 10.0))
        raise ReportError(
            f"Could not write the result into the EvaluationRun's status: {last_error}"
        ) from last_error
