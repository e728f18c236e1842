"""``kyai compare BASELINE CANDIDATE``: is the candidate's difference from the baseline real.

Both are run directories of ``kyai run`` / ``kyai judge`` (or their ``summary.json``) of one
comparison key, on the same rows (:mod:`kyai.results` refuses anything else, exit 2). The
comparison is paired, question by question (:func:`kyai.stats.compare`): the mean difference
with its interval (Bonett–Price with the exact McNemar test for 0/1 scores, else t with the
paired t-test), the minimum detectable effect at 80 % power, a verdict, and with
``--non-inferiority M`` the gate ``interval.low > -M`` (exit 4 when it fails: "the quantized
model is not more than 2 points worse"). Continuous scores whose differences are all equal
give no interval and no verdict: said so, and the gate fails (exit 4), never passes.

A run compared with itself (the same ``summary.json`` under two paths, or a byte-identical
copy of it) is refused, exit 2: every difference is 0, so the comparison shows "no detectable
difference" and a wide enough ``--non-inferiority`` margin passes, which says nothing about
any model: the sign of a CI job that names the same directory twice. ``--allow-same``
compares it anyway, with a warning.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kyai._argtypes import number
from kyai._exitcodes import EXIT_GATE_FAILED, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from kyai.results import RunResults
    from kyai.stats import Comparison, Interval

FORMATS = ("table", "json")

_TESTS = {"mcnemar-exact": "McNemar exact", "paired-t": "paired t"}
_METHODS = {"bonett-price": "Bonett-Price", "t": "t"}


def _margin(text: str) -> float:
    value = number(text, float)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(
            f"{value} is not in [0, 1] (a score difference: 0.02 is 2 points)"
        )
    return value


def _alpha(text: str) -> float:
    value = number(text, float)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not strictly between 0 and 1")
    return value


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``compare`` sub-command."""
    parser = subparsers.add_parser(
        "compare",
        help="is a candidate run really better or worse than a baseline run? (paired tests)",
        description="Compare two runs of one comparison key question by question: the mean "
        "difference (candidate - baseline) with its interval (Bonett-Price and the exact "
        "McNemar test for 0/1 scores, else t and the paired t-test), the smallest difference "
        "this comparison detects with 80 % power, and a verdict. Runs with different "
        "comparison keys, row counts or row ids are refused.",
    )
    parser.add_argument(
        "baseline",
        type=Path,
        metavar="BASELINE",
        help="the baseline's run directory (or summary.json)",
    )
    parser.add_argument(
        "candidate",
        type=Path,
        metavar="CANDIDATE",
        help="the candidate's run directory (or summary.json)",
    )
    parser.add_argument(
        "-o", "--output", choices=FORMATS, default="table", help="output format (default: table)"
    )
    parser.add_argument(
        "--non-inferiority",
        type=_margin,
        metavar="M",
        help="a gate: exit 4 unless the candidate is non-inferior with margin M, i.e. the "
        "interval's low end is above -M (score units: 0.02 is 2 points); exit 4 too when no "
        "interval can be estimated",
    )
    parser.add_argument(
        "--alpha",
        type=_alpha,
        default=0.05,
        metavar="A",
        help="significance level of the two-sided test; intervals are 1-A (default: 0.05)",
    )
    parser.add_argument(
        "--allow-same",
        action="store_true",
        help="compare a run with itself (the same summary.json, or a copy of it) with a "
        "warning, instead of refusing it (exit 2)",
    )
    parser.set_defaults(handler=_handle)


def same_run(baseline: Path, candidate: Path) -> str | None:
    """Why the two ``summary.json`` files are one run (None: two runs).

    The same file under two paths (a directory and its ``summary.json``, ``..``, a symbolic
    link), or two files with the same bytes (a copy: a summary records its run's start and
    end times, so two runs never write the same one).
    """
    try:
        if baseline.samefile(candidate):
            return f"{baseline} and {candidate} are the same file"
        if baseline.read_bytes() == candidate.read_bytes():
            return f"{baseline} and {candidate} are identical (a copy of one run)"
    except OSError:
        return None
    return None


