"""summary.json's ``avg_score_interval`` (issue 21): Wilson for 0/1 scores, else t, errors 0."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as sp

from kyai.evaluation import score_rows


def judged(scores: list[float | None]) -> dict[int, dict[str, object]]:
    """Judgements by row; None is a judge error (the row scores 0 whatever it carried)."""
    return {
        i: {"score": 1.0, "error": {"kind": "judge_http"}}
        if score is None
        else {"score": score, "error": None}
        for i, score in enumerate(scores)
    }


def test_binary_scores_with_errors_get_the_wilson_interval_of_the_fail_closed_scores() -> None:
    # 7 right, 2 wrong, 1 judge error (counts 0 even though it carried 1.0): 7 of 10.
    summary = score_rows(10, judged([1.0] * 7 + [0.0, 0.0, None]), {})
    interval = summary["avg_score_interval"]
    ci = sp.binomtest(7, 10).proportion_ci(0.95, method="wilson")
    assert interval["method"] == "wilson" and interval["confidence"] == 0.95
    assert (interval["low"], interval["high"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert interval["standard_error"] == pytest.approx(np.std(summary["scores"], ddof=1) / 10**0.5)


def test_continuous_scores_get_the_t_interval() -> None:
    scores = [0.5, 1.0, 0.25, 0.75, 0.0, 1.0]
    summary = score_rows(6, judged(list(scores)), {})
    interval = summary["avg_score_interval"]
    low, high = sp.t.interval(0.95, 5, loc=np.mean(scores), scale=sp.sem(scores))
    assert interval["method"] == "t"
    assert (interval["low"], interval["high"]) == (
        pytest.approx(low),
        pytest.approx(min(1.0, high)),
    )
    assert high > 1  # clipped


def test_no_interval_under_two_questions() -> None:
    assert score_rows(1, judged([1.0]), {})["avg_score_interval"] is None
    assert score_rows(0, {}, {})["avg_score_interval"] is None


def test_the_command_line_does_not_import_scipy_or_numpy() -> None:
    """``kyai --version`` / ``--help`` build every parser: scipy stays out of that path."""
    code = (
        "import sys, kyai.cli; kyai.cli.build_parser(); "
        "print(sorted(m for m in ('scipy', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
