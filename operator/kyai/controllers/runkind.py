"""What a kind of run tells the run engine: the contract between the two.

The engine (:mod:`kyai.controllers.evaluationrun`) owns everything every run does the same:
acceptance of the spec, waiting for references, Secret checks, Job create/adopt, stuck-pod
detection, failure causes, completion, release of what the run holds, success. A
:class:`RunKind` (generate + judge, re-judge, lm-eval: :mod:`kyai.controllers.kinds`) says
only what is its own:

- which objects it waits for (:meth:`RunKind.references`) and what it resolves from them when
  it starts (:meth:`RunKind.resolve`: a typed plan kept in ``status.plan``, the facts its
  status records, the objects it holds while it runs);
- which Job steps it runs, in order (:meth:`RunKind.steps`: each a phase, a worker Job, the
  Secrets it reads and the objects it needs);
- how its result reads once the last Job succeeded (:meth:`RunKind.outcome`).

A kind imports this module and :mod:`kyai.controllers._references`, never the engine
(``lint-imports`` holds it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kyai.api import (
    EvaluationRunPhase,
    EvaluationRunSpec,
    EvaluationRunStatus,
    GeneratePlan,
    LmEvalPlan,
    RejudgePlan,
    RunKindName,
)
from kyai.builders.evaluation import WorkerJob
from kyai.controllers._conditions import Change
from kyai.controllers._services import Services

#: Any kind's plan (the members of :data:`kyai.api.RunPlan`).
AnyPlan = GeneratePlan | RejudgePlan | LmEvalPlan


class RunBlocked(Exception):
    """The run cannot go on now: ``reason`` and ``message`` go into its conditions."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Waiting(RunBlocked):
    """Something the run needs is not there yet: it waits, saying this reason."""


class Invalid(RunBlocked):
    """The run can never go on: it fails with this reason."""


@dataclass(frozen=True)
class Reference:
    """An object a run waits for while it is Pending (its becoming ready wakes the run)."""

    kind: str
    name: str


@dataclass(frozen=True)
class SecretNeed:
    """A Secret key a worker reads: checked before the run starts and before its Job is made.

    A worker pod whose Secret is missing would sit in CreateContainerConfigError instead.
    """

    what: str
    """What the key is, for messages ("the judge's API key")."""
    namespace: str
    name: str
    key: str


@dataclass(frozen=True)
class EndpointCheck:
    """An endpoint the run will call, checked by the operator before a step's Job is made.

    A judge whose endpoint does not answer, does not serve its model or refuses its key is
    found before the candidate is asked anything (hours of GPU time, on a large set), not in
    the judge phase: the run fails with the check's reason (``JudgeUnreachable``, ...).
    """

    side: str
    """Whose endpoint: ``judge``."""
    where: str
    """What named it, for messages (``spec.judge.llm.endpoint``, ``the judge Workload x``)."""
    url: str
    """Its OpenAI-compatible base URL (the judge gateway's check route for the default judge)."""
    models: tuple[tuple[str, str], ...]
    """(field, model) pairs it must list in ``/v1/models``."""
    key: SecretNeed | None = None
    """The Secret key holding its API key, read by the operator for the check."""


@dataclass(frozen=True)
class JobStep:
    """One worker Job of a run and the phase the run is in while it runs."""

    phase: EvaluationRunPhase
    """The run's phase while the Job runs (its status names the Job: ``JOB_PHASES``)."""
    reason: str
    """The phase's condition reason (``Generating``)."""
    message: str
    """The phase's message, said again once what held the Job up is gone."""
    failed_reason: str
    """The reason of the run's failure when the Job fails (``GenerationFailed``)."""
    what: str
    """What the Job does, for messages ("generation", "judge", "lm-eval")."""
    job: WorkerJob
    """The Job (built by :mod:`kyai.builders`)."""
    image: str
    """The worker image it runs."""
    results_claim: str
    """The PVC mounted at the results path."""
    secrets: tuple[SecretNeed, ...] = ()
    """The Secret keys its pod reads."""
    children: tuple[Mapping[str, Any], ...] = ()
    """Objects made right before the Job (worker RBAC, the results PVC, ...), once."""
    checks: tuple[EndpointCheck, ...] = ()
    """Endpoints this Job or a later one calls, checked before the Job is made."""


@dataclass(frozen=True)
class Resolution:
    """What a run resolved when it starts."""

    plan: AnyPlan
    """Kept in ``status.plan``: the run goes on with it whatever changes afterwards."""
    facts: EvaluationRunStatus
    """Status fields recorded at the start (model, dataset, results claim, ...)."""
    message: str | None = None
    """What the run says when it starts (default: its first step's message)."""
    protect: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The objects read, by kind, that the run holds while it runs (in-use finalizer)."""


@dataclass(frozen=True)
class Outcome:
    """How a run that finished its Jobs reads: its message and its own Passed gate."""

    message: str
    passed: Change | None = None


@dataclass(frozen=True)
class RunContext:
    """The run a kind works for (as last read or written), and the operator's services."""

    svc: Services
    run: Mapping[str, Any]
    status: EvaluationRunStatus

    @property
    def namespace(self) -> str:
        """The run's namespace."""
        return str(self.run["metadata"]["namespace"])

    @property
    def name(self) -> str:
        """The run's name."""
        return str(self.run["metadata"]["name"])


class RunKind(ABC):
    """A kind of run: a strategy of the run engine, registered in ``kinds.RUN_KINDS``."""

    #: The kind's name: ``EvaluationRunSpec.kind`` and the ``kind`` of its ``status.plan``.
    name: ClassVar[RunKindName]

    @abstractmethod
    def references(self, spec: EvaluationRunSpec) -> list[Reference]:
        """The objects a Pending run of this kind waits for (their readiness wakes it)."""

    @abstractmethod
    async def resolve(self, ctx: RunContext, spec: EvaluationRunSpec) -> Resolution:
        """Read the references and decide the plan; raise :class:`Waiting` or :class:`Invalid`."""

    @abstractmethod
    def steps(self, ctx: RunContext, spec: EvaluationRunSpec, plan: AnyPlan) -> Sequence[JobStep]:
        """The run's Job steps, in order (pure: called at every reconcile of a started run).

        ``ctx.status`` holds the facts recorded when the run started.
        """

    @abstractmethod
    def reported(self, status: EvaluationRunStatus) -> bool:
        """Whether the workers' result is in ``status`` (else the engine reads it afresh)."""

    @abstractmethod
    def outcome(self, spec: EvaluationRunSpec, status: EvaluationRunStatus) -> Outcome:
        """The result once the last Job succeeded.

        Raise :class:`Invalid` when the result is missing (the run fails), or
        :class:`Waiting` to wait for something first (the run stays in its phase).
        """