def _handle(args: argparse.Namespace) -> int:
    from kyai.results import ResultsError, check_comparable, load
    from kyai.stats import StatsError, compare, score_interval

    try:
        baseline, candidate = load(args.baseline), load(args.candidate)
        same = same_run(baseline.path, candidate.path)
        if same is not None and not args.allow_same:
            raise ResultsError(
                f"the baseline and the candidate are one run: {same}; comparing a run with "
                "itself shows no difference whatever the model (--allow-same compares it "
                "anyway)"
            )
        if same is not None:
            print(f"kyai compare: warning: comparing a run with itself: {same}", file=sys.stderr)
        check_comparable(baseline, candidate)
        result = compare(
            baseline.scores,
            candidate.scores,
            alpha=args.alpha,
            non_inferiority=args.non_inferiority,
        )
        intervals = (
            score_interval(baseline.scores, confidence=1.0 - args.alpha),
            score_interval(candidate.scores, confidence=1.0 - args.alpha),
        )
    except (ResultsError, StatsError) as exc:
        print(f"kyai compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output == "json":
        print(render_json(baseline, candidate, result, intervals))
    else:
        print(render_table(baseline, candidate, result, intervals))
    if result.non_inferiority_margin is not None and not result.non_inferior:
        return EXIT_GATE_FAILED
    return EXIT_OK


# -- output -------------------------------------------------------------------------------------


def _run_json(run: RunResults, interval: Interval) -> dict[str, Any]:
    return {
        "run": run.name,
        "path": str(run.path.parent),
        "model": run.model,
        "avg_score": run.avg_score,
        "avg_score_interval": interval.as_dict(),
    }


def render_json(
    baseline: RunResults,
    candidate: RunResults,
    result: Comparison,
    intervals: tuple[Interval, Interval],
) -> str:
    """The comparison's figures (:meth:`kyai.stats.Comparison.as_dict`) and both runs."""
    return json.dumps(
        {
            "baseline": _run_json(baseline, intervals[0]),
            "candidate": _run_json(candidate, intervals[1]),
            "comparison_key": baseline.comparison_key,
            "dataset": baseline.dataset,
            **result.as_dict(),
        },
        indent=2,
    )


def _points(value: float, *, sign: bool = True) -> str:
    return f"{value * 100:+.1f}" if sign else f"{value * 100:.1f}"


def _label(run: RunResults) -> str:
    return run.name if not run.model or run.model == run.name else f"{run.name} ({run.model})"


def _p(value: float) -> str:
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}".rstrip("0").rstrip(".")


def _figures(result: Comparison) -> str:
    """The difference, its interval and the test's p-value, as the verdict sentence says them."""
    test = _TESTS[result.test]
    if result.interval is None or result.p_value is None:
        return f"{_points(result.mean_difference)} points (no interval, no {test} p-value)"
    level = f"{result.confidence * 100:g} %"
    return (
        f"{_points(result.mean_difference)} points ({level} CI {_points(result.interval.low)} "
        f"to {_points(result.interval.high)}; {test} p = {_p(result.p_value)})"
    )


def verdict_sentence(baseline: RunResults, candidate: RunResults, result: Comparison) -> str:
    """The one sentence to act on: better, worse, no detectable difference or no verdict."""
    figures = f"{_figures(result)} on {result.n} paired questions"
    base, cand = _label(baseline), _label(candidate)
    if result.verdict is None or result.minimum_detectable_effect is None:
        return f"No verdict between {cand} and {base}: {figures}; {result.not_estimable}."
    if result.verdict == "better":
        return f"{cand} is better than {base}: {figures}."
    if result.verdict == "worse":
        return f"{cand} is worse than {base}: {figures}."
    return (
        f"No detectable difference between {cand} and {base}: {figures}; only a true "
        f"difference of about {_points(result.minimum_detectable_effect, sign=False)} points "
        f"or more would be detected with {result.power * 100:g} % power."
    )


