"""Guards of a run's thresholds (issue 14, the controller group of ``make mutation``): the
Passed condition at and around each boundary, as :func:`threshold_condition` decides it for
the run controller (the system test ``tests/system/test_guard_runs.py`` checks the same
through the operator)."""

from __future__ import annotations

import pytest

from kyai.api.evaluationrun import Thresholds
from kyai.controllers.evaluationrun import threshold_condition


def test_no_thresholds_no_condition() -> None:
    assert threshold_condition(None, 0.5, 0, 10) is None
    assert threshold_condition(Thresholds(), 0.5, 0, 10) is None


@pytest.mark.parametrize(
    ("score", "passed", "message"),
    [
        (0.8, True, "every threshold is met"),  # at the boundary: passes
        (0.81, True, "every threshold is met"),
        (0.7999, False, "avgScore 0.7999 < 0.8"),
    ],
)
def test_avg_score_passes_at_equality(score: float, passed: bool, message: str) -> None:
    condition = threshold_condition(Thresholds(avg_score=0.8), score, 0, 10)
    reason = "ThresholdsMet" if passed else "ThresholdsMissed"
    assert condition == ("Passed", passed, reason, message)


@pytest.mark.parametrize(
    ("errors", "questions", "passed", "message"),
    [
        (1, 10, True, "every threshold is met"),  # 0.1 at a 0.1 limit: passes
        (0, 10, True, "every threshold is met"),
        (2, 10, False, "error rate 0.2000 > 0.1"),
        (0, 0, True, "every threshold is met"),  # no question: no error rate
    ],
)
def test_max_error_rate_passes_at_equality(
    errors: int, questions: int, passed: bool, message: str
) -> None:
    condition = threshold_condition(Thresholds(max_error_rate=0.1), 1.0, errors, questions)
    reason = "ThresholdsMet" if passed else "ThresholdsMissed"
    assert condition == ("Passed", passed, reason, message)


def test_both_misses_are_named() -> None:
    condition = threshold_condition(Thresholds(avg_score=0.9, max_error_rate=0.0), 0.5, 1, 4)
    assert condition == (
        "Passed",
        False,
        "ThresholdsMissed",
        "avgScore 0.5000 < 0.9; error rate 0.2500 > 0.0",
    )
