"""EvaluationSchedule: make the template's run when it is due, compare it, keep its history.

One reconcile of a schedule (:func:`reconcile_schedule`):

1. reads the schedule and lists its runs (label ``kyai.io/schedule``, owned by it) from the
   API server, so that a run made by the previous reconcile is always counted;
2. records every run in the history (kept in the status, newest last, outliving the runs),
   and compares each run that finished since with its baseline
   (:func:`kyai.schedules.compare_runs`: ``kyai compare``'s paired test and interval):
   ``Regressed`` True when the difference's interval lies below ``-margin``;
3. decides whether a run is due, and why: on request (the ``kyai.io/run-now`` annotation, acted
   on once, then removed), on a change of the Workload's serving configuration once it is
   Ready again (``triggers.onWorkloadChange``), on the cron schedule (CronJob's rules:
   :func:`kyai.schedules.due`). ``suspend`` holds the schedule and change triggers (a request
   is someone asking: it still runs). ``concurrencyPolicy``: ``Forbid`` leaves a due run
   waiting while one is unfinished (a cron time that waits past ``startingDeadlineSeconds`` is
   missed, as CronJob's); ``Replace`` deletes the unfinished run first;
4. makes the run (a predictable name, owned by the schedule, labelled with it, annotated with
   its trigger), deletes the finished runs beyond the history limits (their history entries
   stay), writes the status, and asks to be looked at again at the next cron time.

Schedules are reconciled from their own watch events, their runs' phase changes, and the
Workloads their template names (:class:`Schedules`, a small work queue like the sweeps').
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from kyai._clock import parse_time
from kyai.api import (
    EvaluationRunStatus,
    HistoryEntry,
    RegressionResult,
    StatusBase,
    WorkloadStatus,
)
from kyai.api.evaluationschedule import (
    EvaluationScheduleSpec,
    EvaluationScheduleStatus,
    SchedulePhase,
    Trigger,
)
from kyai.builders import label_value
from kyai.constants import (
    ANNOTATION_RUN_NOW,
    ANNOTATION_SCHEDULE_TRIGGER,
    LABEL_SCHEDULE,
)
from kyai.controllers import _conditions as c
from kyai.controllers._conditions import Change
from kyai.controllers._kube import KubeError
from kyai.controllers._result import DONE, Result, after
from kyai.controllers._services import Services
from kyai.controllers._status import StatusWriter
from kyai.controllers._workqueue import WorkQueue
from kyai.metrics import ScheduleMetrics
from kyai.schedules import (
    ScheduleError,
    compare_runs,
    due,
    parse,
    period_seconds,
    pick_baseline,
    record,
    regression_message,
    run_name,
    to_delete,
)

log = logging.getLogger(__name__)

KIND = "EvaluationSchedule"
RUN = "EvaluationRun"
FINISHED = frozenset({"Succeeded", "Failed"})

_Key = tuple[str, str]


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def serving_hash(workload: Mapping[str, Any] | None) -> str | None:
    """The Workload's effective serving configuration, once it is Ready on it; else None.

    Its spec (the engine, the image, the model, the endpoint of an endpoint-only Workload, the
    EngineArgsSet it names) and its EngineArgsSet's args and env as the operator rendered them
    (``status.engineArgsHash``), read only when the Workload is Ready and its status describes
    its current generation: a change is evaluated once the engine serving it is up.
    """
    if workload is None or _meta(workload).get("deletionTimestamp"):
        return None
    try:
        status = WorkloadStatus.model_validate(workload.get("status") or {})
    except ValidationError:
        return None
    generation = _meta(workload).get("generation")
    if generation is not None and status.observed_generation not in (None, generation):
        return None
    ready = status.condition(c.READY)
    if ready is None or ready.status != "True":
        return None
    material = {"spec": workload.get("spec") or {}, "engineArgs": status.engine_args_hash}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def owned_runs(runs: Sequence[Mapping[str, Any]], uid: str) -> list[Mapping[str, Any]]:
    """The runs ``uid`` owns (a run labelled with the name of another, older schedule: not)."""
    return [
        run
        for run in runs
        if any(ref.get("uid") == uid for ref in _meta(run).get("ownerReferences") or ())
    ]


def owning_schedule(body: Mapping[str, Any]) -> str | None:
    """The schedule a run was made by (its owner reference), if any."""
    for ref in _meta(body).get("ownerReferences") or ():
        if ref.get("kind") == KIND and ref.get("controller"):
            return str(ref.get("name"))
    return None


def _phase(run: Mapping[str, Any]) -> str:
    return str((run.get("status") or {}).get("phase") or "Pending")


def _run_status(run: Mapping[str, Any]) -> EvaluationRunStatus | None:
    try:
        return EvaluationRunStatus.model_validate(run.get("status") or {})
    except ValidationError:
        return None


def _entry(run: Mapping[str, Any], earlier: HistoryEntry | None) -> HistoryEntry:
    """The history entry of ``run`` as it is now (keeping what an earlier look compared)."""
    meta = _meta(run)
    annotations = meta.get("annotations") or {}
    trigger = annotations.get(ANNOTATION_SCHEDULE_TRIGGER)
    status = _run_status(run) or EvaluationRunStatus()
    interval = status.avg_score_interval
    entry = HistoryEntry(
        run=str(meta.get("name")),
        trigger=trigger if trigger in ("schedule", "change", "request") else "schedule",
        created_at=meta.get("creationTimestamp"),
        finished_at=status.completed_at,
        phase=status.phase or "Pending",
        score=status.avg_score,
        low=None if interval is None else interval.low,
        high=None if interval is None else interval.high,
        comparison_key=status.comparison_key,
    )
    if earlier is not None:
        entry.baseline = earlier.baseline
        entry.difference = earlier.difference
        entry.regressed = earlier.regressed
    return entry


@dataclass
class _Look:
    """One reconcile's reading of a schedule and its runs."""

    svc: Services
    body: Mapping[str, Any]
    spec: EvaluationScheduleSpec
    status: EvaluationScheduleStatus
    runs: list[Mapping[str, Any]]
    now: datetime

    @property
    def namespace(self) -> str:
        return str(_meta(self.body)["namespace"])

    @property
    def name(self) -> str:
        return str(_meta(self.body)["name"])

    @property
    def active(self) -> list[Mapping[str, Any]]:
        return [
            run
            for run in self.runs
            if _phase(run) not in FINISHED and not _meta(run).get("deletionTimestamp")
        ]


