"""EvaluationRun: wait for the candidate, the snapshot and the judge; generate; judge; score.

The reconcile is idempotent and reads the actual state every time (the run's status, its
Jobs), so that a restarted operator picks up where it was and never creates a Job twice:
children have deterministic names and an existing one is adopted, not re-created.
Workers report progress and the result into the status; the operator owns phase and
conditions. This module is the state machine only: the plan is resolved by
:mod:`kyai.controllers._plan`, manifests and worker arguments come from :mod:`kyai.builders`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, Thresholds
from kyai.api.evaluationrun import EvaluationRunPhase
from kyai.builders import evaluation as build
from kyai.builders import spec_hash, worker_args
from kyai.builders.plan import LLMJudgePlan, Plan
from kyai.controllers import _conditions as c
from kyai.controllers._kube import KubeError
from kyai.controllers._plan import KIND, Invalid, Waiting, resolve_plan
from kyai.controllers._services import Services
from kyai.controllers._status import Change, StatusWriter, spec_changed

TERMINAL = ("Succeeded", "Failed")

SPEC_CHANGED = (
    "the spec changed after the run started; the change is ignored (a run's spec is "
    "immutable once started): create a new EvaluationRun instead"
)


def job_state(job: Mapping[str, Any] | None) -> tuple[str, str]:
    """("missing" | "running" | "succeeded" | "failed", message) of a Job."""
    if job is None:
        return "missing", ""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", ""
        if condition.get("type") == "Failed":
            return "failed", condition.get("message") or condition.get("reason") or "the Job failed"
    if (status.get("succeeded") or 0) >= 1:
        return "succeeded", ""
    return "running", ""


def threshold_condition(
    thresholds: Thresholds | None, score: float, error_count: int, questions: int
) -> Change | None:
    """The Passed condition of a succeeded run, when the spec sets thresholds."""
    if thresholds is None or (thresholds.avg_score is None and thresholds.max_error_rate is None):
        return None
    misses = []
    if thresholds.avg_score is not None and score < thresholds.avg_score:
        misses.append(f"avgScore {score:.4f} < {thresholds.avg_score}")
    rate = error_count / questions if questions else 0.0
    if thresholds.max_error_rate is not None and rate > thresholds.max_error_rate:
        misses.append(f"error rate {rate:.4f} > {thresholds.max_error_rate}")
    if misses:
        return (c.PASSED, False, c.THRESHOLDS_MISSED, "; ".join(misses))
    return (c.PASSED, True, c.THRESHOLDS_MET, "every threshold is met")


class RunReconciler:
    """The state machine of one EvaluationRun: Pending → Generating → Judging → done."""

    def __init__(self, svc: Services, run: dict[str, Any]) -> None:
        self.svc = svc
        self.writer = StatusWriter(svc, run, on_patched=svc.metrics.observe)
        self.name = self.writer.name
        self.namespace = self.writer.namespace

    @property
    def run(self) -> Mapping[str, Any]:
        """The run as last read or written."""
        return self.writer.body

    @property
    def status(self) -> dict[str, Any]:
        """The run's status as last read or written."""
        return self.writer.status

    async def _set_phase(
        self,
        phase: EvaluationRunPhase,
        reason: str,
        message: str,
        *,
        progressing: bool,
        **fields: Any,
    ) -> None:
        conditions = self.writer.conditions(
            (c.READY, False, reason, message), (c.PROGRESSING, progressing, reason, message)
        )
        await self.writer.patch(
            EvaluationRunStatus(phase=phase, message=message, conditions=conditions, **fields)
        )

    async def fail(self, reason: str, message: str) -> None:
        """End the run Failed."""
        await self._set_phase("Failed", reason, message, progressing=False, completed_at=c.now())
        self.writer.event("Warning", reason, message)

    def current(self) -> EvaluationRunStatus:
        """The run's status as last read or written, through the API model."""
        return EvaluationRunStatus.model_validate(self.status)

    async def reconcile(self) -> None:
        """One step of the state machine (call it again on any change)."""
        current = self.current()
        if current.phase in TERMINAL or self.run["metadata"].get("deletionTimestamp"):
            return
        accepted = current.accepted_spec
        try:
            spec = EvaluationRunSpec.model_validate(accepted or self.run.get("spec") or {})
        except ValidationError as exc:
            await self.fail(c.INVALID_SPEC, c.validation_message(exc))
            return
        if spec.lm_eval is not None:  # lm-evaluation-harness tasks: their own branch
            from kyai.controllers._lmeval import reconcile_lmeval

            await reconcile_lmeval(self, spec)
            return
        if accepted is None:
            await self._start(spec)
            current = self.current()
        elif spec_changed(self.run.get("spec") or {}, current.spec_hash):
            await self.writer.note_spec_change(SPEC_CHANGED)
        if current.phase not in ("Generating", "Judging"):
            return
        plan = Plan.from_status(current.plan)
        if current.phase == "Generating":
            await self._generating(plan, spec)
        if self.current().phase == "Judging":
            await self._judging(plan, spec)

    async def _wait(self, wait: Waiting) -> None:
        current = self.current()
        if current.phase == "Pending" and current.message == wait.message:
            return
        await self._set_phase("Pending", wait.reason, wait.message, progressing=False)
        self.writer.event("Normal", wait.reason, wait.message)

    async def _start(self, spec: EvaluationRunSpec) -> None:
        try:
            resolved = await resolve_plan(self.svc, self.run, spec)
        except Waiting as wait:
            await self._wait(wait)
            return
        except Invalid as invalid:
            await self.fail(invalid.reason, invalid.message)
            return
        plan, facts = resolved.plan, resolved.facts
        phase: EvaluationRunPhase
        if plan.generate:
            phase, reason = "Generating", c.GENERATING
            message = f"generating answers of {facts.model} on {facts.dataset}"
        else:
            assert spec.generation_from is not None
            phase, reason = "Judging", c.JUDGING
            message = f"judging the stored answers of {spec.generation_from.run_ref.name}"
        await self._set_phase(
            phase, reason, message, progressing=True,
            **{name: getattr(facts, name) for name in facts.model_fields_set},
            started_at=c.now(), accepted_spec=spec.to_k8s(),
            spec_hash=spec_hash(self.run.get("spec") or {}), plan=plan.to_status(),
            judge_model=plan.judges.model,
            generation_job=build.generation_job_name(self.name) if plan.generate else None,
            judge_job=build.judge_job_name(self.name),
        )  # fmt: skip
        self.writer.event("Normal", reason, message)

    async def _ensure_common(self, plan: Plan, spec: EvaluationRunSpec) -> None:
        """What a Job needs: worker RBAC, the PVC, the judge's key, graders and their fence."""
        kube = self.svc.kube
        for obj in build.worker_rbac(self.run):
            await kube.create(obj)
        if plan.own_claim and plan.generate:
            storage = spec.storage
            await kube.create(
                build.results_claim(
                    self.run, size=storage.size, storage_class=storage.storage_class_name
                )
            )
        llm = plan.judges.llm
        if llm is not None and llm.copy_secret_from is not None and llm.secret is not None:
            await self._copy_judge_secret(llm)
        if plan.judges.graders or plan.judges.builtin:
            ports = build.endpoint_ports(plan.judges)
            await kube.create(build.judge_network_policy(self.run, ports))
        if plan.judges.graders or plan.preprocess:
            await kube.create(
                build.graders_config_map(self.run, plan.judges.graders, plan.preprocess)
            )

    async def _copy_judge_secret(self, judge: LLMJudgePlan) -> None:
        source, secret = judge.copy_secret_from, judge.secret
        assert source is not None and secret is not None
        if await self.svc.kube.get("Secret", self.namespace, secret.secret):
            return
        found = await self.svc.kube.get("Secret", source.namespace, source.name)
        if found is None or source.key not in (found.get("data") or {}):
            raise KubeError(
                f"the default judge's Secret {source.namespace}/{source.name} (key {source.key}) "
                "cannot be read"
            )
        await self.svc.kube.create(build.judge_secret(self.run, secret, found["data"][source.key]))

    async def _job_outcome(
        self, job: build.WorkerJob, spec: EvaluationRunSpec, plan: Plan, reason: str, what: str
    ) -> bool:
        """Create the Job unless it exists; True once it succeeded (the run fails with it)."""
        current = await self.svc.kube.get("Job", self.namespace, job.name)
        if current is None:
            # What the Job needs is made right before it, once per Job (not every reconcile).
            await self._ensure_common(plan, spec)
            settings = self.svc.settings
            manifest = build.worker_job(
                self.run, job,
                image=settings.worker_image,
                image_pull_policy=settings.worker_image_pull_policy,
                results_claim=plan.results_claim,
                backoff_limit=spec.jobs.backoff_limit,
                active_deadline_seconds=spec.jobs.active_deadline_seconds,
            )  # fmt: skip
            current, _ = await self.svc.kube.create(manifest)
        state, message = job_state(current)
        if state == "failed":
            await self.fail(
                reason,
                f"the {what} Job {job.name} failed: {message}; see `kubectl logs job/{job.name}`",
            )
        return state == "succeeded"

    async def _generating(self, plan: Plan, spec: EvaluationRunSpec) -> None:
        job = build.generation_job(self.name, plan)
        if await self._job_outcome(job, spec, plan, c.GENERATION_FAILED, "generation"):
            text = f"judging the answers with {plan.judges.model}"
            await self._set_phase("Judging", c.JUDGING, text, progressing=True)
            self.writer.event("Normal", c.JUDGING, text)

    async def _judging(self, plan: Plan, spec: EvaluationRunSpec) -> None:
        args = worker_args.judge_args(
            plan.judges,
            namespace=self.namespace,
            run=self.name,
            generations_path=plan.generations_path,
            generation=spec.generation,
        )
        if spec.embedding_model:  # model_backed graders' ctx.embeddings_create(model="auto")
            args += ["--embedding-model", spec.embedding_model]
        job = build.judge_job(self.name, plan.judges, args)
        if await self._job_outcome(job, spec, plan, c.JUDGING_FAILED, "judge"):
            await self._complete(spec)

    async def _complete(self, spec: EvaluationRunSpec) -> None:
        fresh = await self.svc.kube.get(KIND, self.namespace, self.name)
        self.status.update((fresh or {}).get("status") or {})
        status = EvaluationRunStatus.model_validate(self.status)
        score = status.avg_score
        if score is None:
            await self.fail(
                c.RESULT_MISSING,
                "the judge Job succeeded but reported no avgScore into the status",
            )
            return
        questions, error_count = status.questions or 0, status.error_count or 0
        message = (
            f"avgScore {score:.4f} over {questions} questions ({error_count} errors), "
            f"comparison key {status.comparison_key}"
        )
        changes: list[Change] = [
            (c.READY, True, c.SUCCEEDED, message),
            (c.PROGRESSING, False, c.SUCCEEDED, message),
        ]
        passed = threshold_condition(spec.thresholds, score, error_count, questions)
        # thresholds.metrics gates any entry of status.metrics (issue 13).
        from kyai.controllers._lmeval import combine_passed, metric_gate

        gated, missing = metric_gate(spec.thresholds, status.metrics or {})
        passed = combine_passed(passed, gated)
        if passed is not None:
            changes.append(passed)
        update = EvaluationRunStatus(
            phase="Succeeded",
            message=message,
            completed_at=c.now(),
            conditions=self.writer.conditions(*changes),
        )
        if missing:
            update.metrics = {**(status.metrics or {}), **missing}
        await self.writer.patch(update)
        self.writer.event("Normal", c.SUCCEEDED, message)


async def reconcile_run(svc: Services, namespace: str, name: str) -> None:
    """Fetch the run and take one step; nothing to do when it is gone."""
    async with svc.locked(KIND, namespace, name):
        run = await svc.kube.get(KIND, namespace, name)
        if run is None:
            return
        await RunReconciler(svc, run).reconcile()
