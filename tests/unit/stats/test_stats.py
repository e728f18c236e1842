"""kyai.stats against scipy and against hand computations, on fixed vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from kyai.stats import (
    Comparison,
    Interval,
    StatsError,
    compare,
    holm,
    is_binary,
    ranks,
    score_interval,
)

Z = sp.norm.ppf(0.975)


def binary(ones: set[int], n: int = 100) -> list[float]:
    return [1.0 if i in ones else 0.0 for i in range(n)]


def wilson_formula(k: int, n: int, z: float) -> tuple[float, float]:
    """The closed form of the Wilson score interval (no continuity correction)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


# -- one run ------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 37, 70, 99, 100])
def test_binary_scores_get_the_wilson_interval_of_scipy_and_of_the_formula(k: int) -> None:
    scores = binary(set(range(k)))
    interval = score_interval(scores)
    ci = sp.binomtest(k, 100).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = wilson_formula(k, 100, Z)
    assert interval.method == "wilson" and interval.confidence == 0.95
    assert interval.low == pytest.approx(ci.low, abs=1e-12) == pytest.approx(low, abs=1e-12)
    assert interval.high == pytest.approx(ci.high, abs=1e-12) == pytest.approx(high, abs=1e-12)
    assert interval.standard_error == pytest.approx(np.std(scores, ddof=1) / 10, abs=1e-15)


def test_the_wilson_interval_at_70_of_100_by_hand() -> None:
    interval = score_interval(binary(set(range(70))))
    assert (round(interval.low, 4), round(interval.high, 4)) == (0.6042, 0.7811)
    # sd of seventy 1s and thirty 0s (ddof 1) is sqrt(0.21 * 100 / 99)
    assert interval.standard_error == pytest.approx(math.sqrt(0.21 * 100 / 99) / 10)


def test_continuous_scores_get_the_t_interval() -> None:
    scores = [0.0, 0.25, 0.5, 0.5, 0.75, 1.0, 0.5, 0.3, 0.9, 0.6]
    interval = score_interval(scores)
    mean, sem = np.mean(scores), sp.sem(scores)
    low, high = sp.t.interval(0.95, len(scores) - 1, loc=mean, scale=sem)
    assert interval.method == "t"
    assert interval.standard_error == pytest.approx(sem, abs=1e-15)
    assert (interval.low, interval.high) == (pytest.approx(low), pytest.approx(high))
    half = sp.t.ppf(0.975, 9) * np.std(scores, ddof=1) / math.sqrt(10)
    assert interval.high - interval.low == pytest.approx(2 * half)


def test_the_t_interval_is_clipped_to_0_and_1() -> None:
    scores = [1.0, 1.0, 1.0, 0.5]
    interval = score_interval(scores)
    low, high = sp.t.interval(0.95, 3, loc=np.mean(scores), scale=sp.sem(scores))
    assert high > 1 and interval.high == 1.0
    assert interval.low == pytest.approx(low)
    low_end = score_interval([0.0, 0.0, 0.0, 0.5])
    assert low_end.low == 0.0 and low_end.high < 1.0


def test_all_equal_scores() -> None:
    flat = score_interval([0.5] * 20)
    assert flat == Interval(0.5, 0.5, 0.0, 0.95, "t")
    perfect = score_interval([1.0] * 100)  # Wilson: not a point, the data cannot rule out 0.96
    assert perfect.method == "wilson" and perfect.high == 1.0 and perfect.standard_error == 0.0
    assert perfect.low == pytest.approx(100 / (100 + Z * Z))
    nothing = score_interval([0.0] * 100)
    assert nothing.low == 0.0 and nothing.high == pytest.approx(Z * Z / (100 + Z * Z))


def test_another_confidence() -> None:
    interval = score_interval(binary(set(range(70))), confidence=0.90)
    ci = sp.binomtest(70, 100).proportion_ci(confidence_level=0.90, method="wilson")
    assert interval.confidence == 0.90 and interval.low == pytest.approx(ci.low)


@pytest.mark.parametrize(
    ("scores", "complaint"),
    [
        ([], "0 question(s)"),
        ([1.0], "1 question(s)"),
        ([0.5, 1.5], "row 1 is 1.5, outside [0, 1]"),
        ([0.5, -0.1, 2.0], "row 1 is -0.1, outside [0, 1] (2 such row(s))"),
        ([0.5, float("nan")], "row 1 is nan"),
    ],
)
def test_unusable_scores_are_refused(scores: list[float], complaint: str) -> None:
    with pytest.raises(StatsError, match=r"needs at least 2|outside|nan") as caught:
        score_interval(scores)
    assert complaint in str(caught.value)


