"""The run engine: one state machine for every kind of run.

Pending (waiting for what the run names) → the phases of its Job steps (Generating,
Judging) → Succeeded or Failed. The engine owns what every kind does the same: acceptance of
the spec, waiting for references, Secret checks, Job create/adopt, stuck-pod detection,
failure causes, completion, release of what the run holds, and success; the kind
(:mod:`kyai.controllers.kinds`) says what it resolves, which Job steps it runs and how its
result reads.

The reconcile is idempotent and reads the actual state every time (the run's status, its
Jobs), so that a restarted operator picks up where it was and never creates a Job twice:
children have deterministic names and an existing one is adopted. Workers report progress
and the result into the status; the engine owns phase and conditions. Each step returns when
it wants to be looked at again (:class:`~kyai.controllers._result.Result`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from kyai._clock import parse_time
from kyai.api import (
    JOB_PHASES,
    EvaluationRunPhase,
    EvaluationRunSpec,
    EvaluationRunStatus,
    NonInferiorityResult,
)
from kyai.builders import spec_hash
from kyai.builders.queue import queue_label_problem, queue_name
from kyai.controllers import _conditions as c
from kyai.controllers import _kueue as kueue
from kyai.controllers._baseline import compare_with_baseline, gate_of
from kyai.controllers._conditions import Change
from kyai.controllers._inuse import (
    ENGINE_ARGS,
    engine_args_of,
    protect,
    references,
    release_references,
    to_protect,
)
from kyai.controllers._jobs import failure_cause, make_job, start_trouble
from kyai.controllers._kube import KubeError, resource_path
from kyai.controllers._pods import (
    age_seconds,
    job_state,
    job_suspended,
    may_be_stuck,
    started_seconds,
)
from kyai.controllers._references import KIND, missing_secret, secret_value, stalled
from kyai.controllers._result import DONE, Result, after
from kyai.controllers._services import Services
from kyai.controllers._status import StatusWriter, named_references, spec_changed
from kyai.controllers._thresholds import combine_passed, metric_gate
from kyai.controllers.kinds import kind_of
from kyai.controllers.runkind import (
    Invalid,
    JobStep,
    Outcome,
    Resolution,
    RunContext,
    RunKind,
    SecretNeed,
    Waiting,
)

TERMINAL = ("Succeeded", "Failed")

#: Seconds after a queued Job is made, or admitted, before Kueue's verdict is read.
QUEUE_FIRST_LOOK_SECONDS = 2.0

#: The run's reasons while its generation waits for its Workload's engine
#: (:meth:`RunEngine._engine_held`): the Job made again, the run goes back to its phase's own.
ENGINE_AWAY = c.QUEUED | {c.WORKLOAD_NOT_READY}

SPEC_CHANGED = (
    "the spec changed after the run started; the change is ignored (a run's spec is "
    "immutable once started): create a new EvaluationRun instead"
)


class RunEngine:
    """One reconcile of one EvaluationRun, whatever its kind."""

    def __init__(
        self, svc: Services, run: dict[str, Any], jobs: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        self.svc = svc
        self.writer = StatusWriter(svc, run, on_patched=self._patched)
        self.name = self.writer.name
        self.namespace = self.writer.namespace
        #: Jobs of the run as a watch event or the resync's LIST delivered them (no GET).
        self.jobs: dict[str, Mapping[str, Any]] = {
            str(job["metadata"]["name"]): job for job in jobs
        }
        self._current: tuple[int, EvaluationRunStatus] | None = None
        #: What the run names, shown while it waits too (``kubectl get er`` columns).
        self.named: dict[str, str] = {}

    def _patched(self, body: dict[str, Any]) -> None:
        self.svc.metrics.observe(body)
        self.svc.remember(body)

    @property
    def run(self) -> Mapping[str, Any]:
        """The run as last read or written."""
        return self.writer.body

    def current(self) -> EvaluationRunStatus:
        """The run's status as last read or written, through the API model.

        Read again only after a write (or :meth:`merge_status`): a reconcile asks often.
        """
        revision = self.writer.revision
        if self._current is None or self._current[0] != revision:
            self._current = (revision, EvaluationRunStatus.model_validate(self.writer.status))
        return self._current[1]

    def merge_status(self, status: Mapping[str, Any]) -> None:
        """Merge fields read from the API server into the status as last seen."""
        self.writer.merge(status)

    # -- the state machine ---------------------------------------------------------------

    async def reconcile(self) -> Result:
        """One step of the state machine (call it again on any change)."""
        current = self.current()
        if current.finished or self.run["metadata"].get("deletionTimestamp"):
            return DONE
        spec = await self._spec(current)
        if spec is None:
            return DONE
        kind = kind_of(spec)
        self.named = {
            name: ref.name
            for name, ref in (("workload", spec.workload_ref), ("snapshot", spec.snapshot_ref))
            if ref is not None
        }
        started = current.accepted_spec is None
        if started:
            waiting = await self._start(kind, spec)
            if waiting is not None:
                return waiting
        elif spec_changed(self.run.get("spec") or {}, current.spec_hash):
            await self.writer.note_spec_change(SPEC_CHANGED)
        current = self.current()
        if current.phase not in JOB_PHASES or current.plan is None:
            return DONE
        steps = kind.steps(RunContext(self.svc, self.run, current), spec, current.plan)
        return await self._advance(kind, spec, steps, fresh=started)

    async def _spec(self, current: EvaluationRunStatus) -> EvaluationRunSpec | None:
        """The accepted spec (parsed once per run), else the spec; None: it failed the run."""
        accepted = current.accepted_spec
        try:
            if accepted:  # fixed once started: parsed once
                uid = self.run["metadata"].get("uid")
                return self.svc.parsed(
                    uid, "accepted_spec", lambda: EvaluationRunSpec.model_validate(accepted)
                )
            return EvaluationRunSpec.model_validate(self.run.get("spec") or {})
        except ValidationError as exc:
            await self.fail(c.INVALID_SPEC, c.validation_message(exc))
            return None

    async def _start(self, kind: RunKind, spec: EvaluationRunSpec) -> Result | None:
        """Resolve, check, hold and accept; a Result when the run did not start (yet)."""
        try:
            if (bad_queue := queue_label_problem(self.run)) is not None:
                raise Waiting(c.INVALID_QUEUE_NAME, bad_queue)  # Stalled: nothing is made
            resolution = await kind.resolve(RunContext(self.svc, self.run, self.current()), spec)
            # The steps as they will read once the facts are recorded.
            steps = kind.steps(RunContext(self.svc, self.run, resolution.facts), spec,
                               resolution.plan)  # fmt: skip
            missing = await missing_secret(self.svc, _all_secrets(steps))
            if missing is not None:
                raise missing
            await self._protect(resolution)
        except Waiting as wait:
            return await self._wait(wait)
        except Invalid as invalid:
            await self.fail(invalid.reason, invalid.message)
            return DONE
        first = steps[0]
        message = resolution.message or first.message
        facts = resolution.facts
        await self._set_phase(
            first.phase, first.reason, message, progressing=True,
            **{name: getattr(facts, name) for name in facts.model_fields_set},
            **{JOB_PHASES[step.phase]: step.job.name for step in steps},
            started_at=c.now(), accepted_spec=spec.to_k8s(),
            spec_hash=spec_hash(self.run.get("spec") or {}), plan=resolution.plan,
        )  # fmt: skip
        self.writer.event("Normal", first.reason, message)
        return None

    async def _protect(self, resolution: Resolution) -> None:
        """Put the in-use finalizer on what the run holds; Waiting when one is going away."""
        read = resolution.protect
        if not read:
            return
        for kind, name in to_protect(self.run, read):
            gone = await protect(self.svc, kind, self.namespace, name, read.get(kind))
            if gone is not None:
                reason = c.SNAPSHOT_NOT_READY if kind == "Snapshot" else c.WORKLOAD_NOT_READY
                raise Waiting(reason, gone)

    async def _advance(
        self, kind: RunKind, spec: EvaluationRunSpec, steps: Sequence[JobStep], *, fresh: bool
    ) -> Result:
        """Run the current phase's Job; on its success the next step's, or completion.

        ``fresh``: the run started in this reconcile (its Secrets were just checked, its
        Jobs cannot exist yet). A step entered here cannot have its Job yet either.
        """
        phase = self.current().phase
        index = next((i for i, step in enumerate(steps) if step.phase == phase), None)
        if index is None:
            return DONE
        known_missing, secrets_checked = fresh, fresh
        while True:
            step = steps[index]
            succeeded, result = await self._run_step(
                step, spec, known_missing=known_missing, secrets_checked=secrets_checked
            )
            if not succeeded:
                return result
            if index + 1 == len(steps):
                return await self._complete(kind, spec)
            index += 1
            following = steps[index]
            await self._set_phase(
                following.phase, following.reason, following.message, progressing=True
            )
            self.writer.event("Normal", following.reason, following.message)
            known_missing, secrets_checked = True, False

    async def _run_step(
        self, step: JobStep, spec: EvaluationRunSpec, *, known_missing: bool,
        secrets_checked: bool,
    ) -> tuple[bool, Result]:  # fmt: skip
        """Make or adopt the step's Job and read it: (succeeded, when to look again)."""
        job = self.jobs.get(step.job.name)
        if job is None and not known_missing:
            job = await self.svc.kube.get("Job", self.namespace, step.job.name)
        held = await self._engine_held(step)
        if held is not None and (job is None or job_state(job)[0] == "running"):
            await self._stop_job(step, job)
            if isinstance(held, Invalid):  # the Workload cannot serve without a change
                await self.fail(held.reason, held.message)
                return False, DONE
            return False, await self._hold(held)
        if job is not None and (job.get("metadata") or {}).get("deletionTimestamp"):
            return False, after(1.0)  # made again once gone (its pods stopped first)
        grace = self.svc.settings.job_start_grace_seconds
        if job is None:
            if not secrets_checked:
                waiting = await self._secrets_ready(step)
                if waiting is not None:
                    return False, waiting
            if step.checks and not await self._endpoints_answer(step):
                return False, DONE
            job = await make_job(self.svc, self.run, step, spec)
            if job_suspended(job):  # queued: Kueue's verdict is read a moment later
                return False, after(min(grace + 1, QUEUE_FIRST_LOOK_SECONDS))
            if job_state(job)[0] == "running":  # new: its pods are looked at after the grace
                if self._waits_for_engine():  # made again: the engine is back
                    await self._resume(step)
                return False, after(grace + 1)
        state, message = job_state(job)
        if state == "failed":
            cause = await failure_cause(self.svc, self.namespace, self.name, step, message)
            # An endpoint that failed the worker's check (nothing was sent): its own reason.
            await self.fail(c.endpoint_check_reason(cause) or step.failed_reason, cause)
            return False, DONE
        if state == "succeeded":
            return True, DONE
        if job_suspended(job):
            return False, await self._queued(step, job)
        if self._waits_for_engine():
            await self._resume(step)  # Kueue admitted the Job (again), or it was made again
        if may_be_stuck(job, grace=grace):
            return False, await self._watch_start(step)
        if (job.get("status") or {}).get("ready"):
            return False, DONE
        # Its pods are looked at once the grace is over (then at every resync tick).
        return False, after(grace + 1 - (started_seconds(job) or 0.0))

    async def _endpoints_answer(self, step: JobStep) -> bool:
        """Check the endpoints the run calls before the step's Job is made; False: it failed.

        Each as ``kyai run`` checks it (:func:`kyai.evaluation.check_server`): while it does
        not answer, up to 4 attempts 1, 2 and 4 s apart, each failed one said in the run's
        status (``CheckingEndpoints``); a refused key or a model not served ends it at once. A
        failure ends the run with the check's reason (``JudgeUnreachable``,
        ``JudgeModelNotServed``, ``JudgeKeyRefused``) before the Job exists.
        """
        noted = False

        async def say(line: str) -> None:
            nonlocal noted
            noted = True
            message = f"checking the endpoints the run calls before its {step.what} Job: {line}"
            await self._set_phase(step.phase, c.CHECKING_ENDPOINTS, message, progressing=True)

        for check in step.checks:
            key, source = None, "no key"
            if check.key is not None:
                need = check.key
                key = await secret_value(self.svc, need.namespace, need.name, need.key)
                source = f"the Secret {need.name}, key {need.key}"
            problems = await self.svc.endpoints.check(
                check.side, check.where, check.url, check.models,
                key=key, key_source=source, say=say,
            )  # fmt: skip
            if problems:
                reason = problems[0].reason or f"{check.side.capitalize()}Unreachable"
                said = "; ".join(
                    problem.text.removeprefix(f"{problem.reason}: ") for problem in problems
                )
                spared = (
                    "the candidate was asked nothing"
                    if step.phase == "Generating"
                    else "it never ran"
                )
                await self.fail(
                    reason, f"{said} (checked before the {step.what} Job was made: {spared})"
                )
                return False
        if noted:
            await self._resume(step)
        return True

    async def _engine_held(self, step: JobStep) -> Waiting | Invalid | None:
        """Why the served engine the step's Job asks is away (its Workload says so), if it is.

        Only the generation step asks the run's Workload. A Workload the operator serves
        that is not Ready (:func:`engine_down`: Kueue evicted its engine, a pod of its
        LeaderWorkerSet group failed and the group is made again, its engine pod is
        replaced) makes the run wait in its phase, with the Workload's words, rather than
        count the engine's absence as failed rows. A queue reason (``Preempted``,
        ``WaitingForQuota``) is the run's reason too; any other is ``WorkloadNotReady``,
        naming it.
        """
        name = self.named.get("workload")
        if step.phase != "Generating" or name is None:
            return None
        workload = await self.svc.cached("Workload", self.namespace, name)
        down = engine_down(workload)
        if down is None:
            return None
        reason, said = down
        if stalled(workload):
            # Past its spec.restartLimit, or anything else that needs a person: the run fails
            # now, naming it, rather than waiting for it without end.
            return Invalid(
                c.WORKLOAD_FAILED,
                f"the Workload {name} cannot serve ({reason}): {said}; the {step.what} Job "
                f"{step.job.name} was stopped (the answers it stored stay on the results claim)",
            )
        # A generation Job resumes from the rows it stored; lm-eval keeps no answers between
        # its attempts, so its Job starts the tasks over.
        goes_on = (
            "starts its tasks over"
            if step.what == "lm-eval"
            else "goes on from the answers it stored"
        )
        stopped = (
            f"; the {step.what} Job {step.job.name} is stopped and {goes_on} once the Workload "
            "is Ready again"
        )
        if reason in c.QUEUED:
            return Waiting(reason, f"the Workload {name} is not Ready: {said}{stopped}")
        return Waiting(
            c.WORKLOAD_NOT_READY, f"the Workload {name} is not Ready ({reason}): {said}{stopped}"
        )

    def _waits_for_engine(self) -> bool:
        """Whether the run says it waits for Kueue or for its Workload's engine."""
        ready = self.current().condition(c.READY)
        return ready is not None and ready.reason in ENGINE_AWAY

    async def _stop_job(self, step: JobStep, job: Mapping[str, Any] | None) -> None:
        """Stop the step's Job while its engine is away (or cannot serve any more).

        The Job is deleted in the foreground (its pods go first, so a new Job never writes
        the results beside an old pod); once the Workload is Ready again the Job is made
        again and goes on from the rows stored on the results claim, as after a preemption of
        the Job itself. Only rows in flight are asked again; the wait counts against no
        deadline (the new Job's grace and ``activeDeadlineSeconds`` count from its start).
        The run then waits (Progressing False): the Workload turning Ready wakes it.
        """
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            return
        try:
            await self.svc.kube.request(
                "DELETE",
                resource_path("Job", self.namespace, step.job.name),
                body={"propagationPolicy": "Foreground"},
            )
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def _queued(self, step: JobStep, job: Mapping[str, Any]) -> Result:
        """The step's Job is suspended: say what Kueue says of it (once per change).

        ``WaitingForQuota`` (Kueue's Pending or Inadmissible message) or ``Preempted`` (its
        eviction message), with how long the Job has waited, in the run's phase: Ready and
        Progressing False, not Stalled (quota frees up by itself). Queue time is no start-up
        time: the grace and ``workerStartTimeoutSeconds`` count from the Job's start. The
        resync looks again while the Job is suspended (:mod:`kyai.controllers.scheduling`).
        """
        meta = job.get("metadata") or {}
        queue = queue_name(meta.get("labels") or {})
        what = f"the {step.what} Job {step.job.name}"
        if queue is not None and await kueue.installed(self.svc):
            held = kueue.queue_wait(
                await kueue.workload_for(self.svc, self.namespace, str(meta.get("uid")))
            )
            if held is None:  # admitted: Kueue unsuspends the Job in a moment
                return after(QUEUE_FIRST_LOOK_SECONDS)
            reason, message = held.reason, kueue.describe(held, what, queue)
        else:
            reason = c.JOB_SUSPENDED
            message = (
                f"{what} is suspended (spec.suspend) and no Kueue queue will start it; the run "
                "goes on once it is resumed"
            )
        if self.current().message != message:
            await self._set_phase(step.phase, reason, message, progressing=False)
            self.writer.event("Normal", reason, message)
        return DONE

    async def _secrets_ready(self, step: JobStep) -> Result | None:
        """Before the step's Job exists: its Secrets are there (None), or the run waits.

        The wait has the same deadline as a worker pod that cannot start, counted from the
        moment the run began waiting; then the run fails.
        """
        missing = await missing_secret(self.svc, step.secrets)
        current = self.current()
        progressing = current.condition(c.PROGRESSING)
        waiting_since = None
        if progressing is not None and progressing.reason == c.SECRET_NOT_FOUND:
            waiting_since = parse_time(progressing.last_transition_time)
        if missing is None:
            if waiting_since is not None:
                await self._resume(step)
            return None
        deadline = self.svc.settings.worker_start_timeout_seconds
        if waiting_since is not None:
            waited = (datetime.now(UTC) - waiting_since).total_seconds()
            if waited > deadline:
                await self.fail(
                    c.SECRET_NOT_FOUND,
                    f"{missing.message.split(';')[0]} for {waited:.0f} s, longer than the "
                    f"{deadline:g} s the operator's workerStartTimeoutSeconds allows",
                )
                return DONE
            if current.message == missing.message:
                return after(deadline - waited + 1)
        await self._set_phase(step.phase, missing.reason, missing.message, progressing=False)
        self.writer.event("Warning", missing.reason, missing.message)
        return after(deadline + 1)

    async def _watch_start(self, step: JobStep) -> Result:
        """Report a worker pod that cannot start on the run; fail the run after the deadline."""
        trouble = await start_trouble(self.svc, self.namespace, self.name, step)
        current = self.current()
        ready = current.condition(c.READY)
        reason = ready.reason if ready is not None else None
        if trouble is None:
            if reason == c.WORKER_NOT_STARTING:
                await self._resume(step)
            return DONE
        deadline = self.svc.settings.worker_start_timeout_seconds
        waited = (datetime.now(UTC) - trouble.since).total_seconds()
        name = step.job.name
        if waited > deadline:
            await self.svc.kube.delete("Job", self.namespace, name)
            await self.fail(
                c.WORKER_NOT_STARTING,
                f"the {step.what} Job {name} could not start its {trouble.describe()} "
                f"(for {waited:.0f} s, longer than the {deadline:g} s the operator's "
                "workerStartTimeoutSeconds allows)",
            )
            return DONE
        message = (
            f"the {step.what} Job {name} cannot start its {trouble.describe()}; the run fails "
            f"if it has not started {deadline:g} s after the pod was created"
        )
        if reason != c.WORKER_NOT_STARTING or current.message != message:
            await self._set_phase(step.phase, c.WORKER_NOT_STARTING, message, progressing=True)
            self.writer.event("Warning", c.WORKER_NOT_STARTING, message)
        return after(deadline - waited + 1)

    async def _complete(self, kind: RunKind, spec: EvaluationRunSpec) -> Result:
        """The last Job succeeded: read the result, gate it, end the run.

        With ``thresholds.nonInferiority`` the run waits in its phase until the baseline has
        succeeded (:mod:`kyai.controllers._baseline`).
        """
        if not kind.reported(self.current()):
            # The worker's result is not in the run as last seen (its watch event may come
            # after the Job's): read it. Usually it is there, and saves a GET per run.
            fresh = await self.svc.kube.get(KIND, self.namespace, self.name)
            self.merge_status((fresh or {}).get("status") or {})
        status = self.current()
        try:
            outcome = kind.outcome(spec, status)
            compared = await self._compare(spec, status)
        except Invalid as invalid:
            await self.fail(invalid.reason, invalid.message)
            return DONE
        except Waiting as wait:
            return await self._hold(wait)
        await self.succeed(spec, outcome, status.metrics or {}, compared)
        return DONE

    async def _compare(
        self, spec: EvaluationRunSpec, status: EvaluationRunStatus
    ) -> tuple[Change, NonInferiorityResult | None] | None:
        """The non-inferiority gate's Passed (None without one); Waiting for the baseline."""
        gate = gate_of(spec)
        if gate is None:
            return None
        try:
            return await compare_with_baseline(self.svc, self.namespace, self.name, gate, status)
        except Waiting as wait:
            own = f"this run's avgScore {status.avg_score} over {status.questions} questions"
            raise Waiting(wait.reason, f"{wait.message} ({own})") from None

    # -- status writes ------------------------------------------------------------------

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
            Change(c.READY, False, reason, message),
            Change(c.PROGRESSING, progressing, reason, message),
        )
        await self.writer.patch(
            EvaluationRunStatus(phase=phase, message=message, conditions=conditions, **fields)
        )

    async def _resume(self, step: JobStep) -> None:
        """Back to the phase's own reason and message once what held it up is gone."""
        await self._set_phase(step.phase, step.reason, step.message, progressing=True)

    async def _hold(self, wait: Waiting) -> Result:
        """The run stays in its phase, not progressing, saying what it waits for.

        Written once (again when the wait turns Stalled); the run is in the index of waiting
        runs then, so what it waits for wakes it.
        """
        current = self.current()
        if current.phase is None:
            return DONE
        if current.message != wait.message or self.writer.stall_due():
            await self._set_phase(current.phase, wait.reason, wait.message, progressing=False)
            kind = "Warning" if wait.reason in c.STALLING else "Normal"
            self.writer.event(kind, wait.reason, wait.message)
        return self._stall_look(wait.reason)

    async def _wait(self, wait: Waiting) -> Result:
        """Pending, saying what the run waits for (once; again when it turns Stalled)."""
        wait = await self._queued_workload(wait)
        current = self.current()
        if not (
            current.phase == "Pending"
            and current.message == wait.message
            and not self.writer.stall_due()
        ):
            await self._set_phase(
                "Pending", wait.reason, wait.message, progressing=False, **self.named
            )
            self.writer.event("Normal", wait.reason, wait.message)
        return self._stall_look(wait.reason)

    async def _queued_workload(self, wait: Waiting) -> Waiting:
        """A wait for a Workload whose engine waits for Kueue says so, with its words."""
        name = self.named.get("workload")
        if wait.reason != c.WORKLOAD_NOT_READY or name is None:
            return wait
        workload = await self.svc.cached("Workload", self.namespace, name)
        for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
            if condition.get("type") == c.READY and condition.get("reason") in c.QUEUED:
                said = condition.get("message") or condition["reason"]
                message = f"the Workload {name} is not Ready: {said}"
                return Waiting(str(condition["reason"]), message)
        return wait

    def _stall_look(self, reason: str) -> Result:
        """A look when a wait for a missing reference turns Stalled (its grace is over)."""
        if reason not in c.MISSING_REFERENCE:
            return DONE
        age = age_seconds(self.run)
        grace = self.svc.settings.missing_reference_grace_seconds
        if age is None or age >= grace:
            return DONE
        return after(grace - age + 1)

    async def fail(self, reason: str, message: str) -> None:
        """End the run Failed."""
        named = named_references(self.run.get("spec"), self.writer.status)  # failed early
        await self._set_phase(
            "Failed", reason, message, progressing=False, completed_at=c.now(), **named
        )
        self.writer.event("Warning", reason, message)
        await self.release_held()

    async def succeed(
        self,
        spec: EvaluationRunSpec,
        outcome: Outcome,
        metrics: Mapping[str, float],
        compared: tuple[Change, NonInferiorityResult | None] | None = None,
    ) -> None:
        """End the run Succeeded; Passed from the kind's gate and the spec's other gates.

        ``compared`` is the non-inferiority comparison's Passed and figures.
        ``thresholds.metrics`` gates ``metrics`` (the run's ``status.metrics``), whatever the
        kind; a gated metric that is missing is written as -1. Frees what the run held.
        """
        gated, missing = metric_gate(spec.thresholds, metrics)
        passed = combine_passed(outcome.passed, gated, compared[0] if compared else None)
        message = outcome.message
        changes = [
            Change(c.READY, True, c.SUCCEEDED, message),
            Change(c.PROGRESSING, False, c.SUCCEEDED, message),
        ]
        if passed is not None:
            changes.append(passed)
        update = EvaluationRunStatus(
            phase="Succeeded",
            message=message,
            completed_at=c.now(),
            conditions=self.writer.conditions(*changes),
        )
        if missing:
            update.metrics = {**metrics, **missing}
        if compared is not None and compared[1] is not None:
            update.non_inferiority = compared[1]
        await self.writer.patch(update)
        self.writer.event("Normal", c.SUCCEEDED, message)
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
        """Say on the run that the API refused the operator a call (RBAC), once.

        The phase stays as it is: the run goes on by itself once the permission is granted.
        """
        message = f"the operator was refused an API call this run needs: {error}"
        degraded = self.current().condition(c.DEGRADED)
        if degraded is not None and degraded.message == message:
            return
        conditions = self.writer.conditions(Change(c.DEGRADED, True, c.FORBIDDEN, message))
        await self.writer.patch(EvaluationRunStatus(conditions=conditions))
        self.writer.event("Warning", c.FORBIDDEN, message)

    async def clear_forbidden(self) -> None:
        """Degraded/Forbidden back to False once a reconcile went through."""
        degraded = self.current().condition(c.DEGRADED)
        if degraded is None or degraded.reason != c.FORBIDDEN or degraded.status != "True":
            return
        conditions = self.writer.conditions(
            Change(c.DEGRADED, False, c.FORBIDDEN, "the operator's API calls are allowed again")
        )
        await self.writer.patch(EvaluationRunStatus(conditions=conditions))