def non_inferiority_sentence(
    baseline: RunResults, candidate: RunResults, result: Comparison
) -> str | None:
    """Whether the gate of ``--non-inferiority`` passes, and why; None without a margin."""
    if result.non_inferiority_margin is None:
        return None
    margin = _points(result.non_inferiority_margin, sign=False)
    base, cand = _label(baseline), _label(candidate)
    if result.interval is None:
        return (
            f"{cand} is NOT shown non-inferior to {base} with a margin of {margin} points: "
            "the interval of the difference cannot be estimated, so no verdict is drawn "
            "(exit status 4)."
        )
    low = _points(result.interval.low)
    if result.non_inferior:
        return (
            f"{cand} is non-inferior to {base} with a margin of {margin} points: the "
            f"interval's low end {low} points is above -{margin}."
        )
    return (
        f"{cand} is NOT shown non-inferior to {base} with a margin of {margin} points: the "
        f"interval's low end {low} points is not above -{margin} (exit status 4)."
    )


def _interval_cell(interval: Interval) -> str:
    return (
        f"{interval.low:.4f} to {interval.high:.4f} "
        f"({interval.confidence * 100:g} %, {interval.method})"
    )


def _estimates(result: Comparison, test: str) -> list[tuple[str, str]]:
    """The table's rows of the standard error, the interval, the test and the detectable."""
    level = f"{result.confidence * 100:g} %"
    method = _METHODS[result.interval_method]
    if (
        result.interval is None
        or result.standard_error is None
        or result.p_value is None
        or result.minimum_detectable_effect is None
    ):
        return [
            (
                "difference interval",
                f"not estimable ({level}, {method}): the differences do not vary",
            ),
            ("test", f"{test}: no p-value, no verdict"),
        ]
    significance = "significant" if result.significant else "not significant"
    return [
        ("standard error", f"{_points(result.standard_error, sign=False)} points ({method})"),
        ("difference interval", f"{_points(result.interval.low)} to "
                                f"{_points(result.interval.high)} points ({level}, {method})"),
        ("test", f"{test}: p = {_p(result.p_value)}, {significance} at α = {result.alpha:g}"),
        ("detectable", f"{_points(result.minimum_detectable_effect, sign=False)} points with "
                       f"{result.power * 100:g} % power (minimum detectable effect)"),
    ]  # fmt: skip


def render_table(
    baseline: RunResults,
    candidate: RunResults,
    result: Comparison,
    intervals: tuple[Interval, Interval],
) -> str:
    """The verdict sentence (and the gate's), then the figures behind it."""
    lines = [verdict_sentence(baseline, candidate, result)]
    gate = non_inferiority_sentence(baseline, candidate, result)
    if gate is not None:
        lines.append(gate)
    test = _TESTS[result.test]
    if result.discordant is not None:
        test += (
            f" ({result.discordant.baseline_only} right only in the baseline, "
            f"{result.discordant.candidate_only} only in the candidate)"
        )
    rows = [
        ("", "baseline", "candidate"),
        ("run", baseline.name, candidate.name),
        ("model", baseline.model or "-", candidate.model or "-"),
        ("avg score", f"{baseline.avg_score:.4f}", f"{candidate.avg_score:.4f}"),
        ("score interval", _interval_cell(intervals[0]), _interval_cell(intervals[1])),
    ]
    details = [
        ("difference", f"{_points(result.mean_difference)} points (candidate - baseline)"),
        *_estimates(result, test),
        ("comparison key", f"{baseline.comparison_key} ({baseline.dataset or '-'}, {result.n} "
                           "questions)"),
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    widths[0] = max(widths[0], *(len(name) for name, _ in details))
    lines.append("")
    lines += ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines += [f"{name.ljust(widths[0])}   {value}" for name, value in details]
    return "\n".join(lines)