def test_is_binary() -> None:
    assert is_binary([0.0, 1.0, 1, 0]) and not is_binary([0.0, 0.5])


def test_interval_round_trips_through_its_mapping() -> None:
    interval = score_interval(binary({1, 2, 3}, 10))
    assert Interval.from_mapping(interval.as_dict(), where="x") == interval
    with pytest.raises(StatsError, match="x: field 'method'"):
        Interval.from_mapping({**interval.as_dict(), "method": "normal"}, where="x")
    with pytest.raises(StatsError, match="y: field 'low'"):
        Interval.from_mapping({**interval.as_dict(), "low": None}, where="y")


# -- two runs -----------------------------------------------------------------------------------


def t_interval_of(diff: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    n = diff.size
    half = sp.t.ppf(1 - alpha / 2, n - 1) * np.std(diff, ddof=1) / math.sqrt(n)
    return float(diff.mean() - half), float(diff.mean() + half)


def bonett_price_of(b: int, c: int, n: int, alpha: float = 0.05) -> tuple[float, float, float]:
    """Bonett & Price (2012) for candidate - baseline, from the discordant counts: low, high, SE.

    Laplace estimates of the two discordant cells, (b + 1)/(n + 2) and (c + 1)/(n + 2).
    """
    pi_b, pi_c = (b + 1) / (n + 2), (c + 1) / (n + 2)
    se = math.sqrt((pi_b + pi_c - (pi_b - pi_c) ** 2) / (n + 2))
    z = sp.norm.ppf(1 - alpha / 2)
    return max(-1.0, pi_c - pi_b - z * se), min(1.0, pi_c - pi_b + z * se), se


def test_binary_comparison_is_mcnemar_exact() -> None:
    # The baseline is right on rows 0..59; the candidate on 0..58 and 60..67: b = 1 (row 59),
    # c = 8 (rows 60..67). Exact McNemar: 2 * P(X <= 1 | 9, ½) = 2 * (1 + 9) / 512.
    base, cand = binary(set(range(60))), binary(set(range(59)) | set(range(60, 68)))
    result = compare(base, cand)
    assert result.test == "mcnemar-exact"
    assert (result.discordant.baseline_only, result.discordant.candidate_only) == (1, 8)  # type: ignore[union-attr]
    assert result.p_value == 20 / 512 == sp.binomtest(1, 9, 0.5).pvalue
    assert result.significant and result.verdict == "better"
    assert result.mean_difference == pytest.approx(0.07)
    # The interval is Bonett-Price's: centred on (c - b)/(n + 2) = 7/102, SE from the
    # Laplace estimates 2/102 and 9/102; the MDE from the same SE.
    low, high, se = bonett_price_of(1, 8, 100)
    assert result.interval_method == "bonett-price" and result.interval is not None
    assert (result.interval.low, result.interval.high) == (pytest.approx(low), pytest.approx(high))
    assert (result.interval.low + result.interval.high) / 2 == pytest.approx(7 / 102)
    assert result.standard_error == pytest.approx(se)
    mde = (sp.norm.ppf(0.975) + sp.norm.ppf(0.8)) * se
    assert result.minimum_detectable_effect == pytest.approx(mde)
    assert result.n == 100 and result.confidence == 0.95 and result.power == 0.8


def test_the_other_way_round_is_worse_with_the_same_p_value() -> None:
    base, cand = binary(set(range(60))), binary(set(range(59)) | set(range(60, 68)))
    forward, backward = compare(base, cand), compare(cand, base)
    assert backward.verdict == "worse" and backward.p_value == forward.p_value
    assert backward.interval.low == pytest.approx(-forward.interval.high)


def test_no_discordant_question() -> None:
    scores = binary(set(range(42)))
    result = compare(scores, list(scores))
    assert result.discordant is not None
    assert (result.discordant.baseline_only, result.discordant.candidate_only) == (0, 0)
    assert result.p_value == 1.0 and not result.significant
    assert result.verdict == "no detectable difference"
    # Not [0, 0]: no discordance on 100 questions still leaves about ±2.7 points.
    low, high, se = bonett_price_of(0, 0, 100)
    assert result.interval is not None and result.interval.low == pytest.approx(low)
    assert result.interval.high == pytest.approx(high) == pytest.approx(-low)
    assert result.standard_error == pytest.approx(se) and se > 0
    assert result.minimum_detectable_effect is not None and result.minimum_detectable_effect > 0


def test_small_discordance_is_not_significant() -> None:
    result = compare(binary(set(range(70))), binary(set(range(67))))
    assert result.p_value == sp.binomtest(0, 3, 0.5).pvalue == 0.25
    assert result.verdict == "no detectable difference" and result.interval.low < 0


CONTINUOUS_BASE = [0.1, 0.5, 0.5, 0.75, 1.0, 0.0, 0.25, 0.5, 0.9, 0.6, 0.3, 0.5]
CONTINUOUS_CAND = [0.2, 0.5, 1.0, 0.75, 1.0, 0.5, 0.25, 0.75, 1.0, 0.6, 0.5, 0.5]


def test_continuous_comparison_is_the_paired_t_test() -> None:
    result = compare(CONTINUOUS_BASE, CONTINUOUS_CAND)
    reference = sp.ttest_rel(CONTINUOUS_CAND, CONTINUOUS_BASE)
    assert result.test == "paired-t" and result.discordant is None
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-12)
    ci = reference.confidence_interval(0.95)
    assert (result.interval.low, result.interval.high) == (
        pytest.approx(ci.low),
        pytest.approx(ci.high),
    )
    diff = np.array(CONTINUOUS_CAND) - np.array(CONTINUOUS_BASE)
    assert result.mean_difference == pytest.approx(diff.mean())
    assert result.standard_error == pytest.approx(sp.sem(diff))
    assert result.significant == (reference.pvalue <= 0.05)


