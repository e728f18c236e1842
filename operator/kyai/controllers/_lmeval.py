"""The lm-eval branch of the EvaluationRun state machine (``spec.lmEval``).

Pending (the Workload is not Ready) → Generating (one Job runs ``kyai lm-eval`` for every task
and writes ``status.metrics``) → Succeeded, with ``Passed`` from ``spec.thresholds.metrics``
(a gated metric that is missing fails the gate and reads -1), or Failed when the Job fails.
Kept apart from :mod:`kyai.controllers.evaluationrun`, which calls :func:`reconcile_lmeval`
for such runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, Thresholds
from kyai.api import WorkloadStatus as WorkloadStatusModel
from kyai.builders import evaluation as build
from kyai.builders import spec_hash, worker_args
from kyai.builders.lmeval import LmEvalPlan, lmeval_job_name, lmeval_plan
from kyai.controllers import _conditions as c
from kyai.controllers._inuse import protect, to_protect
from kyai.controllers._plan import Invalid, Waiting, _key_secret, _ready_reference
from kyai.controllers._pods import failure_message, job_state
from kyai.controllers._status import Change, spec_changed

if TYPE_CHECKING:
    from kyai.controllers.evaluationrun import RunReconciler

#: Where the lm-eval plan sits in ``status.plan``.
PLAN_KEY = "lmEval"


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
        return (c.PASSED, False, c.THRESHOLDS_MISSED, "; ".join(misses)), missing
    return (c.PASSED, True, c.THRESHOLDS_MET, "every threshold is met"), {}


def combine_passed(first: Change | None, second: Change | None) -> Change | None:
    """One Passed condition from two gates: False when either fails (both messages)."""
    if first is None or second is None:
        return first or second
    if first[1] and second[1]:
        return first
    misses = "; ".join(change[3] for change in (first, second) if not change[1])
    return (c.PASSED, False, c.THRESHOLDS_MISSED, misses)


async def _start(r: RunReconciler, spec: EvaluationRunSpec) -> None:
    assert spec.lm_eval is not None and spec.workload_ref is not None
    svc, namespace, name = r.svc, r.namespace, r.name
    try:
        workload = await _ready_reference(
            svc, "Workload", namespace, spec.workload_ref.name,
            (c.WORKLOAD_NOT_FOUND, c.WORKLOAD_NOT_READY),
        )  # fmt: skip
    except Waiting as wait:
        await r._wait(wait)
        return
    except Invalid as invalid:  # pragma: no cover - _ready_reference only waits
        await r.fail(invalid.reason, invalid.message)
        return
    for kind, held in to_protect(r.run, {"Workload": workload}):
        gone = await protect(svc, kind, namespace, held, workload if kind == "Workload" else None)
        if gone is not None:
            await r._wait(Waiting(c.WORKLOAD_NOT_READY, gone))
            return
    w_status = WorkloadStatusModel.model_validate(workload["status"])
    w_spec = workload["spec"]
    model = w_status.served_model_name or w_spec.get("servedModelName") or w_spec["model"]
    secret = _key_secret(
        worker_args.CANDIDATE_KEY_ENV, (w_spec.get("endpoint") or {}).get("apiKeySecretRef")
    )
    assert w_status.endpoint is not None
    plan = lmeval_plan(
        spec.lm_eval, namespace=namespace, run=name, endpoint=w_status.endpoint, model=model,
        concurrency=spec.generation.concurrency,
        request_timeout_seconds=spec.generation.request_timeout_seconds,
        candidate_secret=secret,
    )  # fmt: skip
    results_claim = spec.storage.existing_claim or build.results_claim_name(name)
    tasks = ", ".join(plan.tasks)
    message = f"running lm-eval ({tasks}) against {model}"
    await r._set_phase(
        "Generating", c.GENERATING, message, progressing=True,
        model=model, framework=w_spec.get("framework"), dataset=f"lm-eval:{tasks}",
        results_claim=results_claim, results_path=worker_args.results_path(name),
        started_at=c.now(), accepted_spec=spec.to_k8s(),
        spec_hash=spec_hash(r.run.get("spec") or {}),
        plan={PLAN_KEY: plan.model_dump(mode="json", by_alias=True),
              "resultsClaim": results_claim, "ownClaim": spec.storage.existing_claim is None},
        generation_job=lmeval_job_name(name),
    )  # fmt: skip
    r.writer.event("Normal", c.GENERATING, message)


async def _ensure_job(r: RunReconciler, spec: EvaluationRunSpec, plan: LmEvalPlan) -> bool:
    """Create the Job unless it exists; True once it succeeded (the run fails with it)."""
    kube, name = r.svc.kube, lmeval_job_name(r.name)
    current = await kube.get("Job", r.namespace, name)
    status_plan = r.current().plan or {}
    claim = str(status_plan.get("resultsClaim"))
    job = build.WorkerJob(
        name=name,
        component="lmeval",
        args=plan.args,
        secrets=[plan.candidate_secret] if plan.candidate_secret else [],
        extra_volumes=plan.volumes,
        extra_mounts=plan.mounts,
    )
    if current is None:
        for obj in build.worker_rbac(r.run):
            await kube.create(obj)
        if status_plan.get("ownClaim"):
            storage = spec.storage
            await kube.create(
                build.results_claim(
                    r.run, size=storage.size, storage_class=storage.storage_class_name
                )
            )
        settings = r.svc.settings
        manifest = build.worker_job(
            r.run, job,
            image=settings.lm_eval_worker_image or settings.worker_image,
            image_pull_policy=settings.worker_image_pull_policy,
            results_claim=claim,
            backoff_limit=spec.jobs.backoff_limit,
            active_deadline_seconds=spec.jobs.active_deadline_seconds,
        )  # fmt: skip
        current, _ = await kube.create(manifest)
    state, message = job_state(current)
    if state == "failed":
        said = failure_message(await r._job_pods(job))
        detail = f"{said} (Job: {message})" if said else message
        await r.fail(
            c.GENERATION_FAILED,
            f"the lm-eval Job {name} failed: {detail}; see `kubectl logs job/{name}`",
        )
    return state == "succeeded"


async def _complete(r: RunReconciler, spec: EvaluationRunSpec) -> None:
    from kyai.controllers._plan import KIND

    fresh = await r.svc.kube.get(KIND, r.namespace, r.name)
    r.merge_status((fresh or {}).get("status") or {})
    status = EvaluationRunStatus.model_validate(r.status)
    metrics = dict(status.metrics or {})
    if not metrics:
        await r.fail(
            c.RESULT_MISSING, "the lm-eval Job succeeded but reported no metrics into the status"
        )
        return
    shown = ", ".join(f"{key}={value:.4f}" for key, value in list(metrics.items())[:4])
    message = f"lm-eval finished: {shown}" + (" ..." if len(metrics) > 4 else "")
    await succeed(r, spec, message, metrics)


async def succeed(
    r: RunReconciler,
    spec: EvaluationRunSpec,
    message: str,
    metrics: Mapping[str, float],
    passed: Change | None = None,
) -> None:
    """End the run Succeeded with ``message``; Passed from ``passed`` and the metric gates.

    ``passed`` is the score gate (None: none); ``thresholds.metrics`` gates ``metrics`` (the
    run's ``status.metrics``), a gated metric that is missing is written as -1. Frees what the
    run held (:mod:`kyai.controllers._inuse`).
    """
    gated, missing = metric_gate(spec.thresholds, metrics)
    passed = combine_passed(passed, gated)
    changes: list[Change] = [
        (c.READY, True, c.SUCCEEDED, message),
        (c.PROGRESSING, False, c.SUCCEEDED, message),
    ]
    if passed is not None:
        changes.append(passed)
    update = EvaluationRunStatus(
        phase="Succeeded",
        message=message,
        completed_at=c.now(),
        conditions=r.writer.conditions(*changes),
    )
    if missing:
        update.metrics = {**metrics, **missing}
    await r.writer.patch(update)
    r.writer.event("Normal", c.SUCCEEDED, message)
    await r.release_held()


async def reconcile_lmeval(r: RunReconciler, spec: EvaluationRunSpec) -> None:
    """One step of an lm-eval run (the caller has validated the spec and skips terminal runs)."""
    current = r.current()
    if current.accepted_spec is None:
        await _start(r, spec)
    elif spec_changed(r.run.get("spec") or {}, current.spec_hash):
        from kyai.controllers.evaluationrun import SPEC_CHANGED

        await r.writer.note_spec_change(SPEC_CHANGED)
    current = r.current()
    if current.phase != "Generating":
        return
    plan = LmEvalPlan.model_validate((current.plan or {})[PLAN_KEY])
    if await _ensure_job(r, spec, plan):
        await _complete(r, spec)
