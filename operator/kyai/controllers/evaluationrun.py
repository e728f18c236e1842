"""EvaluationRun: wait for the candidate, the snapshot and the judge; generate; judge; score.

The reconcile is idempotent and reads the actual state every time (the run's status, its
Jobs), so that a restarted operator picks up where it was and never creates a Job twice:
children have deterministic names and an existing one is adopted, not re-created.
Workers report progress and the result into the status; the operator owns phase and
conditions. This module is the state machine only: the plan is resolved by
:mod:`kyai.controllers._plan`, manifests and worker arguments come from :mod:`kyai.builders`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, Thresholds
from kyai.api.evaluationrun import EvaluationRunPhase
from kyai.builders import evaluation as build
from kyai.builders import label_value, spec_hash, worker_args
from kyai.builders.plan import LLMJudgePlan, Plan
from kyai.constants import LABEL_COMPONENT, LABEL_RUN
from kyai.controllers import _conditions as c
from kyai.controllers._inuse import (
    ENGINE_ARGS,
    engine_args_of,
    protect,
    references,
    release_references,
    to_protect,
)
from kyai.controllers._kube import KubeError
from kyai.controllers._plan import KIND, Invalid, Waiting, missing_secret, resolve_plan
from kyai.controllers._pods import failure_message, first_trouble, job_state, parse_time
from kyai.controllers._services import NORMAL, Services
from kyai.controllers._status import Change, StatusWriter, spec_changed

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed")

SPEC_CHANGED = (
    "the spec changed after the run started; the change is ignored (a run's spec is "
    "immutable once started): create a new EvaluationRun instead"
)


#: Seconds after its creation a running Job's pods are first looked at (pods normally start
#: within them; the reconcile of 1,000 runs should not list pods every 10 seconds each).
START_GRACE_SECONDS = 15.0


def _may_be_stuck(job: Mapping[str, Any] | None, now: datetime | None = None) -> bool:
    """A running Job without a ready pod, older than :data:`START_GRACE_SECONDS` at ``now``."""
    if job is None or (job.get("status") or {}).get("ready"):
        return False
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    now = now or datetime.now(UTC)
    return created is None or (now - created).total_seconds() > START_GRACE_SECONDS


def _ready_reason(status: EvaluationRunStatus) -> str | None:
    for condition in status.conditions or []:
        if condition.type == c.READY:
            return condition.reason
    return None


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

    def __init__(
        self, svc: Services, run: dict[str, Any], jobs: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        self.svc = svc
        self.writer = StatusWriter(svc, run, on_patched=self._patched)
        self.name = self.writer.name
        self.namespace = self.writer.namespace
        #: Jobs of the run as a watch event just delivered them (no GET needed for those).
        self.jobs: dict[str, Mapping[str, Any]] = {
            str(job["metadata"]["name"]): job for job in jobs
        }
        self._current: tuple[int, EvaluationRunStatus] | None = None

    def _patched(self, body: dict[str, Any]) -> None:
        self.svc.metrics.observe(body)
        self.svc.remember(body)

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
        await self.release_held()

    async def release_held(self) -> None:
        """The finished run's references: free those being deleted.

        The others keep their in-use finalizer (that they are not being deleted is known from
        the watch: no GET for them).
        """
        refs = [ref for ref in references(self.run) if self._maybe_deleted(*ref)]
        await release_references(self.svc, self.namespace, refs)

    def _maybe_deleted(self, kind: str, name: str) -> bool:
        """Whether ``name`` (or, for a Workload, the EngineArgsSet it names) may be being deleted.

        Not in the cache: unknown, so yes (``release_references`` reads it).
        """
        obj = self.svc.seen.get((kind, self.namespace, name))
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return True
        engine_args = engine_args_of(obj) if kind == "Workload" else None
        return engine_args is not None and self._maybe_deleted(ENGINE_ARGS, engine_args)

    async def report_forbidden(self, error: KubeError) -> None:
        """Say on the run that the API refused the operator a call (RBAC), once; kopf retries.

        The phase stays as it is: the run goes on by itself once the permission is granted.
        """
        message = f"the operator was refused an API call this run needs: {error}"
        degraded = c.get_condition(self.status.get("conditions"), c.DEGRADED)
        if degraded is not None and degraded.get("message") == message:
            return
        conditions = self.writer.conditions((c.DEGRADED, True, c.FORBIDDEN, message))
        await self.writer.patch(EvaluationRunStatus(conditions=conditions))
        self.writer.event("Warning", c.FORBIDDEN, message)

    async def clear_forbidden(self) -> None:
        """Degraded/Forbidden back to False once a reconcile went through."""
        degraded = c.get_condition(self.status.get("conditions"), c.DEGRADED)
        if degraded is None or degraded.get("reason") != c.FORBIDDEN:
            return
        if degraded.get("status") != "True":
            return
        conditions = self.writer.conditions(
            (c.DEGRADED, False, c.FORBIDDEN, "the operator's API calls are allowed again")
        )
        await self.writer.patch(EvaluationRunStatus(conditions=conditions))

    def current(self) -> EvaluationRunStatus:
        """The run's status as last read or written, through the API model.

        Read again only after a write (or :meth:`merge_status`): a reconcile asks often.
        """
        revision = self.writer.revision
        if self._current is None or self._current[0] != revision:
            self._current = (revision, EvaluationRunStatus.model_validate(self.status))
        return self._current[1]

    def merge_status(self, status: Mapping[str, Any]) -> None:
        """Merge fields read from the API server into the status as last seen."""
        self.writer.merge(status)

    async def reconcile(self) -> None:
        """One step of the state machine (call it again on any change)."""
        current = self.current()
        if current.phase in TERMINAL or self.run["metadata"].get("deletionTimestamp"):
            return
        accepted = current.accepted_spec
        uid = self.run["metadata"].get("uid")
        try:
            if accepted:  # fixed once started: parsed once
                spec = self.svc.parsed(
                    uid, "acceptedSpec", lambda: EvaluationRunSpec.model_validate(accepted)
                )
            else:
                spec = EvaluationRunSpec.model_validate(self.run.get("spec") or {})
        except ValidationError as exc:
            await self.fail(c.INVALID_SPEC, c.validation_message(exc))
            return
        if spec.lm_eval is not None:  # lm-evaluation-harness tasks: their own branch
            from kyai.controllers._lmeval import reconcile_lmeval

            await reconcile_lmeval(self, spec)
            return
        started = accepted is None
        if started:
            await self._start(spec)
            current = self.current()
        elif spec_changed(self.run.get("spec") or {}, current.spec_hash):
            await self.writer.note_spec_change(SPEC_CHANGED)
        if current.phase not in ("Generating", "Judging"):
            return
        status_plan = current.plan
        plan = self.svc.parsed(uid, "plan", lambda: Plan.from_status(status_plan))
        judging = current.phase == "Judging"
        if current.phase == "Generating":
            # Just started: its Jobs cannot exist yet (they are made only once it is started).
            await self._generating(plan, spec, fresh=started)
        if self.current().phase == "Judging":
            # Just judging (or just started judging stored answers): no judge Job yet (it is
            # made only once the run says Judging).
            await self._judging(plan, spec, fresh=started or not judging)

    async def _wait(self, wait: Waiting) -> None:
        current = self.current()
        if (
            current.phase == "Pending"
            and current.message == wait.message
            and not self.writer.stall_due()
        ):
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
        missing = await missing_secret(self.svc, self.namespace, plan)
        if missing is not None:
            await self._wait(missing)
            return
        if plan.generate:
            read = {obj["kind"]: obj for obj in resolved.objects}
            for kind, name in to_protect(self.run, read):
                gone = await protect(self.svc, kind, self.namespace, name, read.get(kind))
                if gone is not None:
                    reason = c.SNAPSHOT_NOT_READY if kind == "Snapshot" else c.WORKLOAD_NOT_READY
                    await self._wait(Waiting(reason, gone))
                    return
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

    async def _ensure_common(self, plan: Plan, spec: EvaluationRunSpec, *, judge: bool) -> None:
        """What a Job needs: worker RBAC, the PVC, the judge's key, graders and their fence.

        All but the judge's key are made before the generation Job; the judge Job of a run
        that generated (its generation Job succeeded) needs only the key checked.
        """
        kube = self.svc.kube
        llm = plan.judges.llm
        if judge and plan.generate:
            if llm is not None and llm.copy_secret_from is not None and llm.secret is not None:
                await self._copy_judge_secret(llm)
            return
        wanted = list(build.worker_rbac(self.run))
        if plan.own_claim and plan.generate:
            storage = spec.storage
            wanted.append(
                build.results_claim(
                    self.run, size=storage.size, storage_class=storage.storage_class_name
                )
            )
        if plan.judges.graders or plan.judges.builtin:
            ports = build.endpoint_ports(plan.judges)
            wanted.append(build.judge_network_policy(self.run, ports))
        if plan.judges.graders or plan.preprocess:
            wanted.append(build.graders_config_map(self.run, plan.judges.graders, plan.preprocess))
        # Independent of each other: created side by side (one round trip, not six).
        await asyncio.gather(*(kube.ensure(obj) for obj in wanted))
        if llm is not None and llm.copy_secret_from is not None and llm.secret is not None:
            await self._copy_judge_secret(llm)

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
        self,
        job: build.WorkerJob,
        spec: EvaluationRunSpec,
        plan: Plan,
        reason: str,
        what: str,
        current: Mapping[str, Any] | None = None,
        *,
        known_missing: bool = False,
    ) -> bool:
        """Create the Job unless it exists; True once it succeeded (the run fails with it).

        ``current`` is the Job when the caller has just read it (None: read it here, unless
        ``known_missing``).
        """
        if current is None:
            current = self.jobs.get(job.name)
        if current is None and not known_missing:
            current = await self.svc.kube.get("Job", self.namespace, job.name)
        if current is None:
            # What the Job needs is made right before it, once per Job (not every reconcile).
            await self._ensure_common(plan, spec, judge=job.component != "generate")
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
            # Its pods are looked at once the grace is over (then at every resync tick).
            look_later(self.svc, self.namespace, self.name, START_GRACE_SECONDS + 1)
        state, message = job_state(current)
        if state == "failed":
            said = failure_message(await self._job_pods(job))
            detail = f"{said} (Job: {message})" if said else message
            await self.fail(
                reason,
                f"the {what} Job {job.name} failed: {detail}; see `kubectl logs job/{job.name}`",
            )
        elif state == "running" and _may_be_stuck(current):
            await self._watch_start(job, what)
        return state == "succeeded"

    async def _job_pods(self, job: build.WorkerJob) -> list[dict[str, Any]]:
        """The pods of a worker Job (selected by the template's labels, owned by the Job)."""
        selector = f"{LABEL_RUN}={label_value(self.name)},{LABEL_COMPONENT}={job.component}"
        pods = await self.svc.kube.list("Pod", self.namespace, label_selector=selector)
        return [
            pod
            for pod in pods
            if any(
                ref.get("kind") == "Job" and ref.get("name") == job.name
                for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
            )
        ]

    async def _watch_start(self, job: build.WorkerJob, what: str) -> None:
        """Report a worker pod that cannot start on the run; fail the run after the deadline."""
        trouble = first_trouble(await self._job_pods(job))
        current = self.current()
        reason = _ready_reason(current)
        if trouble is None:
            if reason == c.WORKER_NOT_STARTING:
                await self._resume_phase(current)
            return
        deadline = self.svc.settings.worker_start_timeout_seconds
        waited = (datetime.now(UTC) - trouble.since).total_seconds()
        if waited > deadline:
            await self.svc.kube.delete("Job", self.namespace, job.name)
            await self.fail(
                c.WORKER_NOT_STARTING,
                f"the {what} Job {job.name} could not start its {trouble.describe()} "
                f"(for {waited:.0f} s, longer than the {deadline:g} s the operator's "
                "workerStartTimeoutSeconds allows)",
            )
            return
        message = (
            f"the {what} Job {job.name} cannot start its {trouble.describe()}; the run fails "
            f"if it has not started {deadline:g} s after the pod was created"
        )
        if reason == c.WORKER_NOT_STARTING and current.message == message:
            return
        assert current.phase is not None
        await self._set_phase(current.phase, c.WORKER_NOT_STARTING, message, progressing=True)
        self.writer.event("Warning", c.WORKER_NOT_STARTING, message)

    async def _resume_phase(self, current: EvaluationRunStatus) -> None:
        """Back to the phase's own reason and message once what blocked it is gone."""
        if current.phase == "Judging":
            reason, text = c.JUDGING, f"judging the answers with {current.judge_model}"
        else:
            reason = c.GENERATING
            text = f"generating answers of {current.model} on {current.dataset}"
        assert current.phase is not None
        await self._set_phase(current.phase, reason, text, progressing=True)

    async def _generating(self, plan: Plan, spec: EvaluationRunSpec, *, fresh: bool) -> None:
        job = build.generation_job(self.name, plan)
        if await self._job_outcome(
            job, spec, plan, c.GENERATION_FAILED, "generation", known_missing=fresh
        ):
            text = f"judging the answers with {plan.judges.model}"
            await self._set_phase("Judging", c.JUDGING, text, progressing=True)
            self.writer.event("Normal", c.JUDGING, text)

    async def _judging(self, plan: Plan, spec: EvaluationRunSpec, *, fresh: bool) -> None:
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
        existing = self.jobs.get(job.name)
        if existing is None and not fresh:
            existing = await self.svc.kube.get("Job", self.namespace, job.name)
        if existing is None and not await self._judge_secret_ready(plan):
            return
        if await self._job_outcome(
            job, spec, plan, c.JUDGING_FAILED, "judge", existing, known_missing=existing is None
        ):
            await self._complete(spec)

    async def _judge_secret_ready(self, plan: Plan) -> bool:
        """Before the judge Job exists: its Secret is there, or the run says it waits for it.

        The wait has the same deadline as a worker pod that cannot start, counted from the
        moment the run began waiting.
        """
        missing = await missing_secret(self.svc, self.namespace, plan, judge_only=True)
        current = self.current()
        waiting_since = None
        for condition in current.conditions or []:
            if condition.type == c.PROGRESSING and condition.reason == c.SECRET_NOT_FOUND:
                waiting_since = parse_time(condition.last_transition_time)
        if missing is None:
            if waiting_since is not None:
                await self._resume_phase(current)
            return True
        deadline = self.svc.settings.worker_start_timeout_seconds
        if waiting_since is not None:
            waited = (datetime.now(UTC) - waiting_since).total_seconds()
            if waited > deadline:
                await self.fail(
                    c.SECRET_NOT_FOUND,
                    f"{missing.message.split(';')[0]} for {waited:.0f} s, longer than the "
                    f"{deadline:g} s the operator's workerStartTimeoutSeconds allows",
                )
                return False
            if current.message == missing.message:
                return False
        assert current.phase is not None
        await self._set_phase(current.phase, missing.reason, missing.message, progressing=False)
        self.writer.event("Warning", missing.reason, missing.message)
        return False

    async def _complete(self, spec: EvaluationRunSpec) -> None:
        if self.status.get("avgScore") is None:
            # The judge's result is not in the run as last seen (its watch event may come
            # after the Job's): read it. Usually it is there, and saves a GET per run.
            fresh = await self.svc.kube.get(KIND, self.namespace, self.name)
            self.merge_status((fresh or {}).get("status") or {})
        status = self.current()
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
        passed = threshold_condition(spec.thresholds, score, error_count, questions)
        # thresholds.metrics gates any entry of status.metrics (issue 13).
        from kyai.controllers._lmeval import succeed

        await succeed(self, spec, message, status.metrics or {}, passed)


async def reconcile_run(
    svc: Services,
    namespace: str,
    name: str,
    *,
    job: Mapping[str, Any] | None = None,
    priority: int = NORMAL,
) -> None:
    """Take one step of the run as last seen; nothing to do when it is gone.

    ``job`` is one of its Jobs as a watch event delivered it (the step does not read it
    again); ``priority`` orders the steps waiting for a reconcile slot.
    """
    async with svc.locked(KIND, namespace, name, priority=priority):
        run = await svc.cached(KIND, namespace, name)
        if run is None:
            return
        await _step(RunReconciler(svc, run, () if job is None else (job,)))


async def _step(reconciler: RunReconciler) -> None:
    """One reconcile; a 403 from the API server is also said on the run, then re-raised."""
    try:
        await reconciler.reconcile()
    except KubeError as error:
        if error.status == 403:
            with contextlib.suppress(KubeError):
                await reconciler.report_forbidden(error)
        raise
    await reconciler.clear_forbidden()


async def resync_run(svc: Services, namespace: str, name: str) -> bool:
    """The periodic look at a run: only when the operator is idle enough to take it at once.

    At 1,000 runs, resyncs queued behind each other delayed the reconciles that Job events
    ask for by minutes; a skipped resync is taken at the next tick. True when it was taken.
    The run is read afresh (the resync is what catches an event the watch lost).
    """
    async with svc.locked_if_idle(KIND, namespace, name) as idle:
        if not idle:
            return False
        run = await svc.kube.get(KIND, namespace, name)
        if run is not None:
            await _step(RunReconciler(svc, run))
        return True


_pending_looks: set[asyncio.Task[bool]] = set()


def look_later(svc: Services, namespace: str, name: str, delay: float) -> None:
    """A :func:`resync_run` of the run ``delay`` seconds from now, unless it has finished.

    As the per-run timer did for a new Job: a worker pod that cannot start is reported
    about ``START_GRACE_SECONDS`` after its Job was made, well before its deadline, whatever
    the phase of the resync loop's ticks. A run finished by then (dropped from the cache)
    costs nothing.
    """

    def fire() -> None:
        if (KIND, namespace, name) not in svc.seen:
            return
        task = asyncio.ensure_future(_look(svc, namespace, name))
        _pending_looks.add(task)
        task.add_done_callback(_pending_looks.discard)

    asyncio.get_running_loop().call_later(delay, fire)


async def _look(svc: Services, namespace: str, name: str) -> bool:
    try:
        return await resync_run(svc, namespace, name)
    except KubeError as error:  # the resync loop tries again
        log.warning("look at run %s/%s: %s", namespace, name, error)
        return False


def _is_finished(job: Mapping[str, Any]) -> bool:
    return job_state(job)[0] in ("succeeded", "failed")


def needs_resync(
    run: Mapping[str, Any], jobs: Mapping[str, Mapping[str, Any]], *, now: datetime
) -> bool:
    """Whether the periodic resync must look at ``run``.

    ``jobs`` are the run Jobs of its namespace by name, as just listed.

    What the per-run timer it replaces caught, without a GET for the runs that are simply
    waiting for a running Job: a run that waits (Pending: a Workload, Snapshot or Secret;
    its Stalled condition comes due), a run not looked at yet long after its creation (a lost
    event), a refused API call to retry, a phase's Job that is missing (the judge waiting for
    its Secret) or finished (a lost Job event), a Job whose pod has not started in time
    (reported on the run; the deadline fails it) or had not and may have now.
    """
    meta = run.get("metadata") or {}
    status = run.get("status") or {}
    phase = status.get("phase")
    if phase in TERMINAL or meta.get("deletionTimestamp"):
        return False
    if phase not in ("Generating", "Judging"):
        created = parse_time(meta.get("creationTimestamp"))
        # Not looked at yet: its create event's, unless that was a while ago.
        return phase is not None or created is None or (now - created).total_seconds() > 10
    conditions = status.get("conditions")
    degraded = c.get_condition(conditions, c.DEGRADED) or {}
    if degraded.get("reason") == c.FORBIDDEN and degraded.get("status") == "True":
        return True
    if (c.get_condition(conditions, c.READY) or {}).get("reason") == c.WORKER_NOT_STARTING:
        return True
    name = status.get("generationJob") if phase == "Generating" else status.get("judgeJob")
    job = jobs.get(str(name)) if name else None
    return job is None or _is_finished(job) or _may_be_stuck(job, now)


async def resync_runs(svc: Services) -> int:
    """One look at every unfinished run the operator watches; how many were reconciled.

    Two LISTs (runs, run Jobs) per namespace, then a reconcile of only the runs
    :func:`needs_resync` picks.
    """
    patterns = svc.settings.namespaces
    plain = all(not any(ch in ns for ch in "*?[!") for ns in patterns)
    scopes: list[str | None] = list(patterns) if patterns and plain else [None]
    looked = 0
    now = datetime.now(UTC)
    for scope in scopes:
        runs = await svc.kube.list(KIND, scope)
        listed = await svc.kube.list("Job", scope, label_selector=LABEL_RUN)
        jobs: dict[str, dict[str, Mapping[str, Any]]] = {}
        for job in listed:
            meta = job["metadata"]
            jobs.setdefault(meta["namespace"], {})[meta["name"]] = job
        for run in runs:
            meta = run["metadata"]
            namespace, name = str(meta["namespace"]), str(meta["name"])
            if patterns and not plain and not any(fnmatch.fnmatch(namespace, p) for p in patterns):
                continue
            if needs_resync(run, jobs.get(namespace, {}), now=now):
                try:
                    looked += await resync_run(svc, namespace, name)
                except KubeError as error:  # one run's trouble does not stop the others'
                    log.warning("resync of run %s/%s: %s", namespace, name, error)
    return looked


async def resync_forever(svc: Services, interval: float) -> None:
    """:func:`resync_runs` every ``interval`` seconds, the first ``interval`` after start.

    (The create events come first.) An error is logged and the next tick tries again.
    """
    while True:
        await asyncio.sleep(interval)
        try:
            await resync_runs(svc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the periodic resync of the runs failed; retrying in %g s", interval)
