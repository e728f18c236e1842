"""Reporting to the EvaluationRun a worker Job serves: live progress, then the result.

The reporting itself is :mod:`kyai.worker_status` (shared with ``kyai lm-eval``); this module
reads the engine's progress updates and summary into the fields a worker may write
(:class:`~kyai.api.WorkerStatus`).
"""

from __future__ import annotations

import asyncio  # noqa: F401  (the final report's back-off sleeps are asyncio.sleep)
import re
from collections.abc import Mapping
from typing import Any

from kyai._clock import now
from kyai.api import (
    MAX_LISTED_SCORES,
    JudgeResult,
    Progress,
    ScoreInterval,
    ServerServing,
    ServingStatus,
    Subset,
    WorkerStatus,
    pack_scores,
    status_patch,
)
from kyai.api.evaluationrun import MAX_METRICS
from kyai.api.serving import DISTRIBUTIONS, STATISTICS
from kyai.evaluation._progress import ProgressUpdate
from kyai.worker_status import (
    PROGRESS_MESSAGE,
    Patcher,
    ReportError,
    WorkerStatusReporter,
    run_status_patcher,
    send_final,
)

__all__ = [
    "MAX_STATUS_SCORES",
    "Patcher",
    "ReportError",
    "StatusReporter",
    "kubernetes_patcher",
    "progress_status",
    "result_status",
    "run_metrics",
    "serving_status",
]

#: Per-question scores go into status.scores up to this many rows, above it packed into
#: status.scoresPacked (etcd's object size limit; :mod:`kyai.api.scores`).
MAX_STATUS_SCORES = MAX_LISTED_SCORES

#: A merge-patcher of one EvaluationRun's status subresource (in-cluster or kubeconfig).
kubernetes_patcher = run_status_patcher


def _progress(update: ProgressUpdate) -> Progress:
    return Progress(phase=update.phase, done=update.done, total=update.total, errors=update.errors)


def progress_status(update: ProgressUpdate) -> dict[str, Any]:
    """The ``status.progress`` of an update (its ``message``: what is being retried, or null)."""
    progress = _progress(update).model_copy(update={"updated_at": now()})
    progress.model_fields_set.add("updated_at")
    body = progress.model_dump(mode="json", by_alias=True, exclude_unset=True)
    body[PROGRESS_MESSAGE] = update.message
    return body


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


# -- status.serving and status.avgScoreInterval (issues 21, 22) -------------------------------


def _distributions(block: Mapping[str, Any]) -> dict[str, float]:
    """``{ttft_p50_ms: …}`` of a serving block's ``ttft_ms: {p50: …}`` distributions."""
    flat = {}
    for figure in DISTRIBUTIONS:
        values = block.get(f"{figure}_ms")
        if not isinstance(values, Mapping):
            continue
        for statistic in STATISTICS:
            value = values.get(statistic)
            if isinstance(value, int | float) and not isinstance(value, bool):
                flat[f"{figure}_{statistic}_ms"] = float(value)
    return flat


def _known(block: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: block[name] for name in names if block.get(name) is not None}


def serving_status(block: Mapping[str, Any] | None) -> ServingStatus | None:
    """``status.serving`` of ``summary.json``'s ``serving`` block (None without one)."""
    if not isinstance(block, Mapping):
        return None
    serving = ServingStatus.model_validate(
        {
            **_distributions(block),
            **_known(block, ("streamed", "requests", "failed", "concurrency", "wall_seconds",
                             "output_tokens", "output_tokens_per_second", "requests_per_second",
                             "gpus", "gpu_seconds")),
        }
    )  # fmt: skip
    server = block.get("server")
    if isinstance(server, Mapping):
        serving.server = ServerServing.model_validate(
            {
                **_distributions(server),
                **_known(server, ("url", "requests", "output_tokens", "output_tokens_per_second")),
            }
        )
    return serving


#: Decimals of the interval's ends in status: avgScore's (``kubectl get er -o wide`` shows
#: them as it shows SCORE). summary.json keeps them exact for the statistics.
INTERVAL_DECIMALS = 6


def _interval(summary: Mapping[str, Any]) -> ScoreInterval | None:
    stored = summary.get("avg_score_interval")
    if not isinstance(stored, Mapping):
        return None
    ends = {
        end: round(value, INTERVAL_DECIMALS)
        for end in ("low", "high")
        if isinstance(value := stored.get(end), int | float) and not isinstance(value, bool)
    }
    return ScoreInterval.model_validate({**stored, **ends})


def _scores(status: WorkerStatus, summary: Mapping[str, Any]) -> None:
    """Every question's score: listed up to 1,000 questions, packed above (if it fits)."""
    scores = [float(score) for score in summary.get("scores") or []]
    if len(scores) <= MAX_STATUS_SCORES:
        status.scores = scores
        return
    packed = pack_scores(scores, dataset_sha256=summary.get("dataset_sha256"))
    if packed is not None:
        status.scores_packed = packed


def result_model(summary: Mapping[str, Any]) -> WorkerStatus:
    """The status fields a finished judge phase reports."""
    status = WorkerStatus(
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
    if summary.get("subset"):
        status.subset = Subset.model_validate(summary["subset"])
    metrics = run_metrics(summary)
    if metrics:
        status.metrics = metrics
    _scores(status, summary)
    interval = _interval(summary)
    if interval is not None:
        status.avg_score_interval = interval
    serving = serving_status(summary.get("serving"))
    if serving is not None:
        status.serving = serving
    if summary.get("judges"):
        status.judges = [_judge_result(judge) for judge in summary["judges"]]
        status.agreement = {"pairs": list(summary.get("agreement") or [])}
    return status


def result_status(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The status patch a finished judge phase sends (camelCase, through the API's model)."""
    return status_patch(result_model(summary))


class StatusReporter:
    """Sends progress now and then, and the result once, to one EvaluationRun."""

    def __init__(self, patch: Patcher, *, interval_s: float = 5.0) -> None:
        self._patch = patch
        self._reporter = WorkerStatusReporter(patch, interval_s=interval_s)

    async def __aenter__(self) -> StatusReporter:
        await self._reporter.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._reporter.__aexit__(*exc_info)

    def listener(self, update: ProgressUpdate) -> None:
        """A progress listener: keeps the latest update for the next send."""
        self._reporter.progress(
            _progress(update), message=update.message, finished=update.done >= update.total
        )

    def checking(self, message: str | None) -> None:
        """The endpoint checks before the first request (phase ``preflight``).

        ``message``: a retry note, the checks' failure (leading with its reason:
        ``JudgeUnreachable: ...``), or None once they passed. The counts of an earlier phase
        are removed (null).
        """
        self._reporter.progress(
            Progress(phase="preflight", done=None, total=None, errors=None), message=message
        )

    async def final(self, summary: Mapping[str, Any]) -> None:
        """Report the result; raise :class:`ReportError` when it cannot be written."""
        await send_final(self._patch, result_model(summary))
