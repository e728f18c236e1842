"""Prometheus metrics of the operator, from its own registry (never the global one).

The per-run series are produced at scrape time from the runs the operator currently sees,
so the series of a deleted run disappear with it. Labels are bounded: one series per run
(and per error kind), never per question or request.

The serving distributions (TTFT, TPOT, ITL, E2E; the client's and, beside them, the engine's)
are summaries, one per run: its quantiles, and ``_count``/``_sum`` only where the status
counts the observations (E2E). The exposition passes ``promtool check metrics``
(tests/unit/metrics/test_promtool.py).

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
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from pydantic import ValidationError

from kyai import __version__
from kyai._clock import parse_time
from kyai.api import EvaluationRunStatus, ServerServing, ServingStatus
from kyai.api.evaluationschedule import EvaluationScheduleStatus
from kyai.api.evaluationsweep import EvaluationSweepStatus

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


#: The quantiles of the serving distributions, as label values, with their status statistic.
QUANTILES: tuple[tuple[str, str], ...] = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))
#: The serving distributions exported: (figure in status, family name part, what it is).
SERVING_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("ttft", "ttft", "time to first token"),
    ("tpot", "tpot", "time per output token after the first"),
    (
        "itl",
        "itl",
        "inter-token latency (the gaps between successive streamed chunks, as vllm bench serve "
        "counts them, or between tokens inside the engine)",
    ),
    ("e2e", "e2e", "end-to-end request latency"),
)
#: The one distribution whose observations the status counts: E2E, one per answer (the
#: client's ``requests``; the engine's ``requests`` is its E2E histogram's count). TTFT and
#: TPOT have fewer (no first token, fewer than two tokens), ITL one per gap, and the status
#: counts none of them, so their summaries carry quantiles only, never a made-up ``_count``.
COUNTED_FIGURE = "e2e"


@dataclass(frozen=True)
class Serving:
    """A run's serving figures in base units (seconds), as its status holds them."""

    #: (figure, quantile label) → seconds, measured by the client (the generation worker).
    client: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: The same from the engine's own histograms (served Workloads).
    server: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: figure → (observations, their sum in seconds) of the client's distributions, for the
    #: summaries' ``_count`` and ``_sum`` (only :data:`COUNTED_FIGURE`'s: requests × mean).
    client_totals: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    #: The same of the engine's.
    server_totals: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    output_tokens_per_second: float | None = None
    gpu_seconds: float | None = None


def _quantiles(figures: ServingStatus | ServerServing | None) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    if figures is None:
        return found
    for figure, _, _ in SERVING_FIGURES:
        for quantile, statistic in QUANTILES:
            value = getattr(figures, f"{figure}_{statistic}_ms")
            if value is not None:
                found[(figure, quantile)] = float(value) / 1000.0
    return found


def _totals(figures: ServingStatus | ServerServing | None) -> dict[str, tuple[int, float]]:
    """``{"e2e": (requests, requests × mean in seconds)}`` when both are known (µs rounding)."""
    if figures is None or figures.requests is None:
        return {}
    mean_ms = getattr(figures, f"{COUNTED_FIGURE}_mean_ms")
    if mean_ms is None:
        return {}
    return {COUNTED_FIGURE: (figures.requests, round(figures.requests * mean_ms / 1000.0, 6))}


