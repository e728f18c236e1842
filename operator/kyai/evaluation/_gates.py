"""Quality gates of ``kyai run`` / ``kyai judge``: ``spec.thresholds`` on the command line.

``--fail-under SCORE`` passes when ``avg_score >= SCORE``; ``--max-error-rate R`` when
``error_count / count <= R``: the same meaning as an EvaluationRun's ``thresholds.avgScore``
and ``thresholds.maxErrorRate`` (its ``Passed`` condition). A failed gate exits with
``EXIT_GATE_FAILED`` (4) after the summary is written.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from kyai._argtypes import number


def _fraction(text: str) -> float:
    value = number(text, float)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def add_gate_flags(parser: argparse.ArgumentParser) -> None:
    """``--fail-under`` and ``--max-error-rate``."""
    group = parser.add_argument_group(
        "quality gates (as spec.thresholds of an EvaluationRun; exit 4 when one fails)"
    )
    group.add_argument(
        "--fail-under",
        type=_fraction,
        metavar="SCORE",
        help="fail unless avg_score >= SCORE (0..1; thresholds.avgScore)",
    )
    group.add_argument(
        "--max-error-rate",
        type=_fraction,
        metavar="R",
        help="fail unless error_count / questions <= R (0..1; thresholds.maxErrorRate)",
    )


def gate_failures(
    summary: Mapping[str, Any], *, fail_under: float | None, max_error_rate: float | None
) -> list[str]:
    """What each failed gate found (empty: every gate passed, or none was set)."""
    failures = []
    score = float(summary["avg_score"])
    if fail_under is not None and score < fail_under:
        failures.append(f"avg_score {score:.4f} < --fail-under {fail_under}")
    count = int(summary.get("count") or 0)
    rate = int(summary.get("error_count") or 0) / count if count else 0.0
    if max_error_rate is not None and rate > max_error_rate:
        failures.append(f"error rate {rate:.4f} > --max-error-rate {max_error_rate}")
    return failures