def engine_down(workload: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(reason, message) of a Workload the operator serves whose engine is not Ready.

    Its ``Ready`` condition False: Kueue holds its engine (``Preempted``,
    ``WaitingForQuota``), its pods are being made again (``Deploying``: a LeaderWorkerSet
    group recreated after a pod failed, a Deployment's pod replaced), its ``/v1/models``
    does not answer (``EndpointUnreachable``). None for a Workload that is Ready, unknown or
    gone, and for an endpoint-only Workload (``spec.endpoint``) unless a queue reason says
    otherwise (only the operator's own engine pods are queued): its Ready comes from probing
    a server someone else runs, whose trouble the run's requests meet and report themselves.
    """
    found = next(
        (
            found
            for found in ((workload or {}).get("status") or {}).get("conditions") or ()
            if isinstance(found, Mapping) and found.get("type") == c.READY
        ),
        None,
    )
    if workload is None or found is None or found.get("status") == "True":
        return None
    reason = str(found.get("reason") or "NotReady")
    if reason not in c.QUEUED and (workload.get("spec") or {}).get("endpoint") is not None:
        return None
    return reason, str(found.get("message") or reason)


def _all_secrets(steps: Sequence[JobStep]) -> tuple[SecretNeed, ...]:
    """Every Secret key the run's Jobs read, each once, in step order."""
    return tuple(dict.fromkeys(need for step in steps for need in step.secrets))
