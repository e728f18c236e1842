"""``spec.thresholds.nonInferiority``: Passed from a paired comparison with a baseline run.

Once a run's own Jobs are done, the engine reads the baseline run
(:func:`compare_with_baseline`):
while the baseline has not succeeded the run waits in its phase (``BaselineNotReady``;
``BaselineNotFound`` turns Stalled after the missing-reference grace; ``BaselineFailed`` is
Stalled at once, and no longer once a baseline of that name succeeds). The baseline finishing
wakes the run (its reference, :func:`baseline_references`). Then :func:`non_inferiority`
decides, with :func:`kyai.stats.compare` on both runs' per-question scores (``status.scores``
or ``status.scoresPacked``, read by :meth:`kyai.api.WorkerStatus.question_scores`):

- comparison keys, question counts or dataset sha256 that differ: Passed False,
  ``NotComparable``, naming both values (the run itself Succeeded); so too a run named as
  its own baseline, and runs whose baselines go round in a circle (each would wait for the
  next);
- scores a status does not hold (a run too large for its status): Passed False,
  ``ScoresUnavailable``;
- continuous scores whose differences are all equal: no interval can be estimated, so no
  verdict is drawn: Passed False, ``NotEstimable``, saying why (never True on a zero-width
  interval);
- otherwise Passed True when the low end of the difference's 95 % interval (Bonett–Price
  for 0/1 scores, else t) is above ``-margin`` (non-inferior), else False, the figures in
  the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from kyai.api import (
    EvaluationRunSpec,
    EvaluationRunStatus,
    NonInferiority,
    NonInferiorityResult,
    ScoresError,
)
from kyai.controllers import _conditions as c
from kyai.controllers._conditions import Change
from kyai.controllers._services import Services
from kyai.controllers.runkind import Reference, Waiting

KIND = "EvaluationRun"

#: The names of the tests and of the intervals in messages.
TEST_NAMES = {"mcnemar-exact": "McNemar exact", "paired-t": "paired t"}
METHOD_NAMES = {"bonett-price": "Bonett-Price", "t": "t", None: "no method"}


def gate_of(spec: EvaluationRunSpec) -> NonInferiority | None:
    """The spec's non-inferiority gate, if it has one."""
    return spec.thresholds.non_inferiority if spec.thresholds is not None else None


def baseline_references(spec: EvaluationRunSpec) -> list[Reference]:
    """The baseline run a run of ``spec`` waits for (its finishing wakes the run)."""
    gate = gate_of(spec)
    return [] if gate is None else [Reference(KIND, gate.baseline_ref.name)]


async def compare_with_baseline(
    svc: Services, namespace: str, run: str, gate: NonInferiority, candidate: EvaluationRunStatus
) -> tuple[Change, NonInferiorityResult | None]:
    """Passed of run ``run`` (its status ``candidate``) from the comparison with its baseline.

    Raises :class:`Waiting` while the baseline has not succeeded (the reason says why).
    """
    name = gate.baseline_ref.name
    if name == run:
        return Change(c.PASSED, False, c.NOT_COMPARABLE, "a run is not its own baseline"), None
    found = await svc.cached(KIND, namespace, name)
    if found is None:
        raise Waiting(
            c.BASELINE_NOT_FOUND,
            f"the baseline EvaluationRun {name} (spec.thresholds.nonInferiority.baselineRef) "
            f"does not exist in namespace {namespace}",
        )
    cycle = await _baseline_cycle(svc, namespace, run, name, found)
    if cycle is not None:
        return Change(c.PASSED, False, c.NOT_COMPARABLE, (
            f"the baselines go round in a circle ({' -> '.join(cycle)}): each run would wait "
            "for the next; name a baseline that does not wait for this run"
        )), None  # fmt: skip
    baseline = _succeeded(name, found)
    return non_inferiority(gate, candidate, baseline, run=run)


#: How far a chain of baselines is followed looking for a circle.
MAX_CHAIN = 8


def _baseline_name(body: Mapping[str, Any]) -> str | None:
    """The baseline the run ``body`` names (None without a non-inferiority gate)."""
    try:
        spec = EvaluationRunSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return None
    gate = gate_of(spec)
    return None if gate is None else gate.baseline_ref.name


async def _baseline_cycle(
    svc: Services, namespace: str, run: str, name: str, body: Mapping[str, Any]
) -> list[str] | None:
    """The circle of baselines from ``run`` back to itself (``run -> name -> ...``), if any."""
    chain = [run, name]
    current: Mapping[str, Any] | None = body
    for _ in range(MAX_CHAIN):
        following = _baseline_name(current) if current is not None else None
        if following is None or following in chain[1:]:
            return None
        chain.append(following)
        if following == run:
            return chain
        current = await svc.cached(KIND, namespace, following)
    return None