def test_one_binary_run_and_one_continuous_run_use_the_t_test() -> None:
    base = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    cand = [1.0, 0.5, 1.0, 0.5, 0.0, 1.0]
    result = compare(base, cand)
    assert result.test == "paired-t" and result.discordant is None
    assert result.p_value == pytest.approx(sp.ttest_rel(cand, base).pvalue)


def test_equal_continuous_runs_and_constant_differences_draw_no_verdict() -> None:
    # No variance is seen, so none is estimated: no interval, no p-value, no verdict.
    same = compare(CONTINUOUS_BASE, list(CONTINUOUS_BASE), non_inferiority=0.05)
    up = compare([0.5] * 8, [0.75] * 8, non_inferiority=0.05)  # every question 0.25 better
    # Equal but for rounding (0.5 - 0.4 and 0.6 - 0.5): equal too, and scipy's precision
    # warning (an error in this suite) is never reached.
    noisy = compare([0.4, 0.5, 0.6], [0.5, 0.6, 0.7], non_inferiority=0.05)
    for result, mean in ((same, 0.0), (up, 0.25), (noisy, 0.1)):
        assert result.mean_difference == pytest.approx(mean)
        assert result.interval is None and result.standard_error is None
        assert result.p_value is None and not result.significant
        assert result.minimum_detectable_effect is None
        assert result.verdict is None and result.non_inferior is None
        assert result.test == "paired-t" and result.interval_method == "t"
        assert result.not_estimable is not None and "cannot be estimated" in result.not_estimable
        assert result.rank_p_value == 1.0
    assert "is +0.25" in (up.not_estimable or "")
    data = up.as_dict()
    assert data["interval"] is None and data["verdict"] is None and data["non_inferior"] is None
    assert data["not_estimable"] == up.not_estimable


def test_non_inferiority_is_the_low_end_of_the_interval_against_the_margin() -> None:
    base, cand = binary(set(range(70))), binary(set(range(67)))
    plain = compare(base, cand)
    assert plain.non_inferior is None and "non_inferior" not in plain.as_dict()
    assert plain.interval is not None
    low = plain.interval.low  # about -0.072 (Bonett-Price, b = 3, c = 0)
    assert compare(base, cand, non_inferiority=-low + 0.001).non_inferior is True
    assert compare(base, cand, non_inferiority=-low - 0.001).non_inferior is False
    at_the_edge = compare(base, cand, non_inferiority=-low)
    assert at_the_edge.non_inferior is False  # low > -M is strict
    data = compare(base, cand, non_inferiority=0.02).as_dict()
    assert data["non_inferiority_margin"] == 0.02 and data["non_inferior"] is False


