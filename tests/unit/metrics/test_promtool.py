"""Prometheus' own linter accepts the operator's /metrics: ``promtool check metrics`` on the
exposition a scrape reads, with every family the operator yields carrying series.

promtool comes with Debian's ``prometheus`` package (``.ci/run`` installs it); without it the
test skips, saying so.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from kyai.metrics import RunMetrics, SweepMetrics

sys.path.insert(0, str(Path(__file__).parent))
from test_metrics import RUN, free_port

#: A succeeded run with every figure the metrics read: errors, run metrics, the interval, and
#: the client's and the engine's serving figures (every quantile, means and counts).
FULL: dict[str, Any] = {
    **RUN["status"],
    "model": "Qwen/Qwen2.5-0.5B-Instruct", "datasetVersion": "v1",
    "startedAt": "2025-01-01T00:00:00Z", "completedAt": "2025-01-01T00:02:30Z",
    "errors": {"timeout": 1, "judge_parse": 2},
    "metrics": {"gsm8k/exact_match,strict-match": 0.5, "judge-a/avg_score": 0.75},
    "avgScoreInterval": {"low": 0.41, "high": 0.59, "standardError": 0.046,
                         "confidence": 0.95, "method": "wilson"},
    "serving": {
        "streamed": True, "requests": 40, "failed": 1, "concurrency": 8, "wallSeconds": 1.5,
        **{f"{figure}{statistic}Ms": value
           for figure in ("ttft", "tpot", "itl", "e2e")
           for statistic, value in (("Mean", 9.5), ("P50", 9.0), ("P90", 12.0), ("P99", 20.0))},
        "outputTokens": 1200, "outputTokensPerSecond": 800.0, "requestsPerSecond": 26.7,
        "gpus": 2, "gpuSeconds": 3.0,
        "server": {
            "url": "http://w.team-a.svc:8000/metrics", "requests": 41, "outputTokens": 1210,
            "outputTokensPerSecond": 806.7,
            **{f"{figure}{statistic}Ms": value
               for figure in ("ttft", "tpot", "itl", "e2e")
               for statistic, value in (("Mean", 8.5), ("P50", 7.5), ("P90", 10.0),
                                        ("P99", 25.0))},
        },
    },
}  # fmt: skip


def operator_metrics() -> RunMetrics:
    """The operator's registry with runs in every state and shape, a sweep and reconciles."""
    metrics = RunMetrics()
    metrics.observe({**RUN, "status": FULL})
    metrics.observe({**RUN, "metadata": {"namespace": "team-a", "name": "going"},
                     "status": {"phase": "Judging", "model": "m"}})  # fmt: skip
    # Not streamed, no count: E2E quantiles only, no engine figures.
    metrics.observe({**RUN, "metadata": {"namespace": "team-b", "name": "whole"},
                     "status": {**RUN["status"], "serving": {"streamed": False,
                                "e2eP50Ms": 80.0, "e2eP90Ms": 95.0}}})  # fmt: skip
    metrics.observe({**RUN, "metadata": {"namespace": "team-b", "name": "broke"},
                     "status": {"phase": "Failed"}})  # fmt: skip
    with metrics.reconciling("EvaluationRun"):
        pass
    with pytest.raises(RuntimeError), metrics.reconciling("Workload"):
        raise RuntimeError("a failed reconcile, counted")
    sweeps = SweepMetrics(registry=metrics.registry)  # as the operator registers it
    sweeps.observe({"metadata": {"namespace": "team-a", "name": "s1"},
                    "status": {"cells": {"total": 2, "running": 1, "succeeded": 1}}})  # fmt: skip
    return metrics


OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def exposition(metrics: RunMetrics, *, accept: str = "text/plain") -> str:
    """What a Prometheus server reads from the operator's /metrics (text format 0.0.4, which
    promtool reads, or the OpenMetrics a Prometheus server may ask for)."""
    port = free_port()
    metrics.serve(port, address="127.0.0.1")
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept}, timeout=5)
    response.raise_for_status()
    expected = OPENMETRICS if accept == OPENMETRICS else "text/plain; version=0.0.4"
    assert response.headers["content-type"].startswith(expected)
    return response.text


def test_the_exposition_has_series_of_every_family_the_operator_yields() -> None:
    metrics = operator_metrics()
    text = exposition(metrics)
    served = {family.name: family for family in text_string_to_metric_families(text)}
    for family in metrics.registry.collect():
        found = served.get(family.name)
        assert found and found.samples, f"no {family.name} series: promtool would not see any"
    for figure in ("ttft", "tpot", "itl", "e2e"):
        for name in (figure, f"server_{figure}"):
            assert served[f"kyai_evaluation_{name}_seconds"].type == "summary", name
    assert "kyai_evaluation_e2e_seconds_count" in text
    assert "kyai_evaluation_server_e2e_seconds_sum" in text


def test_the_openmetrics_exposition_parses_strictly() -> None:
    """Summaries without ``_count`` and ``_sum`` (TTFT, TPOT) are valid OpenMetrics too."""
    text = exposition(operator_metrics(), accept=OPENMETRICS)
    served = {family.name: family for family in openmetrics_families(text)}
    ttft = served["kyai_evaluation_ttft_seconds"]
    assert ttft.type == "summary" and {s.name for s in ttft.samples} == {ttft.name}
    e2e = served["kyai_evaluation_e2e_seconds"]
    assert {s.name for s in e2e.samples} == {e2e.name, f"{e2e.name}_count", f"{e2e.name}_sum"}


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian's prometheus package has it; .ci/run installs it)",
)
def test_promtool_check_metrics_finds_no_problem() -> None:
    text = exposition(operator_metrics())
    checked = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems = (checked.stdout + checked.stderr).strip()
    assert checked.returncode == 0 and not problems, f"promtool check metrics:\n{problems}"


def test_promtool_would_flag_a_gauge_with_a_quantile_label() -> None:
    """The check above is not vacuous: the old shape of the serving series fails it."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian's prometheus package has it)")
    old = (
        "# HELP kyai_evaluation_ttft_seconds Quantiles of the time to first token.\n"
        "# TYPE kyai_evaluation_ttft_seconds gauge\n"
        'kyai_evaluation_ttft_seconds{run="r1",quantile="0.5"} 0.051\n'
    )
    checked = subprocess.run(
        ["promtool", "check", "metrics"],
        input=old,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode != 0
    assert 'non-summary metrics should not have "quantile" label' in checked.stderr
