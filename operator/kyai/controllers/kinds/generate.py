"""Generate + judge: the candidate Workload answers the Snapshot's rows, then judges score them.

Pending until the Workload, the Snapshot and the judges are Ready → Generating (``kyai
generate`` in the generation Job) → Judging (``kyai judge``) → Succeeded with the score, or
Failed. The run holds its Workload and Snapshot while it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kyai.api import (
    EvaluationRunSpec,
    EvaluationRunStatus,
    GeneratePlan,
    RunKindName,
    SnapshotStatus,
)
from kyai.builders import evaluation as build
from kyai.builders import worker_args
from kyai.controllers import _conditions as c
from kyai.controllers._references import (
    candidate_secrets,
    key_secret,
    preprocess_declaration,
    ready_reference,
    resolve_judges,
    results_claim_of,
    served_by,
)
from kyai.controllers.kinds._judging import (
    judge_checks,
    judge_children,
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


class GenerateKind(RunKind):
    """Generate answers of a Workload on a Snapshot, then judge them."""

    name: ClassVar[RunKindName] = "generate"

    def references(self, spec: EvaluationRunSpec) -> list[Reference]:
        """The Workload, the Snapshot and the judges' Workloads."""
        assert spec.workload_ref is not None and spec.snapshot_ref is not None
        return [
            Reference("Workload", spec.workload_ref.name),
            Reference("Snapshot", spec.snapshot_ref.name),
            *judge_references(spec.judge_list()),
        ]

    async def resolve(self, ctx: RunContext, spec: EvaluationRunSpec) -> Resolution:
        """The generation arguments from the Workload and Snapshot, the judges' plan."""
        assert spec.workload_ref is not None and spec.snapshot_ref is not None
        svc, namespace, name = ctx.svc, ctx.namespace, ctx.name
        workload = await ready_reference(
            svc, "Workload", namespace, spec.workload_ref.name,
            (c.WORKLOAD_NOT_FOUND, c.WORKLOAD_NOT_READY),
        )  # fmt: skip
        snapshot = await ready_reference(
            svc, "Snapshot", namespace, spec.snapshot_ref.name,
            (c.SNAPSHOT_NOT_FOUND, c.SNAPSHOT_NOT_READY),
        )  # fmt: skip
        rows = SnapshotStatus.model_validate(snapshot["status"])
        judges = await resolve_judges(
            svc, ctx.run, spec.judge_list(),
            dataset=rows.dataset, builtin_dataset=rows.version == "v1",
        )  # fmt: skip
        served = served_by(workload)
        secret = key_secret(worker_args.CANDIDATE_KEY_ENV, served.api_key)
        results_claim = results_claim_of(spec, name)
        preprocess = await preprocess_declaration(svc, namespace, spec)
        plan = GeneratePlan(
            generation_args=worker_args.generation_args(
                namespace=namespace, run=name, endpoint=served.endpoint, model=served.model,
                generation=spec.generation, api_key=secret is not None,
                context_window=served.context_window, preprocess=preprocess is not None,
                server_metrics=served.metrics_url, gpus=served.gpus,
            ),
            preprocess=preprocess,
            candidate_secret=secret,
            snapshot_config_map=rows.config_map,
            snapshot_claim=rows.claim,
            results_claim=results_claim,
            own_claim=spec.storage.existing_claim is None,
            judges=judges,
            generations_path=worker_args.results_path(name),
        )  # fmt: skip
        facts = EvaluationRunStatus(
            workload=spec.workload_ref.name, snapshot=spec.snapshot_ref.name,
            model=served.model, framework=served.framework, dataset=rows.dataset,
            dataset_version=rows.version, dataset_sha256=rows.sha256,
            results_claim=results_claim, results_path=worker_args.results_path(name),
            questions=rows.rows, judge_model=judges.model,
        )  # fmt: skip
        served.record_engine_args(facts)
        return Resolution(plan, facts, protect={"Workload": workload, "Snapshot": snapshot})

    def steps(self, ctx: RunContext, spec: EvaluationRunSpec, plan: AnyPlan) -> Sequence[JobStep]:
        """The generation Job, then the judge Job."""
        assert isinstance(plan, GeneratePlan)
        return (generation_step(ctx, spec, plan), judge_step(ctx, spec, plan, first=False))

    def reported(self, status: EvaluationRunStatus) -> bool:
        """Whether the judge worker's score is in the status."""
        return judged_reported(status)

    def outcome(self, spec: EvaluationRunSpec, status: EvaluationRunStatus) -> Outcome:
        """The score and the score thresholds."""
        return judged_outcome(spec, status)


def generation_step(ctx: RunContext, spec: EvaluationRunSpec, plan: GeneratePlan) -> JobStep:
    """The generation Job, and what both Jobs need made before it.

    The worker RBAC, the results PVC, the judge's fence and graders' ConfigMap (the judge
    Job of a run that generated needs only its key checked).
    """
    storage = spec.storage
    children = list(build.worker_rbac(ctx.run))
    if plan.own_claim:
        children.append(
            build.results_claim(
                ctx.run, size=storage.size, storage_class=storage.storage_class_name
            )
        )
    children += judge_children(ctx, plan)
    status = ctx.status
    return JobStep(
        phase="Generating",
        reason=c.GENERATING,
        message=f"generating answers of {status.model} on {status.dataset}",
        failed_reason=c.GENERATION_FAILED,
        what="generation",
        job=build.generation_job(ctx.name, plan),
        image=ctx.svc.settings.worker_image,
        results_claim=plan.results_claim,
        secrets=candidate_secrets(plan.candidate_secret, ctx.namespace),
        children=tuple(children),
        # Every judge answers before the candidate is asked anything: a dead judge found
        # after the generation costs its GPU hours.
        checks=judge_checks(ctx, spec, plan.judges),
    )
