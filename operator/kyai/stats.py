"""Which differences between KYAI scores are real: intervals, paired comparisons, ranks.

Pure functions of per-question score vectors (each score in [0, 1], errors already 0, in row
order), defined so that every figure can be checked with scipy
(docs/explanation/statistics.md, "Is the difference real?": every formula stated):

- :func:`score_interval`: one run's ``avg_score`` interval — the Wilson score interval when
  every score is 0 or 1, else ``mean ± t(1-α/2, n-1)·sd/√n`` clipped to [0, 1];
  ``standard_error`` is ``sd/√n`` (sample sd, ddof 1) in both cases.
- :func:`compare`: a candidate against a baseline on the same rows, from the differences
  ``d_i = candidate_i - baseline_i``: their mean; when every score of both runs is 0 or 1,
  the Bonett–Price interval of the difference of paired proportions and the exact McNemar
  test, else the t interval of ``mean(d)`` (``sd(d)/√n``) and the paired t-test; the minimum
  detectable effect at 80 % power from the interval's standard error; the verdict and
  non-inferiority (``interval.low > -M``).
- :func:`ranks`: the tie-aware ranks of several runs of one comparison key: every pair
  compared as above, Holm–Bonferroni over all pairs, ``rank_i = 1 +`` the number of runs
  significantly better than run ``i``.

Never more than the data: the Bonett–Price interval (Bonett & Price 2012, one of the
intervals Fagerland, Lydersen & Laake 2014 recommend for paired binomial proportions) adds
one pseudo-question to each kind of discordant pair, so it stays wide when few or no
questions are discordant (±0.55 on 3 questions, ±0.027 on 100), where the t interval of
equal differences has width 0 and would pass any non-inferiority margin. Continuous scores
whose differences are all equal (to within :data:`EQUAL_TOLERANCE`) have no estimable
interval (no variance is seen, whatever the number of questions): the comparison says so
(``not_estimable``, the reason) and draws no verdict, p-value or non-inferiority from them.

Choices the issue leaves open: a test is significant when ``p <= α`` (as Holm's steps are);
fewer than 2 questions are refused (:class:`StatsError`: a sample standard deviation needs
two); a pair that no test can be made of counts as ``p = 1`` among Holm's p-values (it
separates nothing).

scipy and numpy are imported inside the functions that use them: ``kyai --version`` and
``kyai --help`` import this module's callers without paying for either.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "EQUAL_TOLERANCE",
    "POWER",
    "Bounds",
    "Comparison",
    "DifferenceMethod",
    "Discordant",
    "Interval",
    "PairComparer",
    "StatsError",
    "compare",
    "holm",
    "is_binary",
    "ranks",
    "score_interval",
]

#: The confidence of every interval KYAI shows by default (two-sided).
CONFIDENCE = 0.95
#: The significance level of every test by default (two-sided): 1 - CONFIDENCE.
ALPHA = 0.05
#: The power at which the minimum detectable effect is stated.
POWER = 0.80

#: Continuous differences whose spread (max - min) is at most this are "all equal": scores
#: that differ only by floating-point rounding (0.5 - 0.4 and 0.6 - 0.5) count as equal.
EQUAL_TOLERANCE = 1e-9

IntervalMethod = Literal["wilson", "t"]
#: The interval of a paired difference: Bonett–Price for 0/1 scores, else t.
DifferenceMethod = Literal["bonett-price", "t"]
TestName = Literal["mcnemar-exact", "paired-t"]
Verdict = Literal["better", "worse", "no detectable difference"]


class StatsError(ValueError):
    """Scores that no interval or test can be computed from; the message says why."""


@dataclass(frozen=True)
class Interval:
    """The interval of one run's ``avg_score``, with its method and confidence."""

    low: float
    high: float
    standard_error: float
    confidence: float
    method: IntervalMethod

    def as_dict(self) -> dict[str, Any]:
        """``{low, high, standard_error, confidence, method}`` (summary.json, JSON outputs)."""
        return {
            "low": self.low,
            "high": self.high,
            "standard_error": self.standard_error,
            "confidence": self.confidence,
            "method": self.method,
        }

    @classmethod
    def from_mapping(cls, value: Mapping[str, Any], *, where: str) -> Interval:
        """An interval as :meth:`as_dict` writes it; ``where`` names it in errors."""
        numbers = {}
        for name in ("low", "high", "standard_error", "confidence"):
            item = value.get(name)
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise StatsError(f"{where}: field {name!r} is missing or not a number")
            numbers[name] = float(item)
        method = value.get("method")
        if method not in ("wilson", "t"):
            raise StatsError(f"{where}: field 'method' is {method!r}, not 'wilson' or 't'")
        return cls(method=method, **numbers)


