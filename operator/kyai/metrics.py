"""Prometheus metrics of the operator, from its own registry (never the global one).

The per-run series are produced at scrape time from the runs the operator currently sees,
so the series of a deleted run disappear with it. Labels are bounded: one series per run
(and per error kind), never per question or request.

The operator's own series (``kyai_operator_*``): build info, reconciles per kind and
result, their errors and durations, and the standard ``process_*`` collector.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import ValidationError

from kyai import __version__
from kyai.api import EvaluationRunStatus

log = logging.getLogger(__name__)

#: Labels of every per-run series, in order.
RUN_LABELS: tuple[str, ...] = (
    "namespace",
    "run",
    "workload",
    "model",
    "framework",
    "dataset",
    "snapshot_version",
    "comparison_key",
)


@dataclass(frozen=True)
class RunView:
    """What the metrics need of one EvaluationRun."""

    labels: tuple[str, ...]
    phase: str
    avg_score: float | None
    avg_latency_ms: float | None
    questions: int | None
    errors: Mapping[str, int]
    duration_seconds: float | None
    #: status.metrics of a succeeded run (kyai_evaluation_metric).
    metrics: Mapping[str, float] = field(default_factory=dict)


def _parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _status(body: Mapping[str, Any]) -> EvaluationRunStatus:
    """The run's status through the API model (an unreadable one counts as empty)."""
    try:
        return EvaluationRunStatus.model_validate(body.get("status") or {})
    except ValidationError as exc:
        log.warning("Unreadable status of an EvaluationRun, metrics left out: %s", exc)
        return EvaluationRunStatus()


def run_view(body: Mapping[str, Any]) -> RunView:
    """Read an EvaluationRun object into a :class:`RunView`."""
    meta = body.get("metadata", {})
    spec = body.get("spec") or {}
    status = _status(body)
    started = _parse_time(status.started_at)
    completed = _parse_time(status.completed_at)
    labels = (
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str((spec.get("workloadRef") or {}).get("name", "")),
        status.model or "",
        status.framework or "",
        status.dataset or "",
        status.dataset_version or "",
        status.comparison_key or "",
    )
    succeeded = status.phase == "Succeeded"
    return RunView(
        labels=labels,
        phase=status.phase or "Pending",
        avg_score=status.avg_score if succeeded else None,
        avg_latency_ms=status.avg_latency_ms if succeeded else None,
        questions=status.questions,
        errors=dict(status.errors or {}),
        duration_seconds=(completed - started).total_seconds() if started and completed else None,
        metrics=dict(status.metrics or {}) if succeeded else {},
    )


# -- kyai_evaluation_metric: status.metrics (issue 13) ----------------------------------------


def split_metric_key(key: str) -> tuple[str, str, str]:
    """``"task/metric,filter"`` → (task, metric, filter); ``none`` when no filter is given."""
    task, _, rest = key.partition("/")
    metric, _, filt = rest.partition(",")
    return task, metric, filt or "none"


def metric_family(runs: list[RunView]) -> GaugeMetricFamily:
    """One series per run and status.metrics entry (at most 64 per run: bounded)."""
    family = GaugeMetricFamily(
        "kyai_evaluation_metric",
        "A named run-level metric of a succeeded run (lm-eval task metrics, graders' run "
        "metrics; -1 for a gated metric that is missing).",
        labels=(*RUN_LABELS, "task", "metric", "filter"),
    )
    for run in runs:
        for key, value in sorted(run.metrics.items()):
            family.add_metric((*run.labels, *split_metric_key(key)), float(value))
    return family


