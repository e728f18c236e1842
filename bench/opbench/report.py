"""The operator bench's result: figures, the printed report, log and access-log summaries."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from opbench.observe import Latency


@dataclass
class Result:
    """What the bench prints and writes."""

    runs: int
    workloads: int
    rows: int
    cpus: int
    latencies: list[Latency]
    wall_s: float | None
    succeeded: int
    failed: dict[str, str]
    unfinished: dict[str, str]
    operator: dict[str, float]
    context: dict[str, Any]
    anomalies: list[str]
    timed_out: str | None = None
    timelines: dict[str, dict[str, Any]] = field(default_factory=dict)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render(result: Result) -> str:
    lines = [
        f"KYAI operator benchmark: {result.runs} EvaluationRuns over {result.workloads} "
        f"Workloads, a {result.rows}-row Snapshot, {result.cpus} CPUs",
        "",
        f"{'latency (s)':<48}{'n':>5}{'p50':>9}{'p95':>9}{'max':>9}",
    ]
    for item in result.latencies:
        lines.append(
            f"{item.label:<48}{item.n:>5}{seconds(item.p50):>9}{seconds(item.p95):>9}"
            f"{seconds(item.max):>9}"
        )
    op = result.operator
    ctx = result.context
    wall = "-" if result.wall_s is None else f"{result.wall_s:.1f} s"
    lines += [
        "",
        f"total wall time (first create -> last run finished): {wall}",
        f"succeeded: {result.succeeded}/{result.runs}"
        + (
            f"; after the burst {ctx['after_burst_succeeded']}/{ctx['after_burst_runs']}"
            if ctx.get("after_burst_runs")
            else ""
        ),
        f"burst: the bench created {ctx.get('creates_per_s', '-')} runs/s; the operator made "
        f"{ctx.get('generation_jobs_per_s', '-')} generation Jobs/s and finished "
        f"{ctx.get('runs_finished_per_s', '-')} runs/s (each rate from the first create)",
        f"operator: peak RSS (VmHWM) {op.get('peak_rss_mib', 0):.1f} MiB, "
        f"CPU {op.get('cpu_s', 0):.2f} s in all "
        f"({op.get('cpu_during_runs_s', 0):.2f} s while the runs ran; its threads waited "
        f"{op.get('runqueue_wait_during_runs_s', 0):.1f} s for a CPU meanwhile)",
        f"host: {ctx.get('runnable_processes_mean', 0):.1f} runnable processes on average "
        f"(max {ctx.get('runnable_processes_max', 0)}) while the runs ran",
        f"context: devcluster CPU {ctx.get('devcluster_cpu_s', 0):.1f} s, this bench's "
        f"{ctx.get('bench_cpu_s', 0):.1f} s while the runs ran, worker processes "
        f"CPU {ctx.get('workers_cpu_s', 0):.1f} s, {ctx.get('worker_pods', 0)} worker pods, "
        f"{ctx.get('jobs', 0)} Jobs, {ctx.get('run_events', 0)} run watch events "
        f"(status writes per run: median {ctx.get('status_writes_p50', 0)}, "
        f"max {ctx.get('status_writes_max', 0)})",
        f"host speed: a fixed Python loop took {ctx.get('host_speed_s', ['-', '-'])[0]} s "
        f"before and {ctx.get('host_speed_s', ['-', '-'])[-1]} s after (lower is faster)",
        f"operator log: {ctx.get('log_errors', 0)} ERROR, {ctx.get('log_warnings', 0)} "
        f"WARNING, {ctx.get('log_tracebacks', 0)} tracebacks",
    ]
    access = ctx.get("access")
    if access:
        lines.append(
            f"API requests (devcluster access log): {access['requests_per_client']}; "
            f"the operator's per run: {access['operator_requests_per_run']}"
        )
        top = list(access["operator_requests"].items())[:12]
        lines.append("  operator's most frequent: " + ", ".join(f"{k} x{n}" for k, n in top))
    calls = ctx.get("handler_calls") or {}
    if calls:
        shown = ", ".join(f"{name} {count}" for name, count in calls.items())
        lines.append(f"operator handler calls: {shown}")
    for name, message in sorted(result.failed.items()):
        lines.append(f"FAILED {name}: {message}")
    for name, message in sorted(result.unfinished.items()):
        lines.append(f"NOT FINISHED {name}: {message}")
    for anomaly in result.anomalies:
        lines.append(f"ANOMALY: {anomaly}")
    if result.timed_out:
        lines.append(f"TIMED OUT: {result.timed_out}")
    return "\n".join(lines)


def summarize_log(text: str) -> tuple[dict[str, int], list[str]]:
    errors = [line for line in text.splitlines() if " ERROR " in line]
    warnings = [line for line in text.splitlines() if " WARNING " in line]
    counts = {
        "log_errors": len(errors),
        "log_warnings": len(warnings),
        "log_tracebacks": text.count("Traceback (most recent call last)"),
    }
    # The distinct messages, with run names and numbers masked, most frequent first.
    masked = Counter(
        re.sub(r"run-\d+|\d+(\.\d+)?", "#", line.split(": ", 1)[-1])[:200]
        for line in errors + warnings
    )
    return counts, [f"{count} x {message}" for message, count in masked.most_common(8)]


def handler_calls(text: str) -> dict[str, int]:
    """How often each kopf handler and timer ran (kopf logs every call at INFO)."""
    found = re.findall(r"(?:Handler|Timer) '(?:\S+\.)?(\w+)' (succeeded|failed)", text)
    return dict(Counter(f"{name} {outcome}" for name, outcome in found).most_common())


ACCESS_LINE = re.compile(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d+) \S+ "[^"]*" "([^"]*)"')
CLIENTS = (
    ("kyai-bench", "bench"),
    ("kyai-operator", "operator (its REST client)"),
    ("python-httpx", "operator (its REST client)"),  # before it was on aiohttp
    ("kopf", "operator (kopf)"),
    ("OpenAPI-Generator", "workers"),
    ("kubectl", "kubectl"),
)


def summarize_access(text: str, runs: int) -> dict[str, Any]:
    """Requests per client and, for the operator's, per method, resource and status."""
    per_client: Counter[str] = Counter()
    operator: Counter[str] = Counter()
    for method, path, status, agent in ACCESS_LINE.findall(text):
        client = next((name for key, name in CLIENTS if key in agent), agent)
        per_client[client] += 1
        if client.startswith("operator"):
            resource = re.sub(r"\?.*", "", path)
            resource = re.sub(r"^/apis?/(?:[^/]+/)?v1\w*/(?:namespaces/[^/]+/)?", "", resource)
            resource = re.sub(r"/[^/]+", "/NAME", resource, count=1)
            operator[f"{method} {resource} {status}"] += 1
    total = sum(n for client, n in per_client.items() if client.startswith("operator"))
    return {
        "requests_per_client": dict(per_client.most_common()),
        "operator_requests_per_run": round(total / runs, 1),
        "operator_requests": dict(operator.most_common()),
    }


# -- the bench -----------------------------------------------------------------------------