def serving_view(serving: ServingStatus | None) -> Serving:
    """The exported serving figures of ``status.serving`` (milliseconds to seconds)."""
    if serving is None:
        return Serving()
    return Serving(
        client=_quantiles(serving),
        server=_quantiles(serving.server),
        client_totals=_totals(serving),
        server_totals=_totals(serving.server),
        output_tokens_per_second=serving.output_tokens_per_second,
        gpu_seconds=serving.gpu_seconds,
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
    #: The interval of a succeeded run's score: (low, high, standard error).
    interval: tuple[float, float, float] | None = None
    #: A succeeded run's serving figures.
    serving: Serving = field(default_factory=Serving)


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
    started = parse_time(status.started_at)
    completed = parse_time(status.completed_at)
    labels = (
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        # A re-judge names no Workload: its status carries its source run's.
        str((spec.get("workloadRef") or {}).get("name") or status.workload or ""),
        status.model or "",
        status.framework or "",
        status.dataset or "",
        status.dataset_version or "",
        status.comparison_key or "",
    )
    succeeded = status.phase == "Succeeded"
    interval = status.avg_score_interval if succeeded else None
    return RunView(
        labels=labels,
        phase=status.phase or "Pending",
        avg_score=status.avg_score if succeeded else None,
        avg_latency_ms=status.avg_latency_ms if succeeded else None,
        questions=status.questions,
        errors=dict(status.errors or {}),
        duration_seconds=(completed - started).total_seconds() if started and completed else None,
        metrics=dict(status.metrics or {}) if succeeded else {},
        interval=None
        if interval is None
        else (interval.low, interval.high, interval.standard_error),
        serving=serving_view(status.serving if succeeded else None),
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


def run_families(runs: list[RunView]) -> Iterator[Metric]:
    """Score, latency, questions, errors, duration and runs by phase."""
    score = GaugeMetricFamily(
        "kyai_evaluation_score",
        "KYAI average score of a succeeded run (0..1; errors count 0).",
        labels=RUN_LABELS,
    )
    latency_seconds = GaugeMetricFamily(
        "kyai_evaluation_latency_seconds",
        "Mean latency of the candidate's successful answers, in seconds.",
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
            latency_seconds.add_metric(run.labels, float(run.avg_latency_ms) / 1000.0)
        if run.questions is not None:
            questions.add_metric(run.labels, float(run.questions))
        for kind, count in sorted(run.errors.items()):
            errors.add_metric((*run.labels, kind), float(count))
        if run.duration_seconds is not None:
            duration.add_metric(run.labels, run.duration_seconds)
    for (namespace, phase), count in sorted(counts.items()):
        phases.add_metric((namespace, phase), float(count))
    yield from (score, latency_seconds, questions, errors, duration, phases)


# -- the score's interval (issue 21) and the serving figures (issue 22) -------------------------


def interval_families(runs: list[RunView]) -> Iterator[Metric]:
    """``kyai_evaluation_score_interval{bound}`` and ``kyai_evaluation_score_standard_error``."""
    bounds = GaugeMetricFamily(
        "kyai_evaluation_score_interval",
        "The 95 % interval of a succeeded run's score (Wilson for 0/1 scores, else t): its "
        "low and high bound.",
        labels=(*RUN_LABELS, "bound"),
    )
    standard_error = GaugeMetricFamily(
        "kyai_evaluation_score_standard_error",
        "The standard error of a succeeded run's score (sd/sqrt(n) of its per-question scores).",
        labels=RUN_LABELS,
    )
    for run in runs:
        if run.interval is None:
            continue
        low, high, error = run.interval
        bounds.add_metric((*run.labels, "low"), low)
        bounds.add_metric((*run.labels, "high"), high)
        standard_error.add_metric(run.labels, error)
    yield from (bounds, standard_error)


#: Who measured, and what a summary's ``_count`` counts, by source.
SERVING_SOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("client", "kyai_evaluation", "measured by the run's client", "the answers received"),
    (
        "server",
        "kyai_evaluation_server",
        "from the serving engine's own histograms (quantiles estimated from its buckets)",
        "the requests the engine finished meanwhile",
    ),
)


def _serving_help(what: str, who: str, counted: str, figure: str) -> str:
    totals = (
        f"; _count {counted}, _sum their latencies (the mean times the count)"
        if figure == COUNTED_FIGURE
        else " only (the status keeps no count of its observations: no _count or _sum)"
    )
    return (
        f"The {what} of a succeeded run's generation phase in seconds, {who}: its 0.5, 0.9 "
        f"and 0.99 quantiles{totals}."
    )


def serving_summary(runs: list[RunView], source: str, figure: str) -> SummaryMetricFamily:
    """One serving distribution of one source (``client`` or ``server``) as a summary.

    Per run its quantiles, and ``_count``/``_sum`` where the status counts the observations
    (:data:`COUNTED_FIGURE`).
    """
    _, prefix, who, counted = next(s for s in SERVING_SOURCES if s[0] == source)
    _, name, what = next(f for f in SERVING_FIGURES if f[0] == figure)
    family_name = f"{prefix}_{name}_seconds"
    family = SummaryMetricFamily(
        family_name, _serving_help(what, who, counted, figure), labels=RUN_LABELS
    )
    for run in runs:
        quantiles = run.serving.client if source == "client" else run.serving.server
        totals = run.serving.client_totals if source == "client" else run.serving.server_totals
        labels = dict(zip(RUN_LABELS, run.labels, strict=True))
        for quantile, _ in QUANTILES:
            value = quantiles.get((figure, quantile))
            if value is not None:
                family.samples.append(Sample(family_name, {**labels, "quantile": quantile}, value))
        if figure in totals:
            count, total = totals[figure]
            family.add_metric(run.labels, count, total)
    return family


def serving_families(runs: list[RunView]) -> Iterator[Metric]:
    """TTFT, TPOT, ITL and E2E summaries (client and engine), output tokens/s, GPU-seconds."""
    for source, _, _, _ in SERVING_SOURCES:
        for figure, _, _ in SERVING_FIGURES:
            yield serving_summary(runs, source, figure)
    rate = GaugeMetricFamily(
        "kyai_evaluation_output_tokens_per_second",
        "Output tokens per second of a succeeded run's generation phase (all answers' tokens "
        "over the phase's wall time).",
        labels=RUN_LABELS,
    )
    gpu = GaugeMetricFamily(
        "kyai_evaluation_gpu_seconds",
        "GPUs of the served Workload times the wall time of a succeeded run's generation phase.",
        labels=RUN_LABELS,
    )
    for run in runs:
        if run.serving.output_tokens_per_second is not None:
            rate.add_metric(run.labels, run.serving.output_tokens_per_second)
        if run.serving.gpu_seconds is not None:
            gpu.add_metric(run.labels, run.serving.gpu_seconds)
    yield from (rate, gpu)


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
        build = GaugeMetricFamily(
            "kyai_operator_build_info",
            "The operator's version and Python (always 1).",
            labels=("version", "python_version"),
        )
        build.add_metric((__version__, platform.python_version()), 1.0)
        yield build
        yield from run_families(runs)
        yield metric_family(runs)
        yield from interval_families(runs)
        yield from serving_families(runs)

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


# -- kyai_sweep_cells: EvaluationSweeps (issue 23) --------------------------------------------

#: The cell states of ``kyai_sweep_cells{phase}``, as status.cells counts them.
SWEEP_CELL_PHASES: tuple[tuple[str, str], ...] = (
    ("Pending", "pending"),
    ("Running", "running"),
    ("Succeeded", "succeeded"),
    ("Failed", "failed"),
)


def sweep_cells(body: Mapping[str, Any]) -> tuple[tuple[str, str], dict[str, int]]:
    """((namespace, sweep), cells by phase) of an EvaluationSweep, from its status.cells.

    An unreadable status counts no cells (logged).
    """
    meta = body.get("metadata", {})
    key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
    try:
        cells = EvaluationSweepStatus.model_validate(body.get("status") or {}).cells
    except ValidationError as exc:
        log.warning("Unreadable status of an EvaluationSweep, metrics left out: %s", exc)
        cells = None
    counts = {phase: getattr(cells, field) if cells else 0 for phase, field in SWEEP_CELL_PHASES}
    return key, counts


def sweep_cells_family(sweeps: Mapping[tuple[str, str], Mapping[str, int]]) -> GaugeMetricFamily:
    """``kyai_sweep_cells{namespace, sweep, phase}``: four series per sweep (bounded)."""
    family = GaugeMetricFamily(
        "kyai_sweep_cells",
        "Cells of an EvaluationSweep by phase (Pending: no run yet; Running: run unfinished).",
        labels=("namespace", "sweep", "phase"),
    )
    for (namespace, name), counts in sorted(sweeps.items()):
        for phase, _ in SWEEP_CELL_PHASES:
            family.add_metric((namespace, name, phase), float(counts.get(phase, 0)))
    return family


class SweepMetrics(Collector):
    """``kyai_sweep_cells`` from the sweeps the operator sees.

    Register it on the operator's registry: ``SweepMetrics(registry=run_metrics.registry)``.
    """

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self._sweeps: dict[tuple[str, str], dict[str, int]] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def observe(self, body: Mapping[str, Any]) -> None:
        """Record a sweep's current cell counts."""
        key, counts = sweep_cells(body)
        with self._lock:
            self._sweeps[key] = counts

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted sweep's series."""
        with self._lock:
            self._sweeps.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        """The family, at scrape time."""
        with self._lock:
            sweeps = dict(self._sweeps)
        yield sweep_cells_family(sweeps)


#: ``kyai_schedule_runs_total``'s outcomes (``status.runs`` keys).
SCHEDULE_OUTCOMES = ("succeeded", "failed")


@dataclass(frozen=True)
class ScheduleFigures:
    """What ``/metrics`` shows of one EvaluationSchedule (from its spec and status)."""

    last_score: float | None
    last_run: float | None
    last_success: float | None
    period: float | None
    suspended: bool
    regressed: bool | None
    change: float | None
    runs: Mapping[str, int]


def schedule_figures(body: Mapping[str, Any]) -> tuple[tuple[str, str], ScheduleFigures]:
    """((namespace, schedule), its figures); an unreadable status shows none (logged)."""
    meta = body.get("metadata", {})
    key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
    try:
        status = EvaluationScheduleStatus.model_validate(body.get("status") or {})
    except ValidationError as exc:
        log.warning("Unreadable status of an EvaluationSchedule, metrics left out: %s", exc)
        status = EvaluationScheduleStatus()
    finished = [entry for entry in status.history or () if entry.finished_at]
    last_run = parse_time(finished[-1].finished_at) if finished else None
    last_success = parse_time(status.last_successful_time)
    figures = ScheduleFigures(
        last_score=status.last_score,
        last_run=None if last_run is None else last_run.timestamp(),
        last_success=None if last_success is None else last_success.timestamp(),
        period=status.period_seconds,
        suspended=bool((body.get("spec") or {}).get("suspend")),
        regressed=status.regressed,
        change=status.change,
        runs=dict(status.runs or {}),
    )
    return key, figures


#: The gauges of a schedule: (name, help, the figure).
_SCHEDULE_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("kyai_schedule_last_score", "The newest finished run's avgScore.", "last_score"),
    ("kyai_schedule_last_run_timestamp_seconds", "When the newest run finished (Unix time).",
     "last_run"),
    ("kyai_schedule_last_success_timestamp_seconds", "When a run last succeeded (Unix time).",
     "last_success"),
    ("kyai_schedule_period_seconds", "Seconds between two cron times of the schedule.", "period"),
    ("kyai_schedule_change",
     "The newest finished run's score minus its baseline's (a fraction of the score scale).",
     "change"),
)  # fmt: skip


def schedule_families(
    schedules: Mapping[tuple[str, str], ScheduleFigures],
) -> Iterator[Metric]:
    """The ``kyai_schedule_*`` families: a handful of series per schedule (bounded)."""
    labels = ("namespace", "schedule")
    for name, help_text, attribute in _SCHEDULE_GAUGES:
        family = GaugeMetricFamily(name, help_text, labels=labels)
        for key, figures in sorted(schedules.items()):
            value = getattr(figures, attribute)
            if value is not None:
                family.add_metric(key, float(value))
        yield family
    suspended = GaugeMetricFamily(
        "kyai_schedule_suspended", "1 while the schedule is suspended.", labels=labels
    )
    regressed = GaugeMetricFamily(
        "kyai_schedule_regressed",
        "1 when the newest finished run is shown worse than the baseline by more than the "
        "margin (0: not shown worse; absent: not compared).",
        labels=labels,
    )
    runs = CounterMetricFamily(
        "kyai_schedule_runs",
        "Runs of the schedule that finished, by outcome (succeeded, failed).",
        labels=(*labels, "outcome"),
    )
    for key, figures in sorted(schedules.items()):
        suspended.add_metric(key, 1.0 if figures.suspended else 0.0)
        if figures.regressed is not None:
            regressed.add_metric(key, 1.0 if figures.regressed else 0.0)
        for outcome in SCHEDULE_OUTCOMES:
            runs.add_metric((*key, outcome), float(figures.runs.get(outcome, 0)))
    yield suspended
    yield regressed
    yield runs


class ScheduleMetrics(Collector):
    """The ``kyai_schedule_*`` series from the schedules the operator sees.

    Register it on the operator's registry: ``ScheduleMetrics(registry=run_metrics.registry)``.
    """

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self._schedules: dict[tuple[str, str], ScheduleFigures] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def observe(self, body: Mapping[str, Any]) -> None:
        """Record a schedule's current figures."""
        key, figures = schedule_figures(body)
        with self._lock:
            self._schedules[key] = figures

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted schedule's series."""
        with self._lock:
            self._schedules.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        """The families, at scrape time."""
        with self._lock:
            schedules = dict(self._schedules)
        yield from schedule_families(schedules)
