"""lm-eval: lm-evaluation-harness tasks against the Workload (``spec.lmEval``).

Pending until the Workload is Ready → Generating (one Job runs ``kyai lm-eval`` for every
task and writes ``status.metrics``) → Succeeded, with ``Passed`` from
``spec.thresholds.metrics`` (a gated metric that is missing fails the gate and reads -1), or
Failed when the Job fails. The run holds its Workload while it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, LmEvalPlan, RunKindName
from kyai.builders import evaluation as build
from kyai.builders import worker_args
from kyai.builders.lmeval import lmeval_job_name, lmeval_plan
from kyai.controllers import _conditions as c
from kyai.controllers._references import (
    candidate_secrets,
    key_secret,
    ready_reference,
    served_by,
)
from kyai.controllers.runkind import (
    AnyPlan,
    Invalid,
    JobStep,
    Outcome,
    Reference,
    Resolution,
    RunContext,
    RunKind,
)

#: Metrics named in the Succeeded message at most.
SHOWN_METRICS = 4


class LmEvalKind(RunKind):
    """Run lm-evaluation-harness tasks against a Workload."""

    name: ClassVar[RunKindName] = "lmEval"

    def references(self, spec: EvaluationRunSpec) -> list[Reference]:
        """The Workload it asks."""
        assert spec.workload_ref is not None
        return [Reference("Workload", spec.workload_ref.name)]

    async def resolve(self, ctx: RunContext, spec: EvaluationRunSpec) -> Resolution:
        """The ``kyai lm-eval`` arguments against the Workload, the data files' volumes."""
        assert spec.lm_eval is not None and spec.workload_ref is not None
        workload = await ready_reference(
            ctx.svc, "Workload", ctx.namespace, spec.workload_ref.name,
            (c.WORKLOAD_NOT_FOUND, c.WORKLOAD_NOT_READY),
        )  # fmt: skip
        served = served_by(workload)
        plan = lmeval_plan(
            spec.lm_eval, namespace=ctx.namespace, run=ctx.name, endpoint=served.endpoint,
            model=served.model, concurrency=spec.generation.concurrency,
            request_timeout_seconds=spec.generation.request_timeout_seconds,
            candidate_secret=key_secret(worker_args.CANDIDATE_KEY_ENV, served.api_key),
            existing_claim=spec.storage.existing_claim,
        )  # fmt: skip
        facts = EvaluationRunStatus(
            workload=spec.workload_ref.name, model=served.model, framework=served.framework,
            dataset=f"lm-eval:{', '.join(plan.tasks)}", results_claim=plan.results_claim,
            results_path=worker_args.results_path(ctx.name),
        )  # fmt: skip
        served.record_engine_args(facts)
        return Resolution(plan, facts, protect={"Workload": workload})

    def steps(self, ctx: RunContext, spec: EvaluationRunSpec, plan: AnyPlan) -> Sequence[JobStep]:
        """The lm-eval Job."""
        assert isinstance(plan, LmEvalPlan)
        settings, storage = ctx.svc.settings, spec.storage
        children = list(build.worker_rbac(ctx.run))
        if plan.own_claim:
            children.append(
                build.results_claim(
                    ctx.run, size=storage.size, storage_class=storage.storage_class_name
                )
            )
        job = build.WorkerJob(
            name=lmeval_job_name(ctx.name),
            component="lmeval",
            args=plan.args,
            secrets=[plan.candidate_secret] if plan.candidate_secret else [],
            extra_volumes=plan.volumes,
            extra_mounts=plan.mounts,
        )
        step = JobStep(
            phase="Generating",
            reason=c.GENERATING,
            message=f"running lm-eval ({', '.join(plan.tasks)}) against {ctx.status.model}",
            failed_reason=c.GENERATION_FAILED,
            what="lm-eval",
            job=job,
            image=settings.lm_eval_worker_image or settings.worker_image,
            results_claim=plan.results_claim,
            secrets=candidate_secrets(plan.candidate_secret, ctx.namespace),
            children=tuple(children),
        )
        return (step,)

    def reported(self, status: EvaluationRunStatus) -> bool:
        """Whether the worker's metrics are in the status."""
        return bool(status.metrics)

    def outcome(self, spec: EvaluationRunSpec, status: EvaluationRunStatus) -> Outcome:
        """The metrics (their gates are the engine's: ``thresholds.metrics``)."""
        metrics = dict(status.metrics or {})
        if not metrics:
            raise Invalid(
                c.RESULT_MISSING,
                "the lm-eval Job succeeded but reported no metrics into the status",
            )
        shown = list(metrics.items())[:SHOWN_METRICS]
        text = ", ".join(f"{key}={value:.4f}" for key, value in shown)
        more = " ..." if len(metrics) > SHOWN_METRICS else ""
        return Outcome(f"lm-eval finished: {text}{more}")
