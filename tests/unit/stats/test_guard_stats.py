"""kyai.stats at its edges: the margin's and the tolerance's boundaries, the fields of a
comparison that draws no verdict, the JSON keys and the refusals' words (issue 36's mutation
pass)."""

from __future__ import annotations

import pytest

from kyai.stats import EQUAL_TOLERANCE, POWER, StatsError, compare, ranks, score_interval


def test_a_comparison_without_a_verdict_still_states_its_size_and_level() -> None:
    result = compare([0.5] * 6, [0.75] * 6, alpha=0.10, non_inferiority=0.05)
    assert (result.n, result.alpha, result.power) == (6, 0.10, POWER)
    assert result.confidence == pytest.approx(0.90)
    assert result.significant is False and result.non_inferior is None
    assert result.not_estimable == (
        "every one of the 6 paired differences (candidate - baseline) is +0.25, so their "
        "variance, and with it the interval of the difference (t), cannot be estimated"
    )
    data = result.as_dict()
    assert (data["n"], data["alpha"], data["power"], data["significant"]) == (6, 0.10, POWER, False)
    assert data["confidence"] == pytest.approx(0.90)


def test_differences_spread_by_exactly_the_tolerance_count_as_equal() -> None:
    # 0 and 1e-9 differ by exactly EQUAL_TOLERANCE in floating point ("at most" it: equal).
    at = compare([0.0, 0.0, 0.0], [0.0, EQUAL_TOLERANCE, 0.0])
    assert at.not_estimable is not None and at.p_value is None
    beyond = compare([0.0, 0.0, 0.0], [0.0, 2 * EQUAL_TOLERANCE, 0.0])
    assert beyond.not_estimable is None and beyond.p_value is not None


def test_continuous_scores_state_the_t_interval_and_the_level() -> None:
    result = compare([0.2, 0.4, 0.5, 0.9], [0.3, 0.4, 0.7, 0.8], alpha=0.10)
    assert (result.test, result.interval_method) == ("paired-t", "t")
    data = result.as_dict()
    assert (data["interval_method"], data["alpha"], data["power"]) == ("t", 0.10, POWER)
    assert data["confidence"] == pytest.approx(0.90)


@pytest.mark.parametrize(("margin", "accepted"), [(0.0, True), (1.0, True), (1.5, False)])
def test_the_margin_lies_in_0_to_1_both_included(margin: float, accepted: bool) -> None:
    if accepted:
        assert compare([0.0, 1.0], [0.0, 1.0], non_inferiority=margin).non_inferiority_margin == (
            margin
        )
        return
    with pytest.raises(StatsError) as caught:
        compare([0.0, 1.0], [0.0, 1.0], non_inferiority=margin)
    assert str(caught.value) == f"the non-inferiority margin must lie in [0, 1], got {margin!r}"


def test_the_refusals_name_the_run_and_the_rule() -> None:
    with pytest.raises(StatsError) as caught:
        compare([0.0, 2.0], [0.0, 1.0])
    assert str(caught.value).startswith("baseline: the score of row 1 is 2.0, outside [0, 1]")
    with pytest.raises(StatsError) as caught:
        compare([0.0, 1.0], [0.0, 1.0, 1.0])
    assert str(caught.value) == (
        "the baseline has 2 scores and the candidate 3: a paired comparison needs the same "
        "questions"
    )
    with pytest.raises(StatsError) as caught:
        score_interval([0.0, -0.5])
    assert str(caught.value).startswith("scores: the score of row 1 is -0.5, outside [0, 1]")
    with pytest.raises(StatsError) as caught:
        score_interval([1.0])
    assert str(caught.value) == (
        "scores: 1 question(s); an interval or a test needs at least 2 (the sample standard "
        "deviation of fewer is undefined)"
    )
    with pytest.raises(StatsError) as caught:
        compare([[0.0, 1.0], [1.0, 0.0]], [0.0, 1.0])  # type: ignore[list-item]
    assert str(caught.value) == "baseline: expected a flat list of per-question scores"


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_a_level_of_0_or_1_is_refused(alpha: float) -> None:
    with pytest.raises(StatsError) as caught:
        compare([0.0, 1.0], [0.0, 1.0], alpha=alpha)
    assert str(caught.value) == f"alpha must lie strictly between 0 and 1, got {alpha!r}"


def test_a_run_right_wherever_the_other_is_wrong_ranks_above_it() -> None:
    # Every difference is +1 (mean difference 1): McNemar p = 2/2^7, significant.
    assert compare([0.0] * 7, [1.0] * 7).verdict == "better"
    assert compare([1.0] * 7, [0.0] * 7).verdict == "worse"
    assert ranks([[0.0] * 7, [1.0] * 7]) == [2, 1]
    assert ranks([[1.0] * 7, [0.0] * 7]) == [1, 2]
