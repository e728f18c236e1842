"""Which differences between KYAI scores are real: intervals, paired comparisons, ranks.

Pure functions of per-question score vectors (each score in [0, 1], errors already 0, in row
order), defined so that every figure can be checked with scipy (README, "Is the difference
real?"):

- :func:`score_interval`: one run's ``avg_score`` interval — the Wilson score interval when
  every score is 0 or 1, else ``mean ± t(1-α/2, n-1)·sd/√n`` clipped to [0, 1];
  ``standard_error`` is ``sd/√n`` (sample sd, ddof 1) in both cases.
- :func:`compare`: a candidate against a baseline on the same rows, from the differences
  ``d_i = candidate_i - baseline_i``: mean, ``sd(d)/√n``, the t interval, the exact McNemar
  test when every score of both runs is 0 or 1 (else the paired t-test), the minimum
  detectable effect at 80 % power, the verdict and non-inferiority (``interval.low > -M``).
- :func:`ranks`: the tie-aware ranks of several runs of one comparison key: every pair
  compared as above, Holm–Bonferroni over all pairs, ``rank_i = 1 +`` the number of runs
  significantly better than run ``i``.

Choices the issue leaves open: a test is significant when ``p <= α`` (as Holm's steps are);
fewer than 2 questions are refused (:class:`StatsError`: a sample standard deviation needs
two); when every difference is the same number the paired t p-value is 1.0 if that number is
0 and 0.0 otherwise (scipy's ``ttest_rel`` gives NaN for the first and 0.0 for the second).

scipy and numpy are imported inside the functions that use them: ``kyai --version`` and
``kyai --help`` import this module's callers without paying for either.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "POWER",
    "Bounds",
    "Comparison",
    "Discordant",
    "Interval",
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

IntervalMethod = Literal["wilson", "t"]
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
    """A candidate compared with a baseline on the same questions (paired)."""

    n: int
    mean_difference: float
    standard_error: float
    interval: Bounds
    confidence: float
    alpha: float
    test: TestName
    p_value: float
    significant: bool
    minimum_detectable_effect: float
    power: float
    discordant: Discordant | None
    verdict: Verdict
    non_inferiority_margin: float | None = None
    non_inferior: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form of ``kyai compare -o json`` (``non_inferior`` only with a margin)."""
        out: dict[str, Any] = {
            "n": self.n,
            "mean_difference": self.mean_difference,
            "standard_error": self.standard_error,
            "interval": {"low": self.interval.low, "high": self.interval.high},
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

    ``d = candidate - baseline``; ``mean_difference = mean(d)``; ``standard_error =
    sd(d)/√n``; ``interval = mean(d) ± t.ppf(1 - α/2, n - 1)·sd(d)/√n``. The p-value is the
    exact McNemar test (``binomtest(min(b, c), b + c, 0.5)``, 1.0 when ``b + c = 0``) when
    every score of both runs is 0 or 1, else the paired t-test (``ttest_rel(candidate,
    baseline)``). ``minimum_detectable_effect = (norm.ppf(1 - α/2) + norm.ppf(0.80))·sd(d)/√n``.
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
    standard_error = float(diff.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf(1.0 - alpha / 2.0, n - 1)) * standard_error
    interval = Bounds(mean - half, mean + half)
    discordant: Discordant | None = None
    if _binary(base) and _binary(cand):
        discordant = Discordant(
            baseline_only=int(((base == 1.0) & (cand == 0.0)).sum()),
            candidate_only=int(((base == 0.0) & (cand == 1.0)).sum()),
        )
        test: TestName = "mcnemar-exact"
        p_value = _mcnemar_exact(discordant)
    else:
        test = "paired-t"
        p_value = _paired_t(cand, base, diff)
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


def _mcnemar_exact(discordant: Discordant) -> float:
    """Two-sided exact McNemar: min(b, c) successes of b + c at ½; 1.0 without discordance."""
    from scipy import stats

    b, c = discordant.baseline_only, discordant.candidate_only
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(min(b, c), b + c, 0.5).pvalue)


def _paired_t(
    candidate: NDArray[np.float64], baseline: NDArray[np.float64], diff: NDArray[np.float64]
) -> float:
    """``ttest_rel(candidate, baseline).pvalue``, defined where every difference is equal."""
    import warnings

    from scipy import stats

    if bool((diff == diff[0]).all()):
        # No variance: scipy answers NaN for all-zero differences and 0.0 for any other
        # constant; say 1.0 and 0.0 without its precision warning.
        return 1.0 if diff[0] == 0 else 0.0
    with warnings.catch_warnings():
        # Differences that are equal but for rounding make scipy warn of precision loss;
        # its answer (p near 0) is still the right one.
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


def ranks(score_vectors: Sequence[Sequence[float]], *, alpha: float = ALPHA) -> list[int]:
    """Tie-aware ranks of runs of one comparison key (same rows, same order).

    Every pair is compared with :func:`compare`; Holm–Bonferroni over all pairs at
    ``alpha`` says which differences are significant; ``rank_i = 1 +`` the number of runs
    significantly better than run ``i``. Runs that no test separates share a rank
    (1, 1, 3 …). The ranks come back in the order of ``score_vectors``.
    """
    count = len(score_vectors)
    for position, scores in enumerate(score_vectors):
        _vector(scores, f"run #{position}")
    pairs = list(itertools.combinations(range(count), 2))
    comparisons = [compare(score_vectors[i], score_vectors[j], alpha=alpha) for i, j in pairs]
    rejected = holm([c.p_value for c in comparisons], alpha=alpha)
    better_than = [0] * count
    for (i, j), comparison, significant in zip(pairs, comparisons, rejected, strict=True):
        if not significant or comparison.mean_difference == 0:
            continue
        # compare(i, j) looks at j - i: a positive difference means j is better than i.
        better_than[i if comparison.mean_difference > 0 else j] += 1
    return [1 + better for better in better_than]
