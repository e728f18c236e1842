"""The score's interval and the serving figures on /metrics, read from the typed status."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kyai.metrics import RUN_LABELS, RunMetrics, run_view

sys.path.insert(0, str(Path(__file__).parent))
from test_metrics import RUN, scrape, value

STATUS: dict[str, Any] = {
    **RUN["status"],
    "avgScoreInterval": {"low": 0.41, "high": 0.59, "standardError": 0.046,
                         "confidence": 0.95, "method": "wilson"},
    "serving": {
        "streamed": True, "ttftP50Ms": 51.0, "ttftP90Ms": 55.0, "ttftP99Ms": 58.0,
        "tpotP50Ms": 5.0, "tpotP90Ms": 6.0, "tpotP99Ms": 6.5,
        "e2eP50Ms": 88.0, "e2eP90Ms": 99.0, "e2eP99Ms": 101.0,
        "itlP50Ms": 5.0, "outputTokensPerSecond": 26.5, "gpus": 2, "gpuSeconds": 3.0,
        "server": {"ttftP50Ms": 50.0, "ttftP90Ms": 58.0, "e2eP50Ms": 650.0},
    },
}  # fmt: skip


def observed(status: dict[str, Any]) -> dict[str, Any]:
    metrics = RunMetrics()
    metrics.observe({**RUN, "status": status})
    return scrape(metrics)


def test_the_interval_is_two_bounds_and_a_standard_error() -> None:
    families = observed(STATUS)
    assert value(families, "kyai_evaluation_score_interval", run="r1", bound="low") == 0.41
    assert value(families, "kyai_evaluation_score_interval", run="r1", bound="high") == 0.59
    assert value(families, "kyai_evaluation_score_standard_error", run="r1") == 0.046
    interval = families["kyai_evaluation_score_interval"]
    assert interval.type == "gauge" and "95 %" in interval.documentation
    assert {s.labels["bound"] for s in interval.samples} == {"low", "high"}
    assert set(interval.samples[0].labels) == {*RUN_LABELS, "bound"}


def test_serving_quantiles_are_in_seconds_with_a_bounded_quantile_label() -> None:
    families = observed(STATUS)
    ttft = families["kyai_evaluation_ttft_seconds"]
    assert {s.labels["quantile"]: s.value for s in ttft.samples} == {
        "0.5": 0.051, "0.9": 0.055, "0.99": 0.058,
    }  # fmt: skip
    assert value(families, "kyai_evaluation_tpot_seconds", quantile="0.99") == 0.0065
    assert value(families, "kyai_evaluation_e2e_seconds", quantile="0.5") == 0.088
    assert value(families, "kyai_evaluation_output_tokens_per_second", run="r1") == 26.5
    assert value(families, "kyai_evaluation_gpu_seconds", run="r1") == 3.0
    # The engine's own figures, where it has them (no TPOT histogram read here: no series).
    server = families["kyai_evaluation_server_ttft_seconds"]
    assert {s.labels["quantile"]: s.value for s in server.samples} == {"0.5": 0.05, "0.9": 0.058}
    assert families["kyai_evaluation_server_tpot_seconds"].samples == []
    assert value(families, "kyai_evaluation_server_e2e_seconds", quantile="0.5") == 0.65


def test_unfinished_runs_and_runs_without_figures_export_none() -> None:
    judging = observed({**STATUS, "phase": "Judging"})
    for name in (
        "kyai_evaluation_score_interval", "kyai_evaluation_score_standard_error",
        "kyai_evaluation_ttft_seconds", "kyai_evaluation_output_tokens_per_second",
    ):  # fmt: skip
        assert judging[name].samples == [], name
    bare = observed(RUN["status"])
    assert bare["kyai_evaluation_ttft_seconds"].samples == []
    assert bare["kyai_evaluation_gpu_seconds"].samples == []
    view = run_view({**RUN, "status": {**STATUS, "serving": {"streamed": False}}})
    assert view.serving.client == {} and view.serving.output_tokens_per_second is None


def test_one_series_per_run_and_quantile() -> None:
    metrics = RunMetrics()
    for name in ("r1", "r2", "r3"):
        metrics.observe({**RUN, "metadata": {"namespace": "team-a", "name": name},
                         "status": STATUS})  # fmt: skip
    families = scrape(metrics)
    assert len(families["kyai_evaluation_ttft_seconds"].samples) == 3 * 3
    assert len(families["kyai_evaluation_score_interval"].samples) == 3 * 2