@dataclass(frozen=True)
class Bounds:
    """The two ends of a comparison's interval."""

    low: float
    high: float


@dataclass(frozen=True)
class Discordant:
    """Questions the two runs of a binary comparison answered differently."""

    #: Scored 1 by the baseline and 0 by the candidate (McNemar's b).
    baseline_only: int
    #: Scored 1 by the candidate and 0 by the baseline (McNemar's c).
    candidate_only: int


@dataclass(frozen=True)
class Comparison:
    """A candidate compared with a baseline on the same questions (paired).

    ``not_estimable`` says why no interval could be estimated (continuous scores whose
    differences are all equal); then ``interval``, ``standard_error``,
    ``minimum_detectable_effect``, ``p_value``, ``verdict`` and ``non_inferior`` are None:
    no verdict is drawn.
    """

    n: int
    mean_difference: float
    standard_error: float | None
    interval: Bounds | None
    interval_method: DifferenceMethod
    confidence: float
    alpha: float
    test: TestName
    p_value: float | None
    significant: bool
    minimum_detectable_effect: float | None
    power: float
    discordant: Discordant | None
    verdict: Verdict | None
    non_inferiority_margin: float | None = None
    non_inferior: bool | None = None
    not_estimable: str | None = None

    @property
    def rank_p_value(self) -> float:
        """The p-value Holm's procedure takes for ranks: 1.0 when no test could be made."""
        return 1.0 if self.p_value is None else self.p_value

    def as_dict(self) -> dict[str, Any]:
        """The JSON form of ``kyai compare -o json`` (``non_inferior`` only with a margin)."""
        out: dict[str, Any] = {
            "n": self.n,
            "mean_difference": self.mean_difference,
            "standard_error": self.standard_error,
            "interval": None
            if self.interval is None
            else {"low": self.interval.low, "high": self.interval.high},
            "interval_method": self.interval_method,
            "confidence": self.confidence,
            "alpha": self.alpha,
            "test": self.test,
            "p_value": self.p_value,
            "significant": self.significant,
            "minimum_detectable_effect": self.minimum_detectable_effect,
            "power": self.power,
            "discordant": None
            if self.discordant is None
            else {
                "baseline_only": self.discordant.baseline_only,
                "candidate_only": self.discordant.candidate_only,
            },
            "verdict": self.verdict,
            "not_estimable": self.not_estimable,
        }
        if self.non_inferiority_margin is not None:
            out["non_inferiority_margin"] = self.non_inferiority_margin
            out["non_inferior"] = self.non_inferior
        return out


# -- checks -------------------------------------------------------------------------------------


def _vector(scores: Sequence[float], what: str) -> NDArray[np.float64]:
    """The scores as a float array, refused unless there are 2+ and each is in [0, 1]."""
    import numpy as np

    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1:
        raise StatsError(f"{what}: expected a flat list of per-question scores")
    if values.size < 2:
        raise StatsError(
            f"{what}: {values.size} question(s); an interval or a test needs at least 2 "
            "(the sample standard deviation of fewer is undefined)"
        )
    bad = np.flatnonzero(~((values >= 0.0) & (values <= 1.0)))  # also catches NaN
    if bad.size:
        first = int(bad[0])
        raise StatsError(
            f"{what}: the score of row {first} is {float(values[first])!r}, outside [0, 1] "
            f"({bad.size} such row(s))"
        )
    return values


def _binary(values: NDArray[np.float64]) -> bool:
    import numpy as np

    return bool(np.all((values == 0.0) | (values == 1.0)))


def is_binary(scores: Sequence[float]) -> bool:
    """Whether every score is exactly 0 or 1 (then Wilson and McNemar apply)."""
    return all(score in (0.0, 1.0) for score in scores)


