"""What the two judged kinds share: the judge Job step, its Secrets, and how a score reads."""

from __future__ import annotations

from typing import Any

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, JudgedPlan, JudgeSpec, JudgesPlan
from kyai.builders import evaluation as build
from kyai.builders import worker_args
from kyai.controllers import _conditions as c
from kyai.controllers._references import judge_secrets
from kyai.controllers._thresholds import threshold_condition
from kyai.controllers.runkind import (
    EndpointCheck,
    Invalid,
    JobStep,
    Outcome,
    Reference,
    RunContext,
    SecretNeed,
)


def judge_references(judges: list[JudgeSpec]) -> list[Reference]:
    """The Workloads serving a spec's LLM judges."""
    return [
        Reference("Workload", judge.judge_workload)
        for judge in judges
        if judge.judge_workload is not None
    ]


def judge_children(ctx: RunContext, plan: JudgedPlan) -> list[dict[str, Any]]:
    """What a judge pod running grader code needs: its fence and its graders' ConfigMap."""
    wanted = []
    judges = plan.judges
    if judges.graders or judges.builtin:
        wanted.append(build.judge_network_policy(ctx.run, build.endpoint_ports(judges)))
    preprocess = getattr(plan, "preprocess", None)
    if judges.graders or preprocess:
        wanted.append(build.graders_config_map(ctx.run, judges.graders, preprocess))
    return wanted


def _llm_judge(spec: EvaluationRunSpec) -> tuple[str, JudgeSpec] | None:
    """The run's LLM judge and its field (``spec.judge``, ``spec.judges[1]``), if it names one."""
    if spec.judge is not None:
        return ("spec.judge", spec.judge) if spec.judge.type == "llm" else None
    return next(
        (
            (f"spec.judges[{index}]", judge)
            for index, judge in enumerate(spec.judges or ())
            if judge.type == "llm"
        ),
        None,
    )


def judge_checks(
    ctx: RunContext, spec: EvaluationRunSpec, judges: JudgesPlan
) -> tuple[EndpointCheck, ...]:
    """The run's LLM endpoint (its judge's, or the one model-backed graders call), to check.

    Built-in and other Python graders call nothing. The default judge behind the judge
    gateway is checked through the gateway's check route (``default_judge_gateway_check``):
    the same upstream call with the platform's key that a judge pod's ``/v1/models`` makes;
    without that setting it is left to the judge pod's own check.
    """
    llm = judges.llm
    if llm is None:
        return ()
    models = [("model", llm.model)]
    if spec.embedding_model and judges.graders:
        models.append(("spec.embeddingModel", spec.embedding_model))
    if llm.gateway_token is not None:
        url = ctx.svc.settings.default_judge_gateway_check
        if url is None:
            return ()
        where = "the default judge (through the judge gateway)"
        return (EndpointCheck("judge", where, url, tuple(models)),)
    named = _llm_judge(spec)
    if named is not None and named[1].judge_workload is not None:
        where = f"the judge Workload {named[1].judge_workload} ({named[0]})"
    elif named is not None and named[1].llm is not None and named[1].llm.endpoint:
        where = f"{named[0]}.llm.endpoint"
    else:
        where = "the default judge (the operator's KYAI_DEFAULT_JUDGE_ENDPOINT)"
    key = None
    if llm.secret is not None:
        key = SecretNeed("the judge's API key", ctx.namespace, llm.secret.secret, llm.secret.key)
    return (EndpointCheck("judge", where, llm.endpoint, tuple(models), key),)


def judge_step(
    ctx: RunContext, spec: EvaluationRunSpec, plan: JudgedPlan, *, first: bool
) -> JobStep:
    """The judge Job: ``kyai judge`` of the stored answers with every judge of the plan.

    ``first``: no Job ran before it, so it brings the worker RBAC and the graders' objects.
    """
    args = worker_args.judge_args(
        plan.judges,
        namespace=ctx.namespace,
        run=ctx.name,
        generations_path=plan.generations_path,
        generation=spec.generation,
    )
    if spec.embedding_model:  # model_backed graders' ctx.embeddings_create(model="auto")
        args += ["--embedding-model", spec.embedding_model]
    children = [*build.worker_rbac(ctx.run), *judge_children(ctx, plan)] if first else []
    return JobStep(
        phase="Judging",
        reason=c.JUDGING,
        message=f"judging the answers with {plan.judges.model}",
        failed_reason=c.JUDGING_FAILED,
        what="judge",
        job=build.judge_job(ctx.name, plan.judges, args),
        image=ctx.svc.settings.worker_image,
        results_claim=plan.results_claim,
        secrets=judge_secrets(plan.judges, ctx.namespace),
        children=tuple(children),
        checks=judge_checks(ctx, spec, plan.judges),
    )


def judged_reported(status: EvaluationRunStatus) -> bool:
    """Whether the judge worker's score is in the status."""
    return status.avg_score is not None


def judged_outcome(spec: EvaluationRunSpec, status: EvaluationRunStatus) -> Outcome:
    """The score, its figures and the score thresholds' Passed condition."""
    score = status.avg_score
    if score is None:
        raise Invalid(
            c.RESULT_MISSING, "the judge Job succeeded but reported no avgScore into the status"
        )
    questions, error_count = status.questions or 0, status.error_count or 0
    subset = status.subset
    asked = (
        f" (a subset: the first {subset.limit} of {subset.of}, spec.generation.limit)"
        if subset is not None
        else ""
    )
    message = (
        f"avgScore {score:.4f} over {questions} questions{asked} ({error_count} errors), "
        f"comparison key {status.comparison_key}"
    )
    return Outcome(message, threshold_condition(spec.thresholds, score, error_count, questions))
