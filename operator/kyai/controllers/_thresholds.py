"""The ``Passed`` condition of a succeeded run: its score gates and its metric gates.

``spec.thresholds.avgScore`` and ``maxErrorRate`` gate a judged run's score
(:func:`threshold_condition`); ``spec.thresholds.metrics`` gates any entry of
``status.metrics``, whatever the kind of run (:func:`metric_gate`). One Passed condition says
both (:func:`combine_passed`).
"""

from __future__ import annotations

from collections.abc import Mapping

from kyai.api import Thresholds
from kyai.controllers import _conditions as c
from kyai.controllers._conditions import Change


def threshold_condition(
    thresholds: Thresholds | None, score: float, error_count: int, questions: int
) -> Change | None:
    """The Passed condition of a succeeded run, when the spec sets score thresholds.

    ``avgScore`` passes at equality (``score >= avgScore``), ``maxErrorRate`` too
    (``errors / questions <= maxErrorRate``; no question, no error rate).
    """
    if thresholds is None or (thresholds.avg_score is None and thresholds.max_error_rate is None):
        return None
    misses = []
    if thresholds.avg_score is not None and score < thresholds.avg_score:
        misses.append(f"avgScore {score:.4f} < {thresholds.avg_score}")
    rate = error_count / questions if questions else 0.0
    if thresholds.max_error_rate is not None and rate > thresholds.max_error_rate:
        misses.append(f"error rate {rate:.4f} > {thresholds.max_error_rate}")
    if misses:
        return Change(c.PASSED, False, c.THRESHOLDS_MISSED, "; ".join(misses))
    return Change(c.PASSED, True, c.THRESHOLDS_MET, "every threshold is met")


def metric_gate(
    thresholds: Thresholds | None, metrics: Mapping[str, float]
) -> tuple[Change | None, dict[str, float]]:
    """The Passed condition from ``thresholds.metrics`` and the -1 entries to show.

    The second value holds a -1 for each gated metric that is missing (it goes into
    ``status.metrics``). The condition is None when no metric is gated.
    """
    gates = (thresholds.metrics if thresholds is not None else None) or {}
    if not gates:
        return None, {}
    misses, missing = [], {}
    for key, threshold in gates.items():
        value = metrics.get(key)
        if value is None or value == -1:
            missing[key] = -1.0
            misses.append(f"{key} is missing")
        elif value < threshold:
            misses.append(f"{key} {value:.4f} < {threshold}")
    if misses:
        return Change(c.PASSED, False, c.THRESHOLDS_MISSED, "; ".join(misses)), missing
    return Change(c.PASSED, True, c.THRESHOLDS_MET, "every threshold is met"), {}


#: The reasons of a failed gate, the one a user must act on first: a comparison that could
#: not be made (the baseline is of other rows or another key, its scores are gone, or no
#: interval can be estimated) before a threshold that was missed. A combined Passed keeps
#: the first of these among its failures.
ACTION_ORDER = (c.NOT_COMPARABLE, c.SCORES_UNAVAILABLE, c.NOT_ESTIMABLE, c.THRESHOLDS_MISSED)


def combine_passed(*gates: Change | None) -> Change | None:
    """One Passed condition from several gates: False when any fails (the failures' messages).

    All passing: True with every message. Failing: the reason a user must act on first
    (:data:`ACTION_ORDER`: ``NotComparable`` before ``ScoresUnavailable``, ``NotEstimable``
    and ``ThresholdsMissed``; an unknown reason after them) and every failure's message, that
    gate's first.
    """
    found = [gate for gate in gates if gate is not None]
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    misses = [gate for gate in found if not gate.status]
    if not misses:
        messages = dict.fromkeys(gate.message for gate in found)
        return Change(c.PASSED, True, c.THRESHOLDS_MET, "; ".join(messages))

    def urgency(gate: Change) -> int:
        reason = gate.reason
        return ACTION_ORDER.index(reason) if reason in ACTION_ORDER else len(ACTION_ORDER)

    ordered = sorted(misses, key=urgency)  # stable: gates of one reason keep their order
    messages = dict.fromkeys(gate.message for gate in ordered)
    return Change(c.PASSED, False, ordered[0].reason, "; ".join(messages))