def _check_level(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise StatsError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")


# -- one run ------------------------------------------------------------------------------------


def score_interval(scores: Sequence[float], *, confidence: float = CONFIDENCE) -> Interval:
    """The interval of the mean of ``scores`` (one run's ``avg_score``).

    Every score 0 or 1: the Wilson score interval of ``k = sum(scores)`` successes out of
    ``n`` (``scipy.stats.binomtest(k, n).proportion_ci(confidence, method="wilson")``, which
    equals the closed form with ``z = norm.ppf(1 - α/2)``). Otherwise
    ``mean ± t.ppf(1 - α/2, n - 1) · sd / √n``, clipped to [0, 1]. ``standard_error`` is
    ``sd / √n`` with the sample standard deviation (ddof 1) in both cases.
    """
    from scipy import stats

    _check_level(1.0 - confidence)
    values = _vector(scores, "scores")
    n = int(values.size)
    mean = float(values.mean())
    standard_error = float(values.std(ddof=1)) / math.sqrt(n)
    if _binary(values):
        successes = round(float(values.sum()))
        ci = stats.binomtest(successes, n).proportion_ci(
            confidence_level=confidence, method="wilson"
        )
        return Interval(float(ci.low), float(ci.high), standard_error, confidence, "wilson")
    half = float(stats.t.ppf(1.0 - (1.0 - confidence) / 2.0, n - 1)) * standard_error
    return Interval(max(0.0, mean - half), min(1.0, mean + half), standard_error, confidence, "t")


# -- two runs -----------------------------------------------------------------------------------


def compare(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    alpha: float = ALPHA,
    non_inferiority: float | None = None,
) -> Comparison:
    """The paired comparison of ``candidate`` with ``baseline`` (same rows, same order).

    ``d = candidate - baseline``; ``mean_difference = mean(d)``. When every score of both runs
    is 0 or 1 (b questions right only in the baseline, c only in the candidate): the
    Bonett–Price interval (:func:`_bonett_price`) and the exact McNemar test
    (``binomtest(min(b, c), b + c, 0.5)``, 1.0 when ``b + c = 0``). Otherwise
    ``standard_error = sd(d)/√n``, ``interval = mean(d) ± t.ppf(1 - α/2, n - 1)·sd(d)/√n``
    and the paired t-test (``ttest_rel(candidate, baseline)``) — unless every difference is
    the same number: then nothing is estimable (``not_estimable``, no verdict).
    ``minimum_detectable_effect = (norm.ppf(1 - α/2) + norm.ppf(0.80))·standard_error``.
    With a margin ``M``, the candidate is non-inferior when ``interval.low > -M``.
    """
    from scipy import stats

    _check_level(alpha)
    if non_inferiority is not None and not 0.0 <= non_inferiority <= 1.0:
        raise StatsError(f"the non-inferiority margin must lie in [0, 1], got {non_inferiority!r}")
    base = _vector(baseline, "baseline")
    cand = _vector(candidate, "candidate")
    if base.size != cand.size:
        raise StatsError(
            f"the baseline has {base.size} scores and the candidate {cand.size}: "
            "a paired comparison needs the same questions"
        )
    n = int(base.size)
    diff = cand - base
    mean = float(diff.mean())
    discordant: Discordant | None = None
    if _binary(base) and _binary(cand):
        discordant = Discordant(
            baseline_only=int(((base == 1.0) & (cand == 0.0)).sum()),
            candidate_only=int(((base == 0.0) & (cand == 1.0)).sum()),
        )
        test: TestName = "mcnemar-exact"
        method: DifferenceMethod = "bonett-price"
        interval, standard_error = _bonett_price(discordant, n, alpha)
        p_value = _mcnemar_exact(discordant)
    elif float(diff.max() - diff.min()) <= EQUAL_TOLERANCE:
        return _not_estimable(n, mean, alpha, non_inferiority)
    else:
        test, method = "paired-t", "t"
        standard_error = float(diff.std(ddof=1)) / math.sqrt(n)
        half = float(stats.t.ppf(1.0 - alpha / 2.0, n - 1)) * standard_error
        interval = Bounds(mean - half, mean + half)
        p_value = _paired_t(cand, base)
    significant = p_value <= alpha
    z = float(stats.norm.ppf(1.0 - alpha / 2.0)) + float(stats.norm.ppf(POWER))
    verdict: Verdict = "no detectable difference"
    if significant and mean != 0:
        verdict = "better" if mean > 0 else "worse"
    return Comparison(
        n=n,
        mean_difference=mean,
        standard_error=standard_error,
        interval=interval,
        interval_method=method,
        confidence=1.0 - alpha,
        alpha=alpha,
        test=test,
        p_value=p_value,
        significant=significant,
        minimum_detectable_effect=z * standard_error,
        power=POWER,
        discordant=discordant,
        verdict=verdict,
        non_inferiority_margin=non_inferiority,
        non_inferior=None if non_inferiority is None else interval.low > -non_inferiority,
    )


def _not_estimable(n: int, mean: float, alpha: float, margin: float | None) -> Comparison:
    """The comparison of continuous scores whose differences are all ``mean``: no verdict."""
    return Comparison(
        n=n,
        mean_difference=mean,
        standard_error=None,
        interval=None,
        interval_method="t",
        confidence=1.0 - alpha,
        alpha=alpha,
        test="paired-t",
        p_value=None,
        significant=False,
        minimum_detectable_effect=None,
        power=POWER,
        discordant=None,
        verdict=None,
        non_inferiority_margin=margin,
        non_inferior=None,
        not_estimable=_all_equal(mean, n),
    )


def _all_equal(mean: float, n: int) -> str:
    """Why continuous differences that are all equal give no interval."""
    return (
        f"every one of the {n} paired differences (candidate - baseline) is {mean:+.4g}, so "
        "their variance, and with it the interval of the difference (t), cannot be estimated"
    )


def _bonett_price(discordant: Discordant, n: int, alpha: float) -> tuple[Bounds, float]:
    """The Bonett–Price (2012) adjusted Wald interval of the paired difference, and its SE.

    With b = baseline-only and c = candidate-only questions: ``p_b = (b + 1)/(n + 2)``,
    ``p_c = (c + 1)/(n + 2)``; ``SE = √((p_b + p_c - (p_c - p_b)²)/(n + 2))``; the interval
    is ``(p_c - p_b) ± norm.ppf(1 - α/2)·SE``, clipped to [-1, 1]. SE is never 0.
    """
    from scipy import stats

    p_base = (discordant.baseline_only + 1) / (n + 2)
    p_cand = (discordant.candidate_only + 1) / (n + 2)
    centre = p_cand - p_base
    standard_error = math.sqrt((p_base + p_cand - centre * centre) / (n + 2))
    half = float(stats.norm.ppf(1.0 - alpha / 2.0)) * standard_error
    return Bounds(max(-1.0, centre - half), min(1.0, centre + half)), standard_error


def _mcnemar_exact(discordant: Discordant) -> float:
    """Two-sided exact McNemar: min(b, c) successes of b + c at ½; 1.0 without discordance."""
    from scipy import stats

    b, c = discordant.baseline_only, discordant.candidate_only
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(min(b, c), b + c, 0.5).pvalue)


