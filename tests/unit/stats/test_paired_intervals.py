"""Issue 34: the interval of a paired difference never claims more than the data.

0/1 scores get the Bonett–Price adjusted Wald interval (Bonett & Price 2012, J. Educ. Behav.
Stat. 37(4):479-488; among the intervals Fagerland, Lydersen & Laake 2014 recommend for paired
binomial proportions). It is checked against the published worked example of Bonett's own R
package statpsych (``ci.prop.ps``), against the issue's figures (±0.027 at n = 100 and ±0.55
at n = 3 without a discordant question) and against the formula computed by hand on the
Bentur et al. (2009) airway data that Fagerland et al. use. Continuous scores whose
differences are all equal have no estimable interval: no verdict, never "non-inferior".
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from scipy import stats as sp

from kyai.stats import EQUAL_TOLERANCE, compare

Z = sp.norm.ppf(0.975)


def pairs(both: int, baseline_only: int, candidate_only: int, neither: int) -> tuple[list, list]:
    """Baseline and candidate 0/1 vectors with these counts of the paired 2x2 table."""
    base = [1.0] * both + [1.0] * baseline_only + [0.0] * candidate_only + [0.0] * neither
    cand = [1.0] * both + [0.0] * baseline_only + [1.0] * candidate_only + [0.0] * neither
    return base, cand


def test_the_published_worked_example_of_statpsych() -> None:
    # statpsych::ci.prop.ps(.05, f00 = 12, f01 = 4, f10 = 26, f11 = 6), documented to return
    # Estimate 0.44, SE 0.09448809, LL 0.2548067, UL 0.6251933: x the baseline, y the
    # candidate; f01 (x = 1, y = 0) is right only in the baseline, f10 only in the candidate.
    base, cand = pairs(both=6, baseline_only=4, candidate_only=26, neither=12)
    result = compare(base, cand)
    assert result.interval_method == "bonett-price" and result.interval is not None
    assert result.standard_error == pytest.approx(0.09448809, abs=5e-9)
    assert result.interval.low == pytest.approx(0.2548067, abs=5e-8)
    assert result.interval.high == pytest.approx(0.6251933, abs=5e-8)
    # Its "Estimate" is the adjusted difference (27 - 5)/50, the centre of the interval; the
    # mean difference shown stays the plain one, (26 - 4)/48.
    assert (result.interval.low + result.interval.high) / 2 == pytest.approx(0.44)
    assert result.mean_difference == pytest.approx(22 / 48)


def test_the_bentur_airway_data_by_hand() -> None:
    # Fagerland et al.'s example: AHR before (baseline) and after (candidate) stem cell
    # transplantation in 21 children, n11 = 1, n12 = 1, n21 = 7, n22 = 12. By hand: the
    # Laplace estimates 2/23 and 8/23, difference 6/23 = 0.26087,
    # SE = sqrt((10/23 - (6/23)^2)/23) = 0.126273, interval 0.26087 ± 1.959964 · 0.126273.
    base, cand = pairs(both=1, baseline_only=1, candidate_only=7, neither=12)
    result = compare(base, cand)
    assert result.interval is not None and result.standard_error is not None
    se = math.sqrt((10 / 23 - (6 / 23) ** 2) / 23)
    assert result.standard_error == pytest.approx(se) == pytest.approx(0.126273, abs=5e-7)
    assert result.interval.low == pytest.approx(6 / 23 - Z * se)
    assert result.interval.high == pytest.approx(6 / 23 + Z * se)
    assert (round(result.interval.low, 4), round(result.interval.high, 4)) == (0.0134, 0.5084)
    assert result.mean_difference == pytest.approx(6 / 21)  # the plain difference, 0.286
    # Baseline and candidate swapped: the mirror image (before - after = -0.5084 to -0.0134).
    mirror = compare(cand, base)
    assert mirror.interval is not None
    assert (mirror.interval.low, mirror.interval.high) == pytest.approx(
        (-result.interval.high, -result.interval.low)
    )


@pytest.mark.parametrize(("n", "half"), [(100, 0.027), (3, 0.55)])
def test_no_discordant_question_leaves_the_interval_wide(n: int, half: float) -> None:
    # The figures: ±Z·sqrt((2/(n + 2))/(n + 2)), i.e. ±0.0272 and ±0.554.
    for right in (0, n // 2, n):  # all wrong, half, all right: only discordance counts
        base, cand = pairs(both=right, baseline_only=0, candidate_only=0, neither=n - right)
        result = compare(base, cand)
        assert result.interval is not None and result.minimum_detectable_effect is not None
        expected = Z * math.sqrt(2 / (n + 2)) / math.sqrt(n + 2)
        assert result.interval.high == pytest.approx(expected) == pytest.approx(half, abs=5e-3)
        assert result.interval.low == pytest.approx(-expected)
        assert result.minimum_detectable_effect == pytest.approx(
            (Z + sp.norm.ppf(0.8)) * expected / Z
        )
        assert result.minimum_detectable_effect > 0 and result.p_value == 1.0


def test_three_questions_without_discordance_are_never_non_inferior() -> None:
    base, cand = pairs(both=0, baseline_only=0, candidate_only=0, neither=3)
    for margin in (0.0, 0.02, 0.05, 0.1, 0.2, 0.5):
        result = compare(base, cand, non_inferiority=margin)
        assert result.non_inferior is False, margin
    # Only a margin past the half-width (0.554) would pass: 55 points is no gate.
    assert compare(base, cand, non_inferiority=0.56).non_inferior is True


def test_a_hundred_questions_without_discordance_pass_005_and_not_002() -> None:
    base, cand = pairs(both=60, baseline_only=0, candidate_only=0, neither=40)
    assert compare(base, cand, non_inferiority=0.05).non_inferior is True
    assert compare(base, cand, non_inferiority=0.02).non_inferior is False


def test_the_interval_is_never_a_point_and_stays_in_bounds() -> None:
    for n in (2, 3, 5, 10, 40):
        for b, c in itertools.product(range(n + 1), repeat=2):
            if b + c > n:
                continue
            base, cand = pairs(both=0, baseline_only=b, candidate_only=c, neither=n - b - c)
            result = compare(base, cand)
            assert result.interval is not None and result.standard_error is not None
            assert result.standard_error > 0
            assert -1.0 <= result.interval.low < result.interval.high <= 1.0
            centre = (c - b) / (n + 2)
            assert result.interval.low <= centre <= result.interval.high


def _coverage(n: int, p_b: float, p_c: float, interval_of: Any) -> float:
    """Exact coverage of the true difference p_c - p_b: every 2x2 outcome of n pairs
    weighted by its multinomial probability (no simulation)."""
    covered = 0.0
    for b in range(n + 1):
        for c in range(n + 1 - b):
            weight = sp.multinomial.pmf([b, c, n - b - c], n, [p_b, p_c, 1 - p_b - p_c])
            low, high = interval_of(*pairs(both=0, baseline_only=b, candidate_only=c,
                                           neither=n - b - c))  # fmt: skip
            covered += weight * (low <= p_c - p_b <= high)
    return covered


def _bonett_price(base: list[float], cand: list[float]) -> tuple[float, float]:
    interval = compare(base, cand).interval
    assert interval is not None
    return interval.low, interval.high


def _t(base: list[float], cand: list[float]) -> tuple[float, float]:
    """The t interval of the differences that kyai.stats used before (width 0 if all equal)."""
    diff = np.array(cand) - np.array(base)
    if diff.std() == 0:
        return float(diff[0]), float(diff[0])
    found = sp.ttest_rel(cand, base).confidence_interval(0.95)
    return float(found.low), float(found.high)


@pytest.mark.parametrize(
    ("p_b", "p_c", "t_covers"), [(0.05, 0.05, 0.96), (0.1, 0.02, 0.94), (0.2, 0.2, 0.95),
                                 (0.01, 0.0, 0.26)]
)  # fmt: skip
def test_the_interval_covers_about_95_percent_where_t_did_not(
    p_b: float, p_c: float, t_covers: float
) -> None:
    # 30 pairs; with rare discordance (1 % of questions) the t interval is [0, 0] most of
    # the time and covers the truth 26 % of the time; Bonett-Price stays at 95 % or more.
    assert _coverage(30, p_b, p_c, _bonett_price) >= 0.95
    assert _coverage(30, p_b, p_c, _t) == pytest.approx(t_covers, abs=0.01)


@pytest.mark.parametrize(
    ("base", "cand"),
    [
        ([0.25, 0.5, 0.75], [0.25, 0.5, 0.75]),  # the 3 questions, continuous
        ([0.3] * 100, [0.3] * 100),  # the 100 questions, continuous
        ([0.1, 0.4, 0.7, 0.2], [0.2, 0.5, 0.8, 0.3]),  # +0.1 each, but for rounding
        ([0.0, 1.0, 0.5], [0.5, 1.0, 0.5]),  # not all equal: estimable
    ],
)
def test_continuous_scores_whose_differences_are_all_equal_give_no_verdict(
    base: list[float], cand: list[float]
) -> None:
    diffs = [c - b for b, c in zip(base, cand, strict=True)]
    equal = max(diffs) - min(diffs) <= EQUAL_TOLERANCE
    result = compare(base, cand, non_inferiority=0.05)
    assert result.test == "paired-t" and result.discordant is None
    if not equal:
        assert result.interval is not None and result.interval.high > result.interval.low
        assert result.not_estimable is None and result.non_inferior is not None
        return
    assert result.interval is None and result.minimum_detectable_effect is None
    assert result.verdict is None and result.non_inferior is None and result.p_value is None
    assert result.not_estimable is not None
    assert f"every one of the {len(base)} paired differences" in result.not_estimable