def test_alpha_moves_every_level() -> None:
    base, cand = binary(set(range(60))), binary(set(range(59)) | set(range(60, 68)))
    result = compare(base, cand, alpha=0.01)
    assert result.confidence == 0.99 and not result.significant  # p = 0.039
    assert result.verdict == "no detectable difference"
    low, high, se = bonett_price_of(1, 8, 100, alpha=0.01)
    assert result.interval is not None
    assert (result.interval.low, result.interval.high) == pytest.approx((low, high))
    mde = (sp.norm.ppf(0.995) + sp.norm.ppf(0.8)) * se
    assert result.minimum_detectable_effect == pytest.approx(mde)
    continuous = compare(CONTINUOUS_BASE, CONTINUOUS_CAND, alpha=0.01)
    diff = np.array(CONTINUOUS_CAND) - np.array(CONTINUOUS_BASE)
    assert continuous.interval is not None
    assert (continuous.interval.low, continuous.interval.high) == pytest.approx(
        t_interval_of(diff, 0.01)
    )
    mde = (sp.norm.ppf(0.995) + sp.norm.ppf(0.8)) * sp.sem(diff)
    assert continuous.minimum_detectable_effect == pytest.approx(mde)


def test_comparison_json_has_the_issue_keys() -> None:
    data = compare(binary({1, 2}, 10), binary({2, 3, 4}, 10)).as_dict()
    assert set(data) >= {
        "n", "mean_difference", "standard_error", "interval", "interval_method", "test",
        "p_value", "significant", "minimum_detectable_effect", "discordant", "verdict",
        "not_estimable",
    }  # fmt: skip
    assert data["discordant"] == {"baseline_only": 1, "candidate_only": 2}
    assert set(data["interval"]) == {"low", "high"}
    assert data["interval_method"] == "bonett-price" and data["not_estimable"] is None


@pytest.mark.parametrize(
    ("base", "cand", "kwargs", "complaint"),
    [
        ([0.0, 1.0], [1.0, 0.0, 1.0, 1.5], {}, "candidate: the score of row 3 is 1.5"),
        ([0.0, 1.0], [1.0, 0.0, 1.0], {}, "the baseline has 2 scores and the candidate 3"),
        ([1.0], [1.0], {}, "1 question(s)"),
        ([0.0, 1.0], [0.0, 1.0], {"alpha": 0.0}, "alpha must lie strictly between 0 and 1"),
        ([0.0, 1.0], [0.0, 1.0], {"non_inferiority": -0.1}, "margin must lie in [0, 1]"),
    ],
)
def test_comparisons_that_are_refused(
    base: list[float], cand: list[float], kwargs: dict[str, float], complaint: str
) -> None:
    with pytest.raises(StatsError) as caught:
        compare(base, cand, **kwargs)
    assert complaint in str(caught.value)


# -- Holm and ranks -----------------------------------------------------------------------------


