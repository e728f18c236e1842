"""The operator's /metrics: per-run series in base units, and the operator's own series."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kyai import __version__
from kyai.controllers import handlers
from kyai.controllers._services import Services
from kyai.controllers.scheduling import Scheduler
from kyai.metrics import RUN_LABELS, RunMetrics, run_view
from kyai.settings import OperatorSettings

RUN = {
    "metadata": {"namespace": "team-a", "name": "r1"},
    "spec": {"workloadRef": {"name": "w"}},
    "status": {
        "phase": "Succeeded", "avgScore": 0.5, "avgLatencyMs": 1250.0, "questions": 4,
        "comparisonKey": "k", "model": "m", "framework": "vllm", "dataset": "d",
    },
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape(metrics: RunMetrics) -> dict[str, Any]:
    """Serve /metrics on loopback and parse what a Prometheus server would read."""
    port = free_port()
    metrics.serve(port, address="127.0.0.1")
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample_name: str, **labels: str) -> float:
    for family in families.values():
        for sample in family.samples:
            if sample.name == sample_name and labels.items() <= sample.labels.items():
                return float(sample.value)
    raise AssertionError(f"no sample {sample_name} {labels}")


def test_latency_in_seconds_and_no_longer_in_milliseconds() -> None:
    metrics = RunMetrics()
    metrics.observe(RUN)
    families = scrape(metrics)
    assert value(families, "kyai_evaluation_latency_seconds", run="r1") == 1.25
    assert families["kyai_evaluation_latency_seconds"].type == "gauge"
    # The deprecated kyai_evaluation_latency_ms is gone (promtool: an abbreviated unit).
    assert "kyai_evaluation_latency_ms" not in families


def test_build_info_and_the_process_collector() -> None:
    families = scrape(RunMetrics())
    info = families["kyai_operator_build_info"]
    (sample,) = info.samples
    assert sample.value == 1 and sample.labels["version"] == __version__
    assert value(families, "process_resident_memory_bytes") > 0
    assert value(families, "process_start_time_seconds") > 0


def test_reconciles_are_counted_timed_and_errors_kept_apart() -> None:
    metrics = RunMetrics()
    svc = Services(object(), OperatorSettings(), metrics)  # type: ignore[arg-type]
    calls: list[str] = []

    async def fine(_: Services, name: str) -> None:
        calls.append(name)

    async def broken(_: Services, name: str) -> None:
        raise RuntimeError(name)

    counted_fine = handlers._counted("Workload", fine)
    counted_broken = handlers._counted("Snapshot", broken)
    asyncio.run(counted_fine(svc, "a"))
    asyncio.run(counted_fine(svc, "b"))
    with pytest.raises(RuntimeError):
        asyncio.run(counted_broken(svc, "c"))
    assert calls == ["a", "b"]
    families = scrape(metrics)
    total = "kyai_operator_reconcile_total"
    assert value(families, total, kind="Workload", result="success") == 2
    assert value(families, total, kind="Snapshot", result="error") == 1
    assert value(families, "kyai_operator_reconcile_errors_total", kind="Snapshot") == 1
    with pytest.raises(AssertionError):
        value(families, "kyai_operator_reconcile_errors_total", kind="Workload")
    duration = "kyai_operator_reconcile_duration_seconds"
    assert value(families, f"{duration}_count", kind="Workload") == 2
    assert value(families, f"{duration}_bucket", kind="Workload", le="+Inf") == 2
    assert families[duration].type == "histogram"


class Gone:
    """A cluster where every object has just been deleted."""

    async def get(self, kind: str, namespace: str, name: str) -> None:
        return None


def test_the_handlers_reconciles_are_counted_per_kind() -> None:
    metrics = RunMetrics()
    svc = Services(Gone(), OperatorSettings(), metrics)  # type: ignore[arg-type]
    asyncio.run(Scheduler(svc).reconcile("team-a", "gone"))  # runs: through the scheduler
    asyncio.run(handlers.reconcile_workload(svc, "team-a", "gone"))
    families = scrape(metrics)
    for kind in ("EvaluationRun", "Workload"):
        assert value(families, "kyai_operator_reconcile_total", kind=kind, result="success") == 1


def test_an_unfinished_run_is_read_at_the_scrape_a_finished_one_at_once() -> None:
    from kyai.metrics import RunView

    metrics = RunMetrics()
    going = {**RUN, "metadata": {"namespace": "team-a", "name": "r2"},
             "status": {"phase": "Judging", "model": "m"}}  # fmt: skip
    metrics.observe(going)
    metrics.observe(RUN)
    assert not isinstance(metrics._runs[("team-a", "r2")], RunView)  # the object, for now
    assert isinstance(metrics._runs[("team-a", "r1")], RunView)  # no object kept
    families = scrape(metrics)
    assert value(families, "kyai_evaluation_runs", phase="Judging") == 1
    assert value(families, "kyai_evaluation_score", run="r1") == 0.5
    assert isinstance(metrics._runs[("team-a", "r2")], RunView)  # read once, then kept read


def test_a_rejudge_is_labelled_with_its_source_runs_workload() -> None:
    # A re-judge names no Workload in its spec; its status carries its source run's.
    rejudge = {
        "metadata": {"namespace": "team-a", "name": "r1-rejudge"},
        "spec": {"generationFrom": {"runRef": {"name": "r1"}}},
        "status": {**RUN["status"], "workload": "w", "snapshot": "s"},
    }
    labels = dict(zip(RUN_LABELS, run_view(rejudge).labels, strict=True))
    assert labels["workload"] == "w" and labels["run"] == "r1-rejudge"
    assert dict(zip(RUN_LABELS, run_view(RUN).labels, strict=True))["workload"] == "w"
    metrics = RunMetrics()
    metrics.observe(rejudge)
    assert value(scrape(metrics), "kyai_evaluation_score", run="r1-rejudge", workload="w") == 0.5
