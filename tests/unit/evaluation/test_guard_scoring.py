"""Guards for two scoring rules (issue 14): a row without a judgement scores 0, and the
comparison key covers the generation prompt. Written against the public ``kyai.evaluation``."""

from __future__ import annotations

from typing import Any

import pytest

from kyai.evaluation import SCORING_METHOD, comparison_key, score_rows

JUDGE = {"type": "llm", "model": "judge", "prompt": "Return JSON.", "temperature": 0.0}


def test_a_row_without_a_judgement_scores_zero_and_stays_in_the_denominator() -> None:
    judgements = {0: {"score": 1.0, "error": None}, 2: {"score": 1.0, "error": None}}
    summary = score_rows(3, judgements, {})
    assert summary["scores"] == [1.0, 0.0, 1.0]
    assert summary["avg_score"] == pytest.approx(2 / 3, abs=1e-6)
    assert summary["count"] == 3
    assert summary["errors"] == {"missing_judgement": 1}
    assert summary["error_count"] == 1


def test_no_judgement_at_all_scores_zero() -> None:
    summary = score_rows(2, {}, {})
    assert summary["scores"] == [0.0, 0.0]
    assert summary["avg_score"] == 0.0
    assert summary["errors"] == {"missing_judgement": 2}


def test_an_errored_judgement_scores_zero_whatever_score_it_carries() -> None:
    judgements = {0: {"score": 1.0, "error": {"kind": "judge_unparseable"}}}
    summary = score_rows(1, judgements, {})
    assert summary["scores"] == [0.0]
    assert summary["errors"] == {"judge_unparseable": 1}


def key(**changes: object) -> str:
    fields: dict[str, object] = {
        "dataset_sha256": "a" * 64,
        "generation_prompt": "Answer with the bare answer only.",
        "judge": JUDGE,
        "scoring_method": SCORING_METHOD,
    }
    fields.update(changes)
    return comparison_key(**fields)  # type: ignore[arg-type]


def test_the_comparison_key_follows_the_generation_prompt() -> None:
    assert key() == key()  # deterministic
    assert key(generation_prompt="Think step by step, then answer.") != key()
    # Each other part of the key still counts too.
    assert key(dataset_sha256="b" * 64) != key()
    assert key(judge={**JUDGE, "prompt": "Stricter."}) != key()
    assert key(scoring_method="other/v1") != key()


def test_the_comparison_key_is_stable_across_versions() -> None:
    # Keys are stored in summaries and labels: the same inputs must keep the same key, or
    # results of older runs silently stop being comparable with new ones.
    assert key() == "12a48c8fa1cc96e3"


def test_error_kinds_are_counted_and_a_kindless_error_is_unknown() -> None:
    judgements: dict[int, dict[str, Any]] = {
        0: {"score": 0.0, "error": {"kind": "judge_http_error"}},
        1: {"score": 0.0, "error": {"kind": "judge_http_error"}},
        2: {"score": 0.0, "error": {"message": "no kind"}},
        3: {"score": 1.0, "error": None},
    }
    summary = score_rows(4, judgements, {})
    assert summary["errors"] == {"judge_http_error": 2, "unknown_error": 1}
    assert summary["error_count"] == 3
    assert summary["avg_score"] == 0.25


def generation(latency: float | None, *, error: bool = False, **usage: int) -> dict[str, object]:
    return {
        "latency_ms": latency,
        "error": {"kind": "candidate_http_error"} if error else None,
        "usage": usage or None,
    }


def test_latency_figures_come_from_successful_answers_only() -> None:
    generations = {i: generation(float(i + 1)) for i in range(100)}  # 1 .. 100 ms
    generations[100] = generation(100000.0, error=True)  # a failed request: no answer latency
    generations[101] = generation(None)
    summary = score_rows(102, {}, generations)
    assert summary["avg_latency_ms"] == 50.5
    assert summary["latency_ms_p50"] == 50.5
    assert summary["latency_ms_p95"] == 95.05


def test_one_latency_is_every_percentile_and_none_is_none() -> None:
    one = score_rows(1, {}, {0: generation(12.5)})
    assert one["avg_latency_ms"] == one["latency_ms_p50"] == one["latency_ms_p95"] == 12.5
    two = score_rows(2, {}, {0: generation(10.0), 1: generation(20.0)})
    assert two["latency_ms_p50"] == 15.0 and two["latency_ms_p95"] == 19.5
    none = score_rows(1, {}, {0: generation(None, error=True)})
    assert none["avg_latency_ms"] is None and none["latency_ms_p50"] is None


def test_token_usage_is_summed_over_every_record() -> None:
    generations = {
        0: generation(1.0, prompt_tokens=10, completion_tokens=5),
        1: generation(1.0, prompt_tokens=7, completion_tokens=3),
        2: generation(None, error=True),
    }
    summary = score_rows(3, {}, generations)
    assert summary["usage"] == {"prompt_tokens": 17, "completion_tokens": 8}


def test_figures_are_rounded_and_an_empty_dataset_scores_zero() -> None:
    third = score_rows(3, {0: {"score": 1.0, "error": None}}, {})
    assert third["avg_score"] == 0.333333  # 6 digits
    latencies = {0: generation(1.00049), 1: generation(2.0), 2: generation(2.00049)}
    summary = score_rows(3, {}, latencies)
    assert summary["avg_latency_ms"] == 1.667  # 3 digits
    assert summary["latency_ms_p50"] == 2.0
    assert summary["latency_ms_p95"] == 2.0  # 2.00044..., 3 digits
    close = score_rows(2, {}, {0: generation(1.0), 1: generation(1.0003)})
    assert close["avg_latency_ms"] == close["latency_ms_p50"] == 1.0
    empty = score_rows(0, {}, {})
    assert empty["avg_score"] == 0.0 and empty["count"] == 0 and empty["scores"] == []