def holm_adjusted(p_values: list[float]) -> list[float]:
    """Holm's adjusted p-values by their textbook definition: max over j <= k of (m-j+1)p_(j)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (m - step) * p_values[index]))
        adjusted[index] = running
    return adjusted


def test_holm_by_hand() -> None:
    # Sorted: 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2 stops: 0.03 and 0.04 stand.
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([0.04]) == [True] and holm([0.06]) == [False] and holm([]) == []
    # 0.2 fails first, so 0.001 behind it would still be rejected (it is tested first).
    assert holm([0.2, 0.001], alpha=0.05) == [False, True]


def test_holm_agrees_with_the_adjusted_p_values() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        p_values = list(rng.uniform(0, 0.1, size=int(rng.integers(1, 12))))
        assert holm(p_values) == [p <= 0.05 for p in holm_adjusted(p_values)]


def test_ranks_where_holm_keeps_a_raw_difference_from_counting() -> None:
    # A right on rows 0..69 (0.70), B on 0..58 and 60..67 (0.67), C on 0..59 (0.60).
    # A-C: b+c = 10, p = 2/1024; A-B: 3 discordant all for A, p = 0.25; B-C: 8 vs 1,
    # p = 20/512 = 0.039. Holm over 3 pairs: 0.00195 <= 0.05/3 rejects A-C; 0.039 > 0.05/2
    # stops, so B-C stands. A: 1; B: 1 (A does not beat it); C: 1 + 1 (only A) = 2.
    a = binary(set(range(70)))
    b = binary(set(range(59)) | set(range(60, 68)))
    c = binary(set(range(60)))
    assert ranks([a, b, c]) == [1, 1, 2]
    assert ranks([c, a, b]) == [2, 1, 1]
    # Without the correction B-C (p = 0.039) would count and C would be third.
    assert compare(c, b).significant


def test_ranks_1_1_3() -> None:
    a = binary(set(range(80)))
    b = binary(set(range(78)))
    c = binary(set(range(50)))
    assert ranks([a, b, c]) == [1, 1, 3]


def test_ranks_of_continuous_runs_against_scipy() -> None:
    rng = np.random.default_rng(3)
    truth = rng.uniform(0, 1, size=200)
    runs = [np.clip(truth + shift + rng.normal(0, 0.05, 200), 0, 1) for shift in (0.0, 0.1, 0.11)]
    pairs = [(0, 1), (0, 2), (1, 2)]
    p_values = [sp.ttest_rel(runs[j], runs[i]).pvalue for i, j in pairs]
    rejected = [p <= 0.05 for p in holm_adjusted(p_values)]
    expected = [1, 1, 1]
    for (i, j), significant in zip(pairs, rejected, strict=True):
        if significant:
            worse = i if runs[j].mean() > runs[i].mean() else j
            expected[worse] += 1
    assert ranks([list(r) for r in runs]) == expected == [3, 1, 1]


def test_ranks_of_one_run_and_of_identical_runs() -> None:
    assert ranks([[0.5, 1.0]]) == [1]
    assert ranks([[0.5, 1.0]] * 4) == [1, 1, 1, 1]
    # Continuous runs apart by the same amount on every question: no test can be made, so
    # nothing separates them (the paired t-test used to say p = 0 on two questions).
    assert ranks([[0.5, 0.6], [0.75, 0.85], [0.1, 0.2]]) == [1, 1, 1]
    with pytest.raises(StatsError, match="run #1: 1 question"):
        ranks([[0.5, 1.0], [1.0]])


# -- a large run --------------------------------------------------------------------------------


def test_a_50000_row_run_against_scipy() -> None:
    rng = np.random.default_rng(2026)
    n = 50_000
    base = (rng.uniform(size=n) < 0.70).astype(float)
    cand = np.where(rng.uniform(size=n) < 0.9, base, (rng.uniform(size=n) < 0.75).astype(float))
    interval = score_interval(list(base))
    ci = sp.binomtest(int(base.sum()), n).proportion_ci(0.95, method="wilson")
    assert (interval.low, interval.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    result = compare(list(base), list(cand))
    b = int(((base == 1) & (cand == 0)).sum())
    c = int(((base == 0) & (cand == 1)).sum())
    assert result.discordant is not None
    assert (result.discordant.baseline_only, result.discordant.candidate_only) == (b, c)
    assert result.p_value == pytest.approx(sp.binomtest(min(b, c), b + c, 0.5).pvalue)
    low, high, _ = bonett_price_of(b, c, n)
    assert result.interval is not None
    assert (result.interval.low, result.interval.high) == pytest.approx((low, high))
    # At 50,000 questions Bonett-Price and the t interval agree to well under a point.
    paired = sp.ttest_rel(cand, base).confidence_interval(0.95)
    assert result.interval.low == pytest.approx(paired.low, abs=5e-4)
    continuous_base = rng.uniform(size=n)
    continuous_cand = np.clip(continuous_base + rng.normal(0.002, 0.1, n), 0, 1)
    t_result = compare(list(continuous_base), list(continuous_cand))
    assert t_result.p_value == pytest.approx(
        sp.ttest_rel(continuous_cand, continuous_base).pvalue, rel=1e-9
    )
    t_ci = sp.ttest_rel(continuous_cand, continuous_base).confidence_interval(0.95)
    assert t_result.interval is not None and t_result.interval.low == pytest.approx(t_ci.low)
    assert score_interval(list(continuous_base)).method == "t"
    assert isinstance(t_result, Comparison)
    assert ranks([list(base), list(cand), list(base)]) == ranks([base, cand, base])  # type: ignore[list-item]