async def _compare(
    look: _Look, history: list[HistoryEntry], entry: HistoryEntry
) -> RegressionResult:
    """The finished run of ``entry`` compared with its baseline (from the runs still kept)."""
    regression = look.spec.regression
    pinned = regression.run_ref.name if regression.run_ref is not None else None
    baseline = pick_baseline(
        regression.baseline, history, run=entry.run, comparison_key=entry.comparison_key,
        pinned=pinned,
    )  # fmt: skip
    by_name = {str(_meta(run).get("name")): run for run in look.runs}
    found: Mapping[str, Any] | None = by_name.get(baseline) if baseline else None
    if baseline is not None and found is None:
        found = await look.svc.kube.get(RUN, look.namespace, baseline)
    run_status = _run_status(by_name[entry.run]) or EvaluationRunStatus()
    baseline_status = _run_status(found) if found is not None else None
    return compare_runs(
        entry.run, run_status, baseline if found is not None else None, baseline_status,
        margin=regression.margin, alpha=regression.alpha,
    )  # fmt: skip


async def _history(look: _Look) -> tuple[list[HistoryEntry], RegressionResult | None]:
    """The history with every run recorded; the newest comparison made in this look."""
    history = list(look.status.history or [])
    earlier = {entry.run: entry for entry in history}
    newest: RegressionResult | None = None
    ordered = sorted(look.runs, key=lambda run: str(_meta(run).get("creationTimestamp") or ""))
    for run in ordered:
        name = str(_meta(run).get("name"))
        before = earlier.get(name)
        entry = _entry(run, before)
        newly_finished = entry.phase in FINISHED and (
            before is None or before.phase not in FINISHED
        )
        if newly_finished and entry.phase == "Succeeded":
            result = await _compare(look, history, entry)
            entry.baseline, entry.difference = result.baseline, result.difference
            entry.regressed = result.regressed
            newest = result
            await _tell_run(look, run, result)
        history = record(history, entry)
    return history, newest