def _paired_t(candidate: NDArray[np.float64], baseline: NDArray[np.float64]) -> float:
    """``ttest_rel(candidate, baseline).pvalue`` (differences that vary, beyond rounding)."""
    import warnings

    from scipy import stats

    with warnings.catch_warnings():
        # Differences that are nearly equal make scipy warn of precision loss; its answer
        # is still the right one.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_rel(candidate, baseline).pvalue)


# -- several runs -------------------------------------------------------------------------------


def holm(p_values: Sequence[float], *, alpha: float = ALPHA) -> list[bool]:
    """Holm–Bonferroni: which hypotheses are rejected, family-wise at ``alpha``.

    The p-values in ascending order are tested against ``alpha / (m - k)`` (k = 0, 1, ...):
    each is rejected while ``p <= alpha / (m - k)``; the first that is not stops the procedure
    (it and every larger one stand). Ties keep their input order.
    """
    _check_level(alpha)
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    rejected = [False] * m
    for step, index in enumerate(order):
        if p_values[index] > alpha / (m - step):
            break
        rejected[index] = True
    return rejected


#: How :func:`ranks` compares two runs: ``(baseline, candidate) -> compare(..., alpha=alpha)``.
PairComparer = Callable[[Sequence[float], Sequence[float]], Comparison]


def ranks(
    score_vectors: Sequence[Sequence[float]],
    *,
    alpha: float = ALPHA,
    compare_pair: PairComparer | None = None,
) -> list[int]:
    """Tie-aware ranks of runs of one comparison key (same rows, same order).

    Every pair is compared with :func:`compare` at ``alpha``; Holm–Bonferroni over all pairs
    at ``alpha`` says which differences are significant (a pair no test can be made of counts
    as ``p = 1``: :attr:`Comparison.rank_p_value`); ``rank_i = 1 +`` the number of runs
    significantly better than run ``i``. Runs that no test separates share a rank
    (1, 1, 3 …). The ranks come back in the order of ``score_vectors``.

    ``compare_pair`` replaces the comparison of two runs by one that gives the same result
    (the sweep's memo of :func:`compare` at the same ``alpha``): the one definition of the
    ranks, whoever computes them.
    """
    _check_level(alpha)
    for position, scores in enumerate(score_vectors):
        _vector(scores, f"run #{position}")
    pair = compare_pair or (lambda baseline, candidate: compare(baseline, candidate, alpha=alpha))
    pairs = list(itertools.combinations(range(len(score_vectors)), 2))
    comparisons = [pair(score_vectors[i], score_vectors[j]) for i, j in pairs]
    rejected = holm([c.rank_p_value for c in comparisons], alpha=alpha)
    better_than = [0] * len(score_vectors)
    for (i, j), comparison, significant in zip(pairs, comparisons, rejected, strict=True):
        if not significant or comparison.mean_difference == 0:
            continue
        # compare(i, j) looks at j - i: a positive difference means j is better than i.
        better_than[i if comparison.mean_difference > 0 else j] += 1
    return [1 + better for better in better_than]
