"""The significance level reaches every test and Holm's procedure, and ``p <= α`` is the rule.

Two runs on 7 questions: the candidate right on 5 the baseline missed, both right on 2. The
exact McNemar p-value is ``binomtest(0, 5, 0.5) = 2/32 = 0.0625`` exactly, so the boundary
``p == α`` can be hit, and the pair separates at α = 0.10 but not at 0.05.
"""

from __future__ import annotations

import pytest

from kyai.stats import compare, holm, ranks
from kyai.sweeps import _memo

BASELINE = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
CANDIDATE = [1.0] * 7
P_VALUE = 0.0625


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    _memo.forget()


def test_the_p_value_is_exactly_representable() -> None:
    assert compare(BASELINE, CANDIDATE).p_value == P_VALUE


@pytest.mark.parametrize(
    ("alpha", "separated"),
    [(0.10, True), (P_VALUE, True), (0.0624, False), (0.05, False)],
    ids=["0.10", "p-equals-alpha", "just-below-p", "0.05"],
)
def test_the_level_decides_and_p_equal_to_alpha_is_significant(
    alpha: float, separated: bool
) -> None:
    comparison = compare(BASELINE, CANDIDATE, alpha=alpha)
    assert comparison.significant is separated
    assert comparison.verdict == ("better" if separated else "no detectable difference")
    assert holm([P_VALUE], alpha=alpha) == [separated]
    expected = [2, 1] if separated else [1, 1]
    assert ranks([BASELINE, CANDIDATE], alpha=alpha) == expected
    # The sweep's remembered ranks are the same function: the level reaches Holm there too.
    assert _memo.tie_aware_ranks([BASELINE, CANDIDATE], alpha=alpha) == expected


def test_holm_steps_down_at_the_level_given() -> None:
    # Sorted p-values 0.01, 0.03, 0.04 against α/3, α/2, α: at α = 0.09 all three fall
    # (0.01 <= 0.03, 0.03 <= 0.045, 0.04 <= 0.09); at α = 0.05 only the first.
    p_values = [0.04, 0.01, 0.03]
    assert holm(p_values, alpha=0.09) == [True, True, True]
    assert holm(p_values, alpha=0.05) == [False, True, False]
    # The boundary of a step: 0.03 is exactly α/2 at α = 0.06.
    assert holm(p_values, alpha=0.06) == [True, True, True]


def test_the_memo_keeps_levels_apart() -> None:
    """A comparison remembered at one level is never served at another."""
    at_ten = _memo.comparison(BASELINE, CANDIDATE, alpha=0.10)
    at_five = _memo.comparison(BASELINE, CANDIDATE, alpha=0.05)
    assert (at_ten.significant, at_five.significant) == (True, False)
    assert (at_ten.alpha, at_five.alpha) == (0.10, 0.05)


def test_three_runs_rank_alike_through_both_paths() -> None:
    worse = [0.0] * 7
    vectors = [BASELINE, CANDIDATE, worse]
    for alpha in (0.01, 0.05, 0.10, 0.2):
        assert _memo.tie_aware_ranks(vectors, alpha=alpha) == ranks(vectors, alpha=alpha)


def test_a_level_outside_the_unit_interval_is_refused_even_for_one_run() -> None:
    from kyai.stats import StatsError

    with pytest.raises(StatsError):
        ranks([BASELINE], alpha=1.5)