class RunMetrics(Collector):
    """The operator's metrics: kept runs in, Prometheus families out."""

    def __init__(self) -> None:
        #: Runs by (namespace, name): a view, or an unfinished run's object as last observed
        #: (read into a view at the next scrape; see :meth:`observe`).
        self._runs: dict[tuple[str, str], RunView | Mapping[str, Any]] = {}
        self._lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        ProcessCollector(registry=self.registry)
        self.reconciles = Counter(
            "kyai_operator_reconcile",
            "Reconciles of the operator by kind and result (success or error).",
            ("kind", "result"),
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            "kyai_operator_reconcile_errors",
            "Reconciles of the operator that raised, by kind.",
            ("kind",),
            registry=self.registry,
        )
        self.reconcile_duration = Histogram(
            "kyai_operator_reconcile_duration_seconds",
            "Wall time of one reconcile, by kind.",
            ("kind",),
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=self.registry,
        )

    @contextmanager
    def reconciling(self, kind: str) -> Iterator[None]:
        """Count and time one reconcile of ``kind``; an exception counts as an error."""
        started = time.perf_counter()
        try:
            yield
        except BaseException:
            self.reconciles.labels(kind=kind, result="error").inc()
            self.reconcile_errors.labels(kind=kind).inc()
            raise
        else:
            self.reconciles.labels(kind=kind, result="success").inc()
        finally:
            self.reconcile_duration.labels(kind=kind).observe(time.perf_counter() - started)

    def observe(self, body: Mapping[str, Any]) -> None:
        """Record the current state of a run.

        A finished run is read at once (it changes no more); an unfinished one at the next
        scrape, so that its many watch events cost one read a scrape, not one each (and only
        unfinished runs, which the operator's cache holds anyway, are kept as objects).
        """
        meta = body.get("metadata", {})
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        finished = (body.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        seen: RunView | Mapping[str, Any] = run_view(body) if finished else body
        with self._lock:
            self._runs[key] = seen

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted run's series."""
        with self._lock:
            self._runs.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        """The metric families, computed at scrape time."""
        with self._lock:
            for key, seen in list(self._runs.items()):
                if not isinstance(seen, RunView):
                    self._runs[key] = run_view(seen)
            runs = [view for view in self._runs.values() if isinstance(view, RunView)]
        score = GaugeMetricFamily(
            "kyai_evaluation_score",
            "KYAI average score of a succeeded run (0..1; errors count 0).",
            labels=RUN_LABELS,
        )
        build = GaugeMetricFamily(
            "kyai_operator_build_info",
            "The operator's version and Python (always 1).",
            labels=("version", "python_version"),
        )
        build.add_metric((__version__, platform.python_version()), 1.0)
        latency_seconds = GaugeMetricFamily(
            "kyai_evaluation_latency_seconds",
            "Mean latency of the candidate's successful answers, in seconds.",
            labels=RUN_LABELS,
        )
        latency = GaugeMetricFamily(
            "kyai_evaluation_latency_ms",
            "Deprecated: use kyai_evaluation_latency_seconds; removed in the next release. "
            "Mean latency of the candidate's successful answers, in milliseconds.",
            labels=RUN_LABELS,
        )
        questions = GaugeMetricFamily(
            "kyai_evaluation_questions", "Questions in the run's snapshot.", labels=RUN_LABELS
        )
        errors = CounterMetricFamily(
            "kyai_evaluation_errors",
            "Questions scored 0 because of an error, by kind.",
            labels=(*RUN_LABELS, "kind"),
        )
        duration = GaugeMetricFamily(
            "kyai_evaluation_duration_seconds",
            "Wall time of a finished run, from generation start to completion.",
            labels=RUN_LABELS,
        )
        phases = GaugeMetricFamily(
            "kyai_evaluation_runs",
            "EvaluationRuns by namespace and phase.",
            labels=("namespace", "phase"),
        )
        counts: dict[tuple[str, str], int] = {}
        for run in runs:
            counts[(run.labels[0], run.phase)] = counts.get((run.labels[0], run.phase), 0) + 1
            if run.avg_score is not None:
                score.add_metric(run.labels, float(run.avg_score))
            if run.avg_latency_ms is not None:
                latency.add_metric(run.labels, float(run.avg_latency_ms))
                latency_seconds.add_metric(run.labels, float(run.avg_latency_ms) / 1000.0)
            if run.questions is not None:
                questions.add_metric(run.labels, float(run.questions))
            for kind, count in sorted(run.errors.items()):
                errors.add_metric((*run.labels, kind), float(count))
            if run.duration_seconds is not None:
                duration.add_metric(run.labels, run.duration_seconds)
        for (namespace, phase), count in sorted(counts.items()):
            phases.add_metric((namespace, phase), float(count))
        yield from (build, score, latency_seconds, latency, questions, errors, duration, phases)
        yield metric_family(runs)

    def serve(self, port: int, *, address: str = "0.0.0.0") -> None:
        """Serve /metrics on ``port`` from a background thread.

        Raises OSError naming the address and port when it cannot listen (in use, no such
        address).
        """
        try:
            start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot listen on {address}:{port} (/metrics): {exc.strerror}"
            ) from exc
