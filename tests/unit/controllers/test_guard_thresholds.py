"""Guards of a run's thresholds (issue 14, the controller group of ``make mutation``): the
Passed condition at and around each boundary, as :func:`threshold_condition` decides it for
the run controller (the system test ``tests/system/test_guard_runs.py`` checks the same
through the operator)."""

from __future__ import annotations

import pytest

from kyai.api.evaluationrun import Thresholds
from kyai.controllers._conditions import Change
from kyai.controllers._thresholds import combine_passed, metric_gate, threshold_condition


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
    assert condition == Change("Passed", passed, reason, message)


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
    assert condition == Change("Passed", passed, reason, message)


def test_both_misses_are_named() -> None:
    condition = threshold_condition(Thresholds(avg_score=0.9, max_error_rate=0.0), 0.5, 1, 4)
    assert condition == Change(
        "Passed",
        False,
        "ThresholdsMissed",
        "avgScore 0.5000 < 0.9; error rate 0.2500 > 0.0",
    )


def test_metric_gate_and_combined_passed() -> None:
    # thresholds.metrics gates status.metrics whatever the kind of run (an lm-eval run's).
    thresholds = Thresholds(metrics={"gsm8k/exact_match,strict-match": 0.5, "gsm8k/acc,none": 0.1})
    change, missing = metric_gate(thresholds, {"gsm8k/exact_match,strict-match": 0.6})
    assert change is not None and change.status is False
    assert "gsm8k/acc,none is missing" in change.message
    assert missing == {"gsm8k/acc,none": -1.0}
    change, missing = metric_gate(
        thresholds, {"gsm8k/exact_match,strict-match": 0.5, "gsm8k/acc,none": 0.1}
    )
    assert change is not None and change.status is True and missing == {}
    assert metric_gate(None, {"a/b": 1.0}) == (None, {})
    ok = Change("Passed", True, "ThresholdsMet", "every threshold is met")
    bad = Change("Passed", False, "ThresholdsMissed", "avgScore 0.1 < 0.5")
    assert combine_passed(None, ok) == ok and combine_passed(ok, None) == ok
    assert combine_passed(ok, ok) == ok
    assert combine_passed(ok, bad) == bad
    both = combine_passed(bad, Change("Passed", False, "ThresholdsMissed", "x/y is missing"))
    assert both is not None and both.message == "avgScore 0.1 < 0.5; x/y is missing"


@pytest.mark.parametrize(
    ("gates", "reason", "first"),
    [
        # A baseline of other rows, and a score under its threshold: the comparison must be
        # fixed first, whatever the order of the gates.
        (("score", "comparable"), "NotComparable", "not compared with base"),
        (("comparable", "score"), "NotComparable", "not compared with base"),
        (("metric", "unavailable", "score"), "ScoresUnavailable", "scores of base are gone"),
        (("score", "estimable", "metric"), "NotEstimable", "no verdict"),
        (("score", "metric"), "ThresholdsMissed", "avgScore 0.1000 < 0.5"),
        (("comparable", "unavailable"), "NotComparable", "not compared with base"),
    ],
)
def test_a_combined_passed_keeps_the_reason_to_act_on(
    gates: tuple[str, ...], reason: str, first: str
) -> None:
    made = {
        "score": Change("Passed", False, "ThresholdsMissed", "avgScore 0.1000 < 0.5"),
        "metric": Change("Passed", False, "ThresholdsMissed", "x/y is missing"),
        "comparable": Change("Passed", False, "NotComparable", "not compared with base: rows"),
        "unavailable": Change("Passed", False, "ScoresUnavailable", "scores of base are gone"),
        "estimable": Change("Passed", False, "NotEstimable", "no verdict: all equal"),
    }
    ok = Change("Passed", True, "ThresholdsMet", "every threshold is met")
    combined = combine_passed(ok, *(made[name] for name in gates))
    assert combined is not None and combined.status is False
    assert combined.reason == reason
    assert combined.message.startswith(first)
    # Every failure is still said, none twice; the passing gate is not.
    for name in gates:
        assert combined.message.count(made[name].message) == 1
    assert "every threshold is met" not in combined.message
