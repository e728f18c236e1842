"""kyai.schedules' regression: each finished run against its baseline, as ``kyai compare``."""

from __future__ import annotations

from typing import Any

import pytest

from kyai.api import EvaluationRunStatus, HistoryEntry, RegressionResult
from kyai.schedules import compare_runs, pick_baseline, regression_message
from kyai.stats import compare

SHA = "ab" * 32
#: The baseline right on 36 of 40 questions.
BASE = [1.0] * 36 + [0.0] * 4
#: Loses 12 of them: clearly worse.
WORSE = [0.0] * 12 + [1.0] * 24 + [0.0] * 4
#: Loses one: not shown worse.
CLOSE = [0.0] + [1.0] * 35 + [0.0] * 4
#: Loses 6: shown worse at margin 0, by little.
SOMEWHAT = [0.0] * 6 + [1.0] * 30 + [0.0] * 4


def status(scores: list[float] | None, key: str | None = "k", **extra: Any) -> EvaluationRunStatus:
    body: dict[str, Any] = {
        "phase": "Succeeded",
        "questions": None if scores is None else len(scores),
        "comparisonKey": key,
        "datasetSha256": SHA,
        "scores": scores,
        "avgScore": None if not scores else sum(scores) / len(scores),
    }
    return EvaluationRunStatus.model_validate({**body, **extra})


def versus(candidate: list[float], baseline: list[float] = BASE, *, margin: float = 0.02,
           alpha: float = 0.05, **extra: Any) -> RegressionResult:  # fmt: skip
    return compare_runs("s-new", status(candidate, **extra), "s-old", status(baseline),
                        margin=margin, alpha=alpha)  # fmt: skip


# -- compare_runs -------------------------------------------------------------------------------


def test_a_run_clearly_worse_on_40_binary_questions_regressed() -> None:
    found = versus(WORSE)
    expected = compare(BASE, WORSE)
    assert found.regressed is True and found.reason is None
    assert (found.run, found.baseline, found.questions) == ("s-new", "s-old", 40)
    assert found.margin == 0.02
    assert found.difference == pytest.approx(-12 / 40)
    assert expected.interval is not None
    assert (found.low, found.high) == (expected.interval.low, expected.interval.high)
    assert found.p_value == expected.p_value and found.p_value < 0.001
    assert found.high is not None and found.high < -0.02


@pytest.mark.parametrize("candidate", [BASE, CLOSE])
def test_equal_runs_and_a_small_difference_did_not_regress(candidate: list[float]) -> None:
    found = versus(candidate)
    assert found.regressed is False and found.reason is None
    assert found.low is not None and found.high is not None and found.p_value is not None
    assert found.high >= -0.02


def test_the_margin_decides_on_the_interval_high_end() -> None:
    interval = compare(BASE, SOMEWHAT).interval
    assert interval is not None and interval.high < 0
    assert versus(SOMEWHAT, margin=0.0).regressed is True
    assert versus(SOMEWHAT, margin=-interval.high - 0.001).regressed is True
    assert versus(SOMEWHAT, margin=-interval.high).regressed is False  # high < -margin: strict
    assert versus(SOMEWHAT, margin=-interval.high + 0.001).regressed is False
    assert versus(SOMEWHAT, margin=0.1).margin == 0.1


def test_alpha_sets_the_level_of_the_interval() -> None:
    wide, narrow = versus(SOMEWHAT, alpha=0.01), versus(SOMEWHAT, alpha=0.2)
    assert wide.high is not None and narrow.high is not None and wide.high > narrow.high


def test_no_baseline_is_no_verdict() -> None:
    found = compare_runs("s-new", status(WORSE), None, None, margin=0.02, alpha=0.05)
    assert found.regressed is None and found.baseline is None
    assert found.reason == "no earlier Succeeded run of comparison key k"
    keyless = compare_runs("s-new", status(WORSE, key=None), None, None, margin=0, alpha=0.05)
    assert keyless.regressed is None and "no comparison key" in (keyless.reason or "")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"comparisonKey": "other"}, "the comparison keys differ (s-new other, s-old k)"),
        ({"datasetSha256": "cd" * 32}, "the rows differ (dataset sha256"),
    ],
)
def test_runs_of_other_questions_are_not_compared(extra: dict[str, Any], words: str) -> None:
    found = versus(WORSE, **extra)
    assert found.regressed is None and words in (found.reason or "")
    assert found.difference is None and found.low is None and found.p_value is None


def test_other_question_counts_are_not_compared() -> None:
    found = versus(WORSE[:39])
    assert found.regressed is None
    assert found.reason == "not compared with the baseline s-old: s-new has 39 questions, s-old 40"


def test_a_run_is_not_its_own_baseline() -> None:
    found = compare_runs("s-old", status(BASE), "s-old", status(BASE), margin=0, alpha=0.05)
    assert found.regressed is None and "not its own baseline" in (found.reason or "")


def test_scores_unavailable_is_no_verdict() -> None:
    missing = status(None, questions=40)
    found = compare_runs("s-new", missing, "s-old", status(BASE), margin=0, alpha=0.05)
    assert found.regressed is None
    assert (found.reason or "").startswith("not compared: no per-question scores")