async def _tell_run(look: _Look, run: Mapping[str, Any], result: RegressionResult) -> None:
    """The compared run gets the Regressed condition too (it is finished: nothing else writes)."""
    change = _regressed_change(result, look.spec.regression.alpha)
    if change is None or _meta(run).get("deletionTimestamp"):
        return
    writer = StatusWriter(look.svc, run)
    with contextlib.suppress(KubeError):
        await writer.patch(StatusBase(conditions=writer.conditions(change)))


def _run_body(look: _Look, name: str, trigger: Trigger) -> dict[str, Any]:
    """The EvaluationRun the template makes, owned by and labelled with the schedule."""
    template = look.spec.run_template
    meta = template.metadata
    labels = dict(meta.labels or {}) if meta is not None else {}
    annotations = dict(meta.annotations or {}) if meta is not None else {}
    labels[LABEL_SCHEDULE] = label_value(look.name)
    annotations[ANNOTATION_SCHEDULE_TRIGGER] = trigger
    schedule_meta = _meta(look.body)
    spec = (look.body.get("spec") or {}).get("runTemplate", {}).get("spec") or {}
    return {
        "apiVersion": str(look.body.get("apiVersion") or "kyai.io/v1alpha1"),
        "kind": RUN,
        "metadata": {
            "name": name,
            "namespace": look.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": str(look.body.get("apiVersion") or "kyai.io/v1alpha1"),
                    "kind": KIND,
                    "name": look.name,
                    "uid": str(schedule_meta.get("uid")),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": dict(spec),
    }


@dataclass(frozen=True)
class _Wanted:
    """A run that is due: why, for which cron time, and what it acts on."""

    trigger: Trigger
    scheduled_for: datetime | None = None
    run_now: str | None = None


def _requested(look: _Look) -> str | None:
    """The run-now annotation's value when it was not acted on yet."""
    value = (_meta(look.body).get("annotations") or {}).get(ANNOTATION_RUN_NOW)
    if value is None or value == look.status.handled_run_now:
        return None
    return str(value)


async def _changed(look: _Look) -> tuple[str | None, bool]:
    """(the Workload's serving hash now, whether it changed since the last evaluated one)."""
    if not look.spec.triggers.on_workload_change:
        return None, False
    ref = look.spec.run_template.spec.workload_ref
    if ref is None:
        return None, False
    current = serving_hash(await look.svc.kube.get("Workload", look.namespace, ref.name))
    recorded = look.status.serving_hash
    return current, current is not None and recorded is not None and current != recorded


async def _due(look: _Look, changed: bool) -> tuple[list[_Wanted], Any]:
    """The runs due now, in order (request, change, schedule), and the cron look."""
    wanted: list[_Wanted] = []
    spec = look.spec
    requested = _requested(look)
    if requested is not None:
        wanted.append(_Wanted("request", run_now=requested))
    if changed and not spec.suspend:
        wanted.append(_Wanted("change"))
    cron = None
    if spec.schedule:
        last = parse_time(look.status.last_schedule_time)
        created = parse_time(_meta(look.body).get("creationTimestamp")) or look.now
        cron = due(
            spec.schedule, spec.time_zone, last=last, created=created, now=look.now,
            starting_deadline_seconds=spec.starting_deadline_seconds,
        )  # fmt: skip
        if cron.run_at is not None and not spec.suspend:
            wanted.append(_Wanted("schedule", scheduled_for=cron.run_at))
    return wanted, cron


async def _make(look: _Look, wanted: _Wanted) -> str:
    """Make the run ``wanted`` asks for; its name."""
    at = wanted.scheduled_for or look.now
    name = run_name(look.name, wanted.trigger, at)
    await look.svc.kube.create(_run_body(look, name, wanted.trigger))
    return name


async def _replace(look: _Look) -> None:
    """Delete the unfinished runs (concurrencyPolicy Replace)."""
    for run in look.active:
        await look.svc.kube.delete(RUN, look.namespace, str(_meta(run).get("name")))


async def _clean_up(look: _Look) -> None:
    """Delete the finished runs beyond the history limits (their history entries stay)."""
    listed = [
        (str(_meta(run).get("name")), _phase(run), str(_meta(run).get("creationTimestamp") or ""))
        for run in look.runs
        if not _meta(run).get("deletionTimestamp")
    ]
    spec = look.spec
    for name in to_delete(
        listed,
        successful_limit=spec.successful_runs_history_limit,
        failed_limit=spec.failed_runs_history_limit,
    ):
        await look.svc.kube.delete(RUN, look.namespace, name)


def _regressed_change(result: RegressionResult | None, alpha: float) -> Change | None:
    """The Regressed condition for the newest comparison (None: keep what it says)."""
    if result is None:
        return None
    message = regression_message(result, alpha=alpha)
    if result.regressed is None:
        return Change(c.REGRESSED, None, c.NOT_COMPARABLE, message)
    if result.regressed:
        return Change(c.REGRESSED, True, c.WORSE_THAN_MARGIN, message)
    return Change(c.REGRESSED, False, c.NOT_SHOWN_WORSE, message)


async def reconcile_schedule(
    svc: Services, namespace: str, name: str, *, now: datetime | None = None
) -> Result:
    """One reconcile of the schedule ``namespace/name``; when to look again."""
    body = await svc.kube.get(KIND, namespace, name)
    if body is None or _meta(body).get("deletionTimestamp"):
        return DONE
    writer = StatusWriter(svc, body)
    try:
        spec = EvaluationScheduleSpec.model_validate(body.get("spec") or {})
        if spec.schedule:
            parse(spec.schedule, spec.time_zone)
        status = EvaluationScheduleStatus.model_validate(body.get("status") or {})
    except (ValidationError, ScheduleError) as exc:
        message = c.validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
        await _invalid(writer, message)
        return DONE
    listed = await svc.kube.list(
        RUN, namespace, label_selector=f"{LABEL_SCHEDULE}={label_value(name)}"
    )
    look = _Look(svc, body, spec, status, owned_runs(listed, str(_meta(body).get("uid"))),
                 now or _now())  # fmt: skip
    history, compared = await _history(look)
    serving, changed = await _changed(look)
    wanted, cron = await _due(look, changed)
    update = EvaluationScheduleStatus()
    made: list[str] = []
    for want in wanted:
        if look.active and spec.concurrency_policy == "Forbid":
            break  # waits: looked at again when the unfinished run ends
        if look.active:
            await _replace(look)
        name_made = await _make(look, want)
        made.append(name_made)
        writer.event("Normal", "RunCreated", f"made the run {name_made} ({want.trigger})")
        made_entry = HistoryEntry(
            run=name_made, trigger=want.trigger, created_at=_stamp(look.now), phase="Pending"
        )
        history = record(history, made_entry)
        if want.trigger == "schedule" and want.scheduled_for is not None:
            update.last_schedule_time = _stamp(want.scheduled_for)
        if want.run_now is not None:
            update.handled_run_now = want.run_now
        break  # one run per look: the next look sees it unfinished
    # The configuration a run was made on is evaluated; the first one seen is only noted. A
    # change that waits (Forbid, suspend) is kept pending until a run is made.
    if serving is not None and (look.status.serving_hash is None or made):
        update.serving_hash = serving
    if cron is not None and cron.too_many_missed:
        missed = f"{cron.missed} cron times were missed; only the most recent is made"
        writer.event("Warning", "TooManyMissedTimes", missed)
    await _clean_up(look)
    await _write(writer, look, update, history, compared, made, cron)
    if update.handled_run_now is not None:
        with contextlib.suppress(KubeError):
            await svc.kube.patch(
                KIND, namespace, name, {"metadata": {"annotations": {ANNOTATION_RUN_NOW: None}}}
            )
    if cron is None:
        return DONE
    return after(max(1.0, (cron.next_at - look.now).total_seconds() + 0.5))


async def _invalid(writer: StatusWriter, message: str) -> None:
    ready = Change(c.READY, False, c.INVALID_SPEC, message)
    fields = EvaluationScheduleStatus(
        phase="Invalid", message=message, conditions=writer.conditions(ready)
    )
    if not writer.unchanged(fields):
        await writer.patch(fields)
        writer.event("Warning", c.INVALID_SPEC, message)


async def _write(
    writer: StatusWriter,
    look: _Look,
    update: EvaluationScheduleStatus,
    history: list[HistoryEntry],
    compared: RegressionResult | None,
    made: list[str],
    cron: Any,
) -> None:
    """The status: phase, conditions, the newest run and score, the history, the counts."""
    spec = look.spec
    finished = [entry for entry in history if entry.phase in FINISHED]
    succeeded = [entry for entry in finished if entry.phase == "Succeeded"]
    runs = dict(look.status.runs or {})
    known_finished = {entry.run for entry in look.status.history or () if entry.phase in FINISHED}
    for entry in finished:
        if entry.run not in known_finished:
            outcome = "succeeded" if entry.phase == "Succeeded" else "failed"
            runs[outcome] = runs.get(outcome, 0) + 1
    update.runs = {outcome: runs.get(outcome, 0) for outcome in ("succeeded", "failed")}
    # Unset fields left out: a null inside a list is a value the CRD's schema refuses.
    update.history = [_without_none(entry) for entry in history]
    active = [str(_meta(run).get("name")) for run in look.active] + made
    update.active = active or None
    update.last_run = history[-1].run if history else None
    if succeeded:
        newest = succeeded[-1]
        update.last_score = newest.score
        update.change = newest.difference
        update.last_successful_time = newest.finished_at
    if cron is not None:
        update.next_schedule_time = _stamp(cron.next_at)
        update.period_seconds = period_seconds(spec.schedule or "", spec.time_zone, at=look.now)
    if compared is not None:
        update.regression = _without_none(compared)
        update.regressed = compared.regressed
    phase: SchedulePhase = "Suspended" if spec.suspend else "Active"
    message = _message(spec, update, active)
    changes = [Change(c.READY, True, c.SUSPENDED if spec.suspend else c.SCHEDULED, message)]
    regressed = _regressed_change(compared, spec.regression.alpha)
    if regressed is not None:
        changes.append(regressed)
        if regressed.status is True:
            writer.event("Warning", c.REGRESSED, regressed.message)
    update.phase, update.message = phase, message
    update.conditions = writer.conditions(*changes)
    if not writer.unchanged(update):
        await writer.patch(update)


_M = TypeVar("_M", HistoryEntry, RegressionResult)


def _without_none(model: _M) -> _M:
    """``model`` with its None fields unset (left out of the status patch)."""
    return type(model).model_validate(model.model_dump(exclude_none=True))


def _message(
    spec: EvaluationScheduleSpec, update: EvaluationScheduleStatus, active: list[str]
) -> str:
    parts = []
    if spec.suspend:
        parts.append("suspended: no scheduled or change runs")
    if active:
        parts.append(f"running {', '.join(active)}")
    if update.next_schedule_time and not spec.suspend:
        parts.append(f"next at {update.next_schedule_time}")
    if not spec.schedule:
        parts.append("runs on changes and requests only")
    return "; ".join(parts) or "idle"


class Schedules(WorkQueue):
    """Looks at schedules when their events, their runs', their Workloads' or time call for it.

    A work queue as the sweeps' (:class:`~kyai.controllers._workqueue.WorkQueue`): a schedule
    asked for while its reconcile runs is reconciled once more after it, never twice at once;
    each reconcile asks for the look at the next cron time.
    """

    what = "schedule"

    def __init__(self, svc: Services, metrics: ScheduleMetrics | None = None) -> None:
        super().__init__(svc)
        self.metrics = metrics if metrics is not None else ScheduleMetrics()
        #: Schedules as last seen by their watch.
        self.known: dict[_Key, Mapping[str, Any]] = {}
        self._runs: dict[tuple[str, str], str] = {}
        self._workloads: dict[tuple[str, str], str | None] = {}

    async def schedule_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A schedule's own watch event: metrics, the known schedules, a reconcile."""
        meta = _meta(body)
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event_type == "DELETED":
            self.metrics.forget(*key)
            self.known.pop(key, None)
            self.cancel(*key)
            return
        self.metrics.observe(body)
        earlier = self.known.get(key)
        self.known[key] = body
        if earlier is None or _wants_look(earlier, body):
            self.enqueue(*key)

    async def run_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A schedule's run changed phase (or went): its schedule."""
        schedule = owning_schedule(body)
        if schedule is None:
            return
        meta = _meta(body)
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        phase = "DELETED" if event_type == "DELETED" else _phase(body)
        if self._runs.get((namespace, name)) == phase:
            return
        self._runs[(namespace, name)] = phase
        if event_type == "DELETED":
            self._runs.pop((namespace, name), None)
        self.enqueue(namespace, schedule)

    async def workload_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A Workload's serving configuration or readiness changed: schedules watching it."""
        meta = _meta(body)
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        seen = None if event_type == "DELETED" else serving_hash(body)
        if (namespace, name) in self._workloads and self._workloads[(namespace, name)] == seen:
            return
        self._workloads[(namespace, name)] = seen
        for (schedule_ns, schedule), schedule_body in list(self.known.items()):
            if schedule_ns == namespace and _watches(schedule_body, name):
                self.enqueue(namespace, schedule)

    # -- the queue (WorkQueue) --

    def exists(self, key: _Key) -> bool:
        """Whether the schedule is still watched."""
        return key in self.known

    async def reconcile(self, namespace: str, name: str) -> Result:
        """One reconcile of the schedule."""
        return await reconcile_schedule(self.svc, namespace, name)

    def resync_keys(self) -> list[_Key]:
        """Every schedule (a safety net for lost events and timers)."""
        return list(self.known)


def _wants_look(earlier: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """A spec change (a new generation) or a run-now annotation; not the schedule's own writes."""
    if _meta(earlier).get("generation") != _meta(body).get("generation"):
        return True
    before = (_meta(earlier).get("annotations") or {}).get(ANNOTATION_RUN_NOW)
    now = (_meta(body).get("annotations") or {}).get(ANNOTATION_RUN_NOW)
    return now is not None and now != before


def _watches(body: Mapping[str, Any], workload: str) -> bool:
    """Whether the schedule's template names ``workload`` and runs on its changes."""
    spec = body.get("spec") or {}
    if not (spec.get("triggers") or {}).get("onWorkloadChange"):
        return False
    template = (spec.get("runTemplate") or {}).get("spec") or {}
    return ((template.get("workloadRef") or {}).get("name")) == workload
