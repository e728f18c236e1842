"""What the judge worker writes into its run besides the score: the interval, every
question's score (listed or packed) and the generation phase's serving figures."""

from __future__ import annotations

from typing import Any

from kyai.api import EvaluationRunStatus, unpack_scores
from kyai.evaluation._report import MAX_STATUS_SCORES, result_model, result_status, serving_status
from kyai.stats import score_interval

BASE: dict[str, Any] = {
    "avg_latency_ms": 12.5,
    "errors": {},
    "error_count": 0,
    "comparison_key": "abcd",
    "dataset_sha256": "f" * 64,
}

#: A summary.json serving block as kyai generate writes it (client and engine figures).
SERVING: dict[str, Any] = {
    "streamed": True, "requests": 4, "failed": 0, "concurrency": 2, "wall_seconds": 1.5,
    "ttft_ms": {"mean": 52.0, "p50": 51.0, "p90": 55.0, "p99": 58.0},
    "tpot_ms": {"mean": 5.0, "p50": 5.0, "p90": 6.0, "p99": 6.5},
    "itl_ms": {"mean": 5.1, "p50": 5.0, "p90": 6.1, "p99": 7.0},
    "e2e_ms": {"mean": 90.0, "p50": 88.0, "p90": 99.0, "p99": 101.0},
    "output_tokens": 40, "output_tokens_per_second": 26.667, "requests_per_second": 2.667,
    "gpus": 2, "gpu_seconds": 3.0,
    "server": {
        "url": "http://w-engine.ns.svc:8000/metrics",
        "families": ["vllm:time_to_first_token_seconds"],
        "ttft_ms": {"mean": 50.5, "p50": 50.0, "p90": 58.0, "p99": 59.8},
        "e2e_ms": {"mean": 88.0, "p50": 650.0, "p90": None, "p99": None},
        "requests": 4, "output_tokens": 40, "output_tokens_per_second": 26.667,
    },
}  # fmt: skip


def summary(scores: list[float], **extra: Any) -> dict[str, Any]:
    interval = score_interval(scores).as_dict() if len(scores) > 1 else None
    return {
        **BASE,
        "avg_score": sum(scores) / len(scores),
        "count": len(scores),
        "scores": scores,
        "avg_score_interval": interval,
        **extra,
    }


def test_the_interval_of_the_summary_goes_into_the_status() -> None:
    scores = [1.0, 0.0, 1.0, 1.0]
    status = result_status(summary(scores))
    # Its ends rounded as avgScore is (kubectl's SCORE-LOW/HIGH); summary.json keeps them exact.
    assert status["avgScoreInterval"] == {
        "low": round(score_interval(scores).low, 6),
        "high": round(score_interval(scores).high, 6),
        "standardError": score_interval(scores).standard_error,
        "confidence": 0.95,
        "method": "wilson",
    }
    assert status["scores"] == scores and "scoresPacked" not in status
    one = result_status(summary([1.0]))
    assert "avgScoreInterval" not in one  # null in summary.json: no interval under 2 questions
    assert score_interval(scores).low != round(score_interval(scores).low, 6)  # 0.300641842…


def test_more_scores_than_the_list_holds_are_packed() -> None:
    scores = [float(i % 3 == 0) for i in range(MAX_STATUS_SCORES + 1)]
    status = result_status(summary(scores))
    assert "scores" not in status
    packed = EvaluationRunStatus.model_validate(status).scores_packed
    assert packed is not None and packed.dataset_sha256 == "f" * 64
    assert unpack_scores(packed) == tuple(scores)
    at_limit = result_status(summary([0.5] * MAX_STATUS_SCORES))
    assert len(at_limit["scores"]) == MAX_STATUS_SCORES and "scoresPacked" not in at_limit


def test_scores_too_large_for_the_budget_are_left_out() -> None:
    import random

    rng = random.Random(4)
    scores = [rng.random() for _ in range(40_000)]  # 320 KB of doubles, above 256 KiB
    status = EvaluationRunStatus.model_validate(result_status(summary(scores)))
    assert status.scores is None and status.scores_packed is None
    assert status.avg_score_interval is not None  # the interval is kept whatever the size


def test_the_serving_block_is_flattened_into_status_serving() -> None:
    serving = serving_status(SERVING)
    assert serving is not None
    assert (serving.ttft_p50_ms, serving.ttft_p90_ms, serving.ttft_p99_ms) == (51.0, 55.0, 58.0)
    assert (serving.tpot_p50_ms, serving.e2e_p50_ms, serving.itl_mean_ms) == (5.0, 88.0, 5.1)
    assert serving.output_tokens_per_second == 26.667 and serving.streamed is True
    assert (serving.gpus, serving.gpu_seconds, serving.wall_seconds) == (2, 3.0, 1.5)
    server = serving.server
    assert server is not None and server.url == SERVING["server"]["url"]
    assert (server.ttft_p50_ms, server.ttft_mean_ms, server.requests) == (50.0, 50.5, 4)
    assert server.e2e_p90_ms is None and server.tpot_p50_ms is None
    patch = result_status(summary([1.0, 0.0], serving=SERVING))["serving"]
    assert patch["ttftP50Ms"] == 51.0 and patch["outputTokensPerSecond"] == 26.667
    assert patch["gpuSeconds"] == 3.0 and patch["server"]["ttftP50Ms"] == 50.0
    assert "e2eP90Ms" not in patch["server"]  # unknown figures are left out, not null


def test_without_a_serving_block_there_is_no_serving_status() -> None:
    assert serving_status(None) is None
    assert "serving" not in result_status(summary([1.0, 0.0]))
    unstreamed = serving_status({"streamed": False, "requests": 2, "ttft_ms": {"mean": None}})
    assert unstreamed is not None and unstreamed.ttft_p50_ms is None
    assert result_model(summary([1.0, 0.0], serving={"streamed": False})).serving is not None
