"""The kinds of run the engine knows: one strategy each, registered in :data:`RUN_KINDS`.

A new kind of run is a module here (a :class:`~kyai.controllers.runkind.RunKind`), its
builder in :mod:`kyai.builders`, its spec field and plan in :mod:`kyai.api` (one line of
``KIND_FIELDS``, one member of ``RunPlan``), and one line of :data:`RUN_KINDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, RunKindName
from kyai.controllers._services import Services
from kyai.controllers.kinds.generate import GenerateKind
from kyai.controllers.kinds.lmeval import LmEvalKind
from kyai.controllers.kinds.rejudge import RejudgeKind
from kyai.controllers.runkind import Resolution, RunContext, RunKind

#: Every kind of run, by ``EvaluationRunSpec.kind``.
RUN_KINDS: Mapping[RunKindName, RunKind] = {
    "generate": GenerateKind(),
    "rejudge": RejudgeKind(),
    "lmEval": LmEvalKind(),
}


def kind_of(spec: EvaluationRunSpec) -> RunKind:
    """The kind of run ``spec`` asks for."""
    return RUN_KINDS[spec.kind]


async def resolve(svc: Services, run: Mapping[str, Any], spec: EvaluationRunSpec) -> Resolution:
    """Resolve a run of ``spec`` as it starts (raises ``Waiting`` or ``Invalid``)."""
    status = EvaluationRunStatus.model_validate(run.get("status") or {})
    return await kind_of(spec).resolve(RunContext(svc, run, status), spec)


__all__ = ["RUN_KINDS", "GenerateKind", "LmEvalKind", "RejudgeKind", "kind_of", "resolve"]