def _succeeded(name: str, found: Mapping[str, Any]) -> EvaluationRunStatus:
    """The baseline's status once it Succeeded; else :class:`Waiting` saying why."""
    status = EvaluationRunStatus.model_validate(found.get("status") or {})
    if status.phase == "Failed":
        raise Waiting(
            c.BASELINE_FAILED,
            f"the baseline EvaluationRun {name} failed ({status.message or 'no message'}), so "
            "no comparison can be made: re-create it, or name a baseline that succeeded",
        )
    if status.phase != "Succeeded":
        raise Waiting(
            c.BASELINE_NOT_READY,
            f"waiting for the baseline EvaluationRun {name} to succeed (it is "
            f"{status.phase or 'Pending'}) before the non-inferiority comparison",
        )
    return status


def _not_comparable(
    gate: NonInferiority, candidate: EvaluationRunStatus, baseline: EvaluationRunStatus
) -> str | None:
    """Why the two runs answer different questions (None: the same ones)."""
    return candidate.not_comparable_with(baseline, this="this run", name=gate.baseline_ref.name)


def non_inferiority(
    gate: NonInferiority,
    candidate: EvaluationRunStatus,
    baseline: EvaluationRunStatus,
    *,
    run: str,
) -> tuple[Change, NonInferiorityResult | None]:
    """Passed from the paired comparison of ``candidate`` (run ``run``) with ``baseline``."""
    from kyai.stats import StatsError, compare

    name = gate.baseline_ref.name
    why = _not_comparable(gate, candidate, baseline)
    if why is not None:
        return Change(c.PASSED, False, c.NOT_COMPARABLE, why), None
    try:
        mine = candidate.question_scores(where="this run")
        theirs = baseline.question_scores(where=f"the baseline {name}")
        found = compare(theirs, mine, non_inferiority=gate.margin)
    except ScoresError as exc:
        return Change(c.PASSED, False, c.SCORES_UNAVAILABLE, f"not compared: {exc}"), None
    except StatsError as exc:
        return Change(c.PASSED, False, c.NOT_COMPARABLE, f"not compared with {name}: {exc}"), None
    result = NonInferiorityResult(
        baseline=name, margin=gate.margin, questions=found.n,
        mean_difference=found.mean_difference, standard_error=found.standard_error,
        low=None if found.interval is None else found.interval.low,
        high=None if found.interval is None else found.interval.high,
        interval_method=found.interval_method, confidence=found.confidence,
        test=found.test, p_value=found.p_value, non_inferior=found.non_inferior,
        not_estimable=found.not_estimable,
    )  # fmt: skip
    return Change(c.PASSED, bool(result.non_inferior), _reason(result), message(result)), result


def _reason(result: NonInferiorityResult) -> str:
    if result.non_inferior is None:
        return c.NOT_ESTIMABLE
    return c.THRESHOLDS_MET if result.non_inferior else c.THRESHOLDS_MISSED


def message(result: NonInferiorityResult) -> str:
    """The comparison in words, with its figures (the Passed condition's message)."""
    margin, test = f"{result.margin:g}", TEST_NAMES[result.test]
    if result.low is None or result.high is None or result.p_value is None:
        return (
            f"no verdict against {result.baseline} with a margin of {margin}: "
            f"{result.not_estimable or 'the interval cannot be estimated'}; a zero-width "
            f"interval is no evidence, so the gate does not pass (difference (this run - "
            f"{result.baseline}) {result.mean_difference:+.4f}, no {test} p-value, "
            f"{result.questions} paired questions)"
        )
    figures = (
        f"difference (this run - {result.baseline}) {result.mean_difference:+.4f}, "
        f"{result.confidence:.0%} interval {result.low:+.4f} to {result.high:+.4f} "
        f"({METHOD_NAMES[result.interval_method]}), {test} p = {result.p_value:.3g}, "
        f"{result.questions} paired questions"
    )
    if result.non_inferior:
        return (
            f"non-inferior to {result.baseline} with a margin of {margin}: the "
            f"interval's low end {result.low:+.4f} is above -{margin} ({figures})"
        )
    return (
        f"NOT shown non-inferior to {result.baseline} with a margin of {margin}: the "
        f"interval's low end {result.low:+.4f} is not above -{margin} ({figures})"
    )
