"""Each finished run of a schedule compared with its baseline: regressed, not, or no verdict.

The statistics are ``kyai compare``'s (:func:`kyai.stats.compare` on both runs' per-question
scores): the Bonett–Price interval and exact McNemar test when every score is 0 or 1, else
the t interval and paired t-test. A run is shown worse than the margin (``regressed``) when
the interval's high end is below ``-margin``; not shown worse otherwise. No verdict (None, and
``reason`` says why) when there is no baseline, when the runs answered different questions
(comparison key, question count or dataset sha256 differ), when a status holds no
per-question scores, or when the interval cannot be estimated (continuous scores whose
differences are all equal).

The checks of comparability are those of the non-inferiority gate
(``kyai.controllers._baseline``), written again here: that module sits above this package and
takes the gate's model, not a run's name.
"""

from __future__ import annotations

from collections.abc import Sequence

from kyai.api import EvaluationRunStatus, HistoryEntry, RegressionResult, ScoresError
from kyai.stats import ALPHA

__all__ = ["BASELINE_KINDS", "compare_runs", "pick_baseline", "regression_message"]

#: ``spec.regression.baseline``'s values.
BASELINE_KINDS = ("previous", "pinned", "best")


def _not_comparable(
    run: str, candidate: EvaluationRunStatus, name: str, baseline: EvaluationRunStatus
) -> str | None:
    """Why run ``run`` and its baseline ``name`` answer different questions (None: the same)."""
    if run == name:
        return f"not compared: the run {run} is not its own baseline"
    return candidate.not_comparable_with(baseline, this=run, name=name)


def _no_baseline(run: str, key: str | None) -> str:
    if key is None:
        return f"no baseline: the run {run} reported no comparison key"
    return f"no earlier Succeeded run of comparison key {key}"


def compare_runs(
    run: str,
    run_status: EvaluationRunStatus,
    baseline: str | None,
    baseline_status: EvaluationRunStatus | None,
    *,
    margin: float,
    alpha: float,
) -> RegressionResult:
    """Run ``run`` compared with ``baseline`` (``kyai compare``'s paired test and interval).

    ``regressed`` is True when the high end of the difference's ``1 - alpha`` interval (run
    minus baseline) is below ``-margin``, False when not; None with ``reason`` when no verdict
    can be drawn (no baseline, runs not comparable, scores unavailable, not estimable).
    """
    from kyai.stats import StatsError, compare

    if baseline is None or baseline_status is None:
        return RegressionResult(
            run=run, margin=margin, reason=_no_baseline(run, run_status.comparison_key)
        )
    why = _not_comparable(run, run_status, baseline, baseline_status)
    if why is not None:
        return RegressionResult(run=run, baseline=baseline, margin=margin, reason=why)
    try:
        mine = run_status.question_scores(where=f"the run {run}")
        theirs = baseline_status.question_scores(where=f"the baseline {baseline}")
        found = compare(theirs, mine, alpha=alpha)
    except ScoresError as exc:
        return RegressionResult(run=run, baseline=baseline, margin=margin,
                                reason=f"not compared: {exc}")  # fmt: skip
    except StatsError as exc:
        return RegressionResult(run=run, baseline=baseline, margin=margin,
                                reason=f"not compared with {baseline}: {exc}")  # fmt: skip
    result = RegressionResult(
        run=run, baseline=baseline, questions=found.n, difference=found.mean_difference,
        p_value=found.p_value, margin=margin,
    )  # fmt: skip
    if found.interval is None:
        result.reason = f"no verdict against {baseline}: {found.not_estimable}"
        return result
    result.low, result.high = found.interval.low, found.interval.high
    result.regressed = found.interval.high < -margin
    return result


def pick_baseline(
    kind: str,
    history: Sequence[HistoryEntry],
    *,
    run: str,
    comparison_key: str | None,
    pinned: str | None,
) -> str | None:
    """The run ``run`` is compared with, by ``spec.regression.baseline``.

    previous: the newest Succeeded entry before ``run`` (the history is newest last) with the
    same comparison key; best: the Succeeded entry of that key with the highest score (ties:
    the newest), never ``run`` itself; pinned: ``pinned``. None when there is none (a run of
    no comparison key has none either).
    """
    if kind == "pinned":
        return pinned
    if kind not in BASELINE_KINDS:
        raise ValueError(f"unknown baseline kind {kind!r} (one of {', '.join(BASELINE_KINDS)})")
    if comparison_key is None:
        return None
    names = [entry.run for entry in history]
    earlier = history[: names.index(run)] if kind == "previous" and run in names else history
    candidates = [
        (position, entry)
        for position, entry in enumerate(earlier)
        if entry.run != run
        and entry.phase == "Succeeded"
        and entry.comparison_key == comparison_key
    ]
    if kind == "previous":
        return candidates[-1][1].run if candidates else None
    scored = [
        (entry.score, position, entry.run)
        for position, entry in candidates
        if entry.score is not None
    ]
    return max(scored)[2] if scored else None


def _points(value: float, *, sign: bool = True) -> str:
    """A fraction of the score scale in points, as ``kyai compare`` prints it."""
    return f"{value * 100:+.1f}" if sign else f"{value * 100:.1f}"


def _p(value: float) -> str:
    """A p-value as ``kyai compare`` prints it."""
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}".rstrip("0").rstrip(".")


def regression_message(result: RegressionResult, *, alpha: float = ALPHA) -> str:
    """One line for the Regressed condition: the verdict, the figures, both runs named.

    Points are fractions × 100, as ``kyai compare`` prints them; ``alpha`` is the level the
    comparison was made at (the interval's confidence is ``1 - alpha``). No verdict: the
    reason.
    """
    difference, low, high, p_value = result.difference, result.low, result.high, result.p_value
    if (
        result.regressed is None
        or result.baseline is None
        or difference is None
        or low is None
        or high is None
        or p_value is None
    ):
        return result.reason or f"no verdict for the run {result.run}"
    interval = (
        f"{(1 - alpha) * 100:g} % interval {_points(low)} to {_points(high)} points, "
        f"p = {_p(p_value)}"
    )
    margin = f"{_points(result.margin, sign=False)} points"
    if result.regressed:
        return (
            f"run {result.run} is worse than {result.baseline} by "
            f"{_points(-difference, sign=False)} points ({interval}, margin {margin}, "
            f"{result.questions} questions)"
        )
    return (
        f"run {result.run} differs from {result.baseline} by {_points(difference)} "
        f"points ({interval}, {result.questions} questions): not shown worse than the margin "
        f"{margin}"
    )