def test_too_few_questions_is_no_verdict() -> None:
    found = versus([0.0], [1.0])
    assert found.regressed is None and "at least 2" in (found.reason or "")


def test_continuous_all_equal_differences_are_not_estimable() -> None:
    baseline = [0.5, 0.6, 0.7, 0.8, 0.9] * 8
    candidate = [round(score - 0.2, 10) for score in baseline]
    found = versus(candidate, baseline)
    assert found.regressed is None
    assert found.difference == pytest.approx(-0.2) and found.questions == 40
    assert found.low is None and found.high is None and found.p_value is None
    assert "cannot be estimated" in (found.reason or "")


# -- regression_message -------------------------------------------------------------------------


def test_the_message_of_a_regression() -> None:
    result = RegressionResult(run="s-20261205-0100", baseline="s-20261204-0100", questions=40,
                              difference=-0.125, low=-0.201, high=-0.049, p_value=0.003,
                              margin=0.02, regressed=True)  # fmt: skip
    assert regression_message(result) == (
        "run s-20261205-0100 is worse than s-20261204-0100 by 12.5 points (95 % interval "
        "-20.1 to -4.9 points, p = 0.003, margin 2.0 points, 40 questions)"
    )
    assert "(90 % interval" in regression_message(result, alpha=0.1)


def test_the_message_of_no_regression() -> None:
    result = RegressionResult(run="s-2", baseline="s-1", questions=40, difference=0.012,
                              low=-0.05, high=0.074, p_value=0.000123, margin=0.02,
                              regressed=False)  # fmt: skip
    assert regression_message(result) == (
        "run s-2 differs from s-1 by +1.2 points (95 % interval -5.0 to +7.4 points, "
        "p = 0.00012, 40 questions): not shown worse than the margin 2.0 points"
    )


def test_the_message_of_no_verdict_is_the_reason() -> None:
    found = versus(WORSE, comparisonKey="other")
    assert regression_message(found) == found.reason
    estimable = versus([round(s - 0.2, 10) for s in [0.5, 0.6] * 20], [0.5, 0.6] * 20)
    assert regression_message(estimable) == estimable.reason


def test_messages_from_real_comparisons() -> None:
    worse = regression_message(versus(WORSE))
    assert worse.startswith("run s-new is worse than s-old by 30.0 points (95 % interval ")
    assert "not shown worse than the margin 2.0 points" in regression_message(versus(CLOSE))


# -- pick_baseline ------------------------------------------------------------------------------


def entry(
    run: str, score: float | None = 0.5, phase: str = "Succeeded", key: str | None = "k"
) -> HistoryEntry:
    return HistoryEntry(run=run, trigger="schedule", phase=phase, score=score, comparison_key=key)


HISTORY = [
    entry("r1", 0.7),
    entry("r2", 0.9),
    entry("r3", 0.95, key="other"),
    entry("r4", 0.9),
    entry("r5", 0.99, phase="Failed"),
    entry("r6", 0.6),
    entry("r7", None, phase="Pending"),
]


def pick(kind: str, run: str, key: str | None = "k", pinned: str | None = None,
         history: list[HistoryEntry] = HISTORY) -> str | None:  # fmt: skip
    return pick_baseline(kind, history, run=run, comparison_key=key, pinned=pinned)


def test_previous_is_the_newest_succeeded_run_of_the_key_before_the_run() -> None:
    assert pick("previous", "r7") == "r6"
    assert pick("previous", "r6") == "r4"  # skips r5 (Failed)
    assert pick("previous", "r4") == "r2"  # skips r3 (another key)
    assert pick("previous", "r1") is None
    assert pick("previous", "r4", key="other") == "r3"
    assert pick("previous", "r-new") == "r6"  # a run not in the history: all before it
    assert pick("previous", "r7", key=None) is None


def test_a_run_of_no_comparison_key_has_no_baseline_even_among_keyless_runs() -> None:
    keyless = [entry("a", 0.9, key=None), entry("b", 0.8, key=None), entry("c", None, key=None)]
    assert pick("previous", "c", key=None, history=keyless) is None
    assert pick("best", "c", key=None, history=keyless) is None


def test_best_is_the_highest_score_of_the_key_ties_the_newest_never_the_run() -> None:
    assert pick("best", "r7") == "r4"  # r2 and r4 tie at 0.9: the newer
    assert pick("best", "r4") == "r2"
    assert pick("best", "r7", key="other") == "r3"
    assert pick("best", "r3", key="other") is None
    assert pick("best", "r7", key="none-such") is None
    best_first = [entry("a", 0.95), entry("b", 0.5), entry("c", None)]
    assert pick("best", "c", history=best_first) == "a"


def test_pinned_is_the_run_named() -> None:
    assert pick("pinned", "r7", pinned="golden") == "golden"
    assert pick("pinned", "r7", pinned=None) is None


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown baseline kind 'latest'"):
        pick("latest", "r7")
