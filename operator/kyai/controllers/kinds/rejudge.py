"""Re-judge: judge the stored answers of another run again (``spec.generationFrom``).

Pending until the source run Succeeded (Stalled at once when it Failed, or when the chain of
sources comes round again: ``CircularRejudge``) → Judging (``kyai judge`` of the source's
answers on its claim) → Succeeded or Failed. The candidate is never called; the run's columns
show the source's Workload and Snapshot. The source may itself be a re-judge: the answers
judged are then those its own judge read (its plan's ``generationsPath``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, RejudgePlan, RunKindName
from kyai.builders import worker_args
from kyai.controllers._references import generations_of, resolve_judges, source_run
from kyai.controllers.kinds._judging import (
    judge_references,
    judge_step,
    judged_outcome,
    judged_reported,
)
from kyai.controllers.runkind import (
    AnyPlan,
    JobStep,
    Outcome,
    Reference,
    Resolution,
    RunContext,
    RunKind,
)

#: What a re-judge records of its source run when it starts.
SOURCE_FACTS = (
    "workload", "snapshot", "model", "framework", "engine_args_set", "engine_args_hash",
    "dataset", "dataset_version", "dataset_sha256",
)  # fmt: skip


class RejudgeKind(RunKind):
    """Judge another run's stored answers again."""

    name: ClassVar[RunKindName] = "rejudge"

    def references(self, spec: EvaluationRunSpec) -> list[Reference]:
        """The source run and the judges' Workloads."""
        assert spec.generation_from is not None
        return [
            Reference("EvaluationRun", spec.generation_from.run_ref.name),
            *judge_references(spec.judge_list()),
        ]

    async def resolve(self, ctx: RunContext, spec: EvaluationRunSpec) -> Resolution:
        """The source's stored answers and the judges' plan."""
        assert spec.generation_from is not None
        source_name = spec.generation_from.run_ref.name
        source = await source_run(ctx.svc, ctx.namespace, source_name, run=ctx.name)
        assert source.results_claim is not None
        judges = await resolve_judges(
            ctx.svc, ctx.run, spec.judge_list(),
            dataset=source.dataset, builtin_dataset=source.dataset_version == "v1",
        )  # fmt: skip
        plan = RejudgePlan(
            results_claim=source.results_claim,
            own_claim=False,
            judges=judges,
            generations_path=generations_of(source, source_name),
        )
        facts = EvaluationRunStatus(
            results_claim=source.results_claim,
            results_path=worker_args.results_path(ctx.name),
            judge_model=judges.model,
        )
        for field in SOURCE_FACTS:
            if getattr(source, field) is not None:
                setattr(facts, field, getattr(source, field))
        return Resolution(plan, facts, message=f"judging the stored answers of {source_name}")

    def steps(self, ctx: RunContext, spec: EvaluationRunSpec, plan: AnyPlan) -> Sequence[JobStep]:
        """The judge Job alone."""
        assert isinstance(plan, RejudgePlan)
        return (judge_step(ctx, spec, plan, first=True),)

    def reported(self, status: EvaluationRunStatus) -> bool:
        """Whether the judge worker's score is in the status."""
        return judged_reported(status)

    def outcome(self, spec: EvaluationRunSpec, status: EvaluationRunStatus) -> Outcome:
        """The score and the score thresholds."""
        return judged_outcome(spec, status)
