"""The score's interval and the serving summaries on /metrics, read from the typed status."""

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
        "e2eP50Ms": 88.0, "e2eP90Ms": 99.0, "e2eP99Ms": 101.0, "e2eMeanMs": 90.125,
        "ttftMeanMs": 52.0, "requests": 40, "failed": 2,
        "itlP50Ms": 5.0, "outputTokensPerSecond": 26.5, "gpus": 2, "gpuSeconds": 3.0,
        "server": {"ttftP50Ms": 50.0, "ttftP90Ms": 58.0, "e2eP50Ms": 650.0,
                   "e2eMeanMs": 700.5, "requests": 41, "itlP50Ms": 4.5, "itlP99Ms": 9.0},
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


def samples_by_name(family: Any) -> dict[str, dict[str, float]]:
    """``{sample name: {quantile label or "": value}}`` of one family."""
    found: dict[str, dict[str, float]] = {}
    for sample in family.samples:
        found.setdefault(sample.name, {})[sample.labels.get("quantile", "")] = sample.value
    return found


def test_serving_figures_are_summaries_in_seconds() -> None:
    families = observed(STATUS)
    for source in ("", "server_"):
        for figure in ("ttft", "tpot", "itl", "e2e"):
            family = families[f"kyai_evaluation_{source}{figure}_seconds"]
            assert family.type == "summary", family.name
    ttft = families["kyai_evaluation_ttft_seconds"]
    assert samples_by_name(ttft) == {
        "kyai_evaluation_ttft_seconds": {"0.5": 0.051, "0.9": 0.055, "0.99": 0.058},
    }  # fmt: skip
    assert set(ttft.samples[0].labels) == {*RUN_LABELS, "quantile"}
    assert value(families, "kyai_evaluation_tpot_seconds", quantile="0.99") == 0.0065
    assert value(families, "kyai_evaluation_output_tokens_per_second", run="r1") == 26.5
    assert value(families, "kyai_evaluation_gpu_seconds", run="r1") == 3.0
    # The engine's own figures, where it has them (no TPOT histogram read here: no series).
    server = families["kyai_evaluation_server_ttft_seconds"]
    assert samples_by_name(server) == {
        "kyai_evaluation_server_ttft_seconds": {"0.5": 0.05, "0.9": 0.058},
    }  # fmt: skip
    assert families["kyai_evaluation_server_tpot_seconds"].samples == []


def test_the_engines_itl_is_exported_beside_the_clients() -> None:
    """Where the engine's metrics were read, its ITL stands beside the client's (which, timed
    as vllm bench serve times it, shows what reaches the client: several tokens in one read
    give gaps near 0 where the engine saw one gap per token)."""
    families = observed(STATUS)
    client = families["kyai_evaluation_itl_seconds"]
    server = families["kyai_evaluation_server_itl_seconds"]
    assert samples_by_name(client) == {"kyai_evaluation_itl_seconds": {"0.5": 0.005}}
    assert samples_by_name(server) == {
        "kyai_evaluation_server_itl_seconds": {"0.5": 0.0045, "0.99": 0.009}
    }
    assert "vllm bench serve" in client.documentation
    assert "engine's own histograms" in server.documentation
    bare = observed({**STATUS, "serving": {**STATUS["serving"], "server": None}})
    assert bare["kyai_evaluation_server_itl_seconds"].samples == []
    assert bare["kyai_evaluation_itl_seconds"].samples != []


def test_only_e2e_has_a_count_and_a_sum_each_side_its_own() -> None:
    families = observed(STATUS)
    # The client's: one observation per answer received (failed requests left out), the
    # sum the mean times that count.
    e2e = samples_by_name(families["kyai_evaluation_e2e_seconds"])
    assert e2e["kyai_evaluation_e2e_seconds"] == {"0.5": 0.088, "0.9": 0.099, "0.99": 0.101}
    assert e2e["kyai_evaluation_e2e_seconds_count"] == {"": 40.0}
    assert e2e["kyai_evaluation_e2e_seconds_sum"] == {"": 3.605}  # 40 x 90.125 ms
    assert value(families, "kyai_evaluation_e2e_seconds_count", run="r1") == 40
    # The engine's: its E2E histogram's count and the requests' latencies.
    server = samples_by_name(families["kyai_evaluation_server_e2e_seconds"])
    assert server["kyai_evaluation_server_e2e_seconds"] == {"0.5": 0.65}
    assert server["kyai_evaluation_server_e2e_seconds_count"] == {"": 41.0}
    assert server["kyai_evaluation_server_e2e_seconds_sum"] == {"": 28.7205}  # 41 x 700.5 ms
    # TTFT, TPOT and ITL: no count in the status (not every answer has them; ITL counts gaps),
    # so quantiles only, even where a mean is known.
    for name in ("ttft", "tpot", "itl", "server_ttft", "server_itl"):
        family = families[f"kyai_evaluation_{name}_seconds"]
        assert {s.name for s in family.samples} == {family.name}, name
    # No count without a mean to make the sum of, nor a mean without a count.
    for serving in ({**STATUS["serving"], "e2eMeanMs": None},
                    {**STATUS["serving"], "requests": None}):  # fmt: skip
        view = run_view({**RUN, "status": {**STATUS, "serving": serving}})
        assert view.serving.client_totals == {}
        assert view.serving.server_totals == {"e2e": (41, 28.7205)}


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
    assert len(families["kyai_evaluation_e2e_seconds"].samples) == 3 * (3 + 2)  # _count, _sum
    assert len(families["kyai_evaluation_score_interval"].samples) == 3 * 2
