"""Guards for two scoring rules (issue 14): a row without a judgement scores 0, and the
comparison key covers the generation prompt. Written against the public ``kyai.evaluation``."""

from __future__ import annotations

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
