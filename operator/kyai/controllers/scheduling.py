"""When runs are looked at: every reason, in one place.

- **Watch events** (:meth:`Scheduler.run_event`, :meth:`Scheduler.job_finished`,
  :meth:`Scheduler.reference_changed`): a run's own events call for a reconcile only when
  :func:`run_priority` says so; a finished Job moves its run on first; an object becoming
  Ready (or a run finishing) wakes the Pending runs that wait for it.
- **Requeues** (:meth:`Scheduler.requeue`): a reconcile returns when it wants another look
  (:class:`~kyai.controllers._result.Result`, as controller-runtime's ``RequeueAfter``); a
  failed API call asks for one ``api_retry_seconds`` later.
- **The resync** (:meth:`Scheduler.resync_forever`): every ``run_resync_seconds``, from the
  watch cache (no LIST of the runs; the current Jobs of the runs in a Job's phase only), a look
  at each run the ordered :data:`RESYNC_POLICIES` pick (as cert-manager's trigger
  policies: small named functions read top to bottom, the first that decides wins).
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from kyai.api import RunStatusHead
from kyai.builders import label_value
from kyai.constants import LABEL_RUN
from kyai.controllers import _conditions as c
from kyai.controllers._engine import engine_down
from kyai.controllers._inuse import references, release_references
from kyai.controllers._kube import KubeError
from kyai.controllers._pods import age_seconds, job_finished, job_suspended, may_be_stuck
from kyai.controllers._requeues import Requeues
from kyai.controllers._result import Result, after
from kyai.controllers._services import NEW, NORMAL, URGENT, Services
from kyai.controllers.evaluationrun import KIND, reconcile_run, resync_run, run_references
from kyai.controllers.runkind import Reference
from kyai.settings import OperatorSettings

log = logging.getLogger(__name__)

#: Runs whose current Jobs one LIST of the resync selects (``kyai.io/run in (...)``): a label
#: value is at most 63 characters, so a request's query stays under 8 KiB.
JOBS_PER_LIST = 100

#: Kinds whose readiness wakes the runs waiting for them: Ready, or (a run) finished.
WAKING = {"Workload": ("Ready",), "Snapshot": ("Ready",), KIND: ("Succeeded", "Failed")}


def _blocking_reason(status: Any) -> str | None:
    """The Ready reason of a Workload or Snapshot that blocks its runs, else None.

    Stalled (the runs waiting for it fail, or stall), or a source that cannot be fetched
    (they say so).
    """
    conditions = [
        found for found in (status or {}).get("conditions") or () if isinstance(found, Mapping)
    ]
    ready = next((found for found in conditions if found.get("type") == c.READY), None)
    if ready is None or ready.get("status") == "True":
        return None
    reason = str(ready.get("reason") or "")
    stalled = any(
        found.get("type") == c.STALLED and found.get("status") == "True" for found in conditions
    )
    return reason if stalled or reason in c.SOURCE_FAILURES else None


def _in_circle(status: Any) -> bool:
    """Whether a run's status says it is Stalled in a circle of re-judges."""
    return any(
        isinstance(found, Mapping)
        and found.get("type") == c.STALLED
        and found.get("status") == "True"
        and found.get("reason") == c.CIRCULAR_REJUDGE
        for found in (status or {}).get("conditions") or ()
    )


def _engine_away(svc: Services, namespace: str, name: str, status: Any) -> bool:
    """Whether a Workload the operator serves says its engine is not Ready (``status``).

    Its spec from the watch's cache (an endpoint-only Workload's engine is not the
    operator's: :func:`~kyai.controllers._engine.engine_down`).
    """
    if not isinstance(status, Mapping):
        return False
    seen = svc.seen.get(("Workload", namespace, name)) or {}
    return engine_down({"spec": seen.get("spec") or {}, "status": status}) is not None


def _head(run: Mapping[str, Any]) -> RunStatusHead:
    """The run's status head; an unreadable status reads as empty (its reconcile says why)."""
    try:
        return RunStatusHead.model_validate(run.get("status") or {})
    except ValidationError as exc:
        log.warning("unreadable status of run %s: %s", (run.get("metadata") or {}).get("name"), exc)
        return RunStatusHead()


# -- which watch events call for a reconcile --------------------------------------------------


def run_priority(event_type: str | None, body: Any) -> int | None:
    """Whether a run's watch event calls for a reconcile, and at which priority (None: no).

    kopf's create/update/resume handlers cost, on every event of every run (each status
    write is one), a diff of the run against a digest of its last handled state, and a PATCH
    of kopf's annotations per handled change. Runs are reconciled from their own events
    instead, as Kubernetes controllers do: a run not looked at yet (no phase: just created),
    every unfinished run the operator finds at its start (kopf's listing, event type None:
    what resume was), and a spec the status does not describe yet (``metadata.generation``
    ahead of ``status.observedGeneration``: an update). Status writes (the operator's own and
    the workers' progress) move nothing; finished Jobs and the periodic resync move runs on.
    """
    meta = body.get("metadata") or {}
    status = _head(body)
    if status.finished or meta.get("deletionTimestamp"):
        return None
    if status.phase is None:
        return NEW  # a burst of new runs waits behind the steps of the runs already going
    if event_type is None:
        return NORMAL
    generation, observed = meta.get("generation"), status.observed_generation
    if generation is not None and observed is not None and generation != observed:
        return NORMAL
    return None


# -- the resync's policies --------------------------------------------------------------------


@dataclass(frozen=True)
class Look:
    """What a resync policy sees of one run: its status, age, and its current Job as listed."""

    status: RunStatusHead
    age: float | None
    deleting: bool
    job: Mapping[str, Any] | None
    settings: OperatorSettings
    now: datetime


@dataclass(frozen=True)
class Verdict:
    """A policy's decision: why, in words, and whether to reconcile the run."""

    reason: str
    message: str
    act: bool


Policy = Callable[[Look], Verdict | None]


def finished_or_deleted(look: Look) -> Verdict | None:
    """A finished run, or one being deleted, is never looked at again."""
    if look.status.finished or look.deleting:
        return Verdict("Finished", "the run has ended or is being deleted", False)
    return None


def not_looked_at_yet(look: Look) -> Verdict | None:
    """A run without a phase is its create event's, unless that was long ago (lost)."""
    if look.status.phase is not None:
        return None
    late = look.age is None or look.age > look.settings.run_first_look_seconds
    return Verdict("NotLookedAtYet", "no phase yet", late)


def waiting(look: Look) -> Verdict | None:
    """A waiting run (Pending): what it waits for may be there now, or its Stalled due."""
    if look.status.phase in ("Generating", "Judging"):
        return None
    return Verdict("Waiting", f"the run is {look.status.phase}", True)


def api_refused(look: Look) -> Verdict | None:
    """A refused API call (Degraded/Forbidden) is tried again."""
    degraded = look.status.condition(c.DEGRADED)
    if degraded is not None and degraded.reason == c.FORBIDDEN and degraded.status == "True":
        return Verdict(c.FORBIDDEN, "an API call was refused", True)
    return None


def worker_not_starting(look: Look) -> Verdict | None:
    """A pod that could not start may have now, or its deadline come."""
    ready = look.status.condition(c.READY)
    if ready is not None and ready.reason == c.WORKER_NOT_STARTING:
        return Verdict(c.WORKER_NOT_STARTING, "a worker pod could not start", True)
    return None


def queued(look: Look) -> Verdict | None:
    """A Job Kueue holds (suspended), or a run that still says so: Kueue is read again.

    Kueue starts and stops a Job by (un)suspending it, events that do not finish the Job
    (whose events alone move runs on): the resync looks.
    """
    if job_suspended(look.job):
        return Verdict(c.WAITING_FOR_QUOTA, "the phase's Job is suspended (Kueue)", True)
    ready = look.status.condition(c.READY)
    if ready is not None and ready.reason in c.QUEUED:
        return Verdict(ready.reason, "the run says its Job waits for Kueue", True)
    return None


def job_missing(look: Look) -> Verdict | None:
    """The phase's Job is not there (the judge waiting for its Secret, a lost create)."""
    if look.job is None:
        return Verdict("JobMissing", "the phase's Job does not exist", True)
    return None


def job_done(look: Look) -> Verdict | None:
    """The phase's Job finished and its event was lost."""
    if look.job is not None and job_finished(look.job):
        return Verdict("JobFinished", "the phase's Job has finished", True)
    return None


def job_may_be_stuck(look: Look) -> Verdict | None:
    """The phase's Job has no ready pod after its start grace: its pods are looked at."""
    grace = look.settings.job_start_grace_seconds
    if may_be_stuck(look.job, grace=grace, now=look.now):
        return Verdict("JobNotReady", "the phase's Job has no ready pod yet", True)
    return None


def job_running(look: Look) -> Verdict | None:
    """Otherwise the Job runs: its events will move the run on (no GET, no reconcile)."""
    return Verdict("JobRunning", "the phase's Job runs", False)


#: The reasons to look at a run, read top to bottom; the first that decides wins.
RESYNC_POLICIES: tuple[Policy, ...] = (
    finished_or_deleted,
    not_looked_at_yet,
    waiting,
    api_refused,
    worker_not_starting,
    queued,
    job_missing,
    job_done,
    job_may_be_stuck,
    job_running,
)


def resync_verdict(
    run: Mapping[str, Any],
    jobs: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime,
    settings: OperatorSettings,
) -> Verdict:
    """The first verdict of :data:`RESYNC_POLICIES` on ``run`` (its namespace's ``jobs``)."""
    meta = run.get("metadata") or {}
    status = _head(run)
    name = status.current_job()
    look = Look(
        status=status,
        age=age_seconds(run, now),
        deleting=bool(meta.get("deletionTimestamp")),
        job=jobs.get(name) if name else None,
        settings=settings,
        now=now,
    )
    for policy in RESYNC_POLICIES:
        verdict = policy(look)
        if verdict is not None:
            return verdict
    raise AssertionError("job_running decides every run")  # pragma: no cover


_DEFAULT_SETTINGS = OperatorSettings()


def needs_resync(
    run: Mapping[str, Any],
    jobs: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime,
    settings: OperatorSettings = _DEFAULT_SETTINGS,
) -> bool:
    """Whether the periodic resync must look at ``run`` (``jobs``: its namespace's, by name)."""
    return resync_verdict(run, jobs, now=now, settings=settings).act


# -- the scheduler ----------------------------------------------------------------------------


class Scheduler:
    """Reconciles runs when an event, a requeue or the resync calls for it."""

    def __init__(self, svc: Services) -> None:
        self.svc = svc
        svc.index_pending(lambda run: run_references(svc, run))
        self._requeues: Requeues[tuple[str, str]] = Requeues(self._fire)
        self._tasks: set[asyncio.Task[None]] = set()
        #: The last blocking reason told for a Workload or Snapshot (see reference_changed).
        self._blocked: dict[tuple[str, str, str], str] = {}

    # requeues

    def requeue(self, namespace: str, name: str, result: Result) -> None:
        """Look at the run when ``result`` asks (the earliest of several asks wins)."""
        self._requeues.ask((namespace, name), result.requeue_after)

    def _fire(self, key: tuple[str, str]) -> None:
        namespace, name = key
        if (KIND, namespace, name) not in self.svc.seen:
            return  # finished (dropped from the cache) or gone: nothing to look at
        task = asyncio.ensure_future(self._look(namespace, name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _look(self, namespace: str, name: str, jobs: tuple[Any, ...] = ()) -> None:
        try:
            result = await resync_run(self.svc, namespace, name, jobs=jobs)
        except KubeError as error:  # one run's trouble does not stop the others'
            log.warning("look at run %s/%s: %s", namespace, name, error)
            result = after(self.svc.settings.api_retry_seconds)
        if result is not None:
            self.requeue(namespace, name, result)

    def close(self) -> None:
        """Cancel the pending looks."""
        self._requeues.close()
        for task in self._tasks:
            task.cancel()

    # reconciles

    async def reconcile(
        self,
        namespace: str,
        name: str,
        *,
        job: Mapping[str, Any] | None = None,
        priority: int = NORMAL,
    ) -> None:
        """A counted reconcile; a failed API call asks for another look a little later.

        An event handler is not retried by kopf (create/update handlers were): a timeout or
        a 5xx of an overloaded API server would leave the run to the resync. It is logged as
        a warning (no traceback: it is the API server's state, not a bug) and the run is
        looked at again ``api_retry_seconds`` later. A refused call (403) is said on the run.
        """
        try:
            with self.svc.metrics.reconciling(KIND):
                result = await reconcile_run(self.svc, namespace, name, job=job, priority=priority)
        except KubeError as error:
            retry = self.svc.settings.api_retry_seconds
            log.warning("run %s/%s: %s; looking at it again in %g s", namespace, name, error, retry)
            result = after(retry)
        self.requeue(namespace, name, result)

    # watch routing

    async def run_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A run's watch event: cache it, wake its waiters once it finished, maybe reconcile.

        An event older than what the operator knows of the run (its watch runs behind its
        own writes: after a burst, by tens of seconds) moves nothing: a run's create event
        arriving after the run Succeeded would otherwise start it again from that copy.
        """
        meta = body["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        if event_type == "DELETED":
            self.svc.metrics.forget(namespace, name)
            self.svc.forget(KIND, namespace, name)
            await release_references(self.svc, namespace, references(body))
            return
        if not self.svc.remember(body):
            return
        self.svc.metrics.observe(body)
        await self.reference_changed(KIND, namespace, name, body.get("status"))
        priority = run_priority(event_type, body)
        if priority is not None:
            await self.reconcile(namespace, name, priority=priority)

    async def job_finished(self, job: Mapping[str, Any], run: str) -> None:
        """A run's Job finished: the run moves on first (the Job as delivered, not read)."""
        namespace = str(job["metadata"]["namespace"])
        await self.reconcile(namespace, run, job=job, priority=URGENT)

    async def reference_changed(self, kind: str, namespace: str, name: str, status: Any) -> None:
        """An object runs wait for changed: once it is ready, its waiting runs go on now.

        A Workload or Snapshot turning Ready (once: not at each of its later events), a run
        finishing (its re-judges), or a run Stalled in a circle of re-judges (its re-judges:
        they wait on the circle, and say so at once, not at the resync). Only Pending runs
        naming it, from the watch's cache and its index of Pending runs: no LIST, no look at
        every unfinished run, not the resync.
        """
        phase = (status or {}).get("phase")
        if kind == "Workload" and _engine_away(self.svc, namespace, name, status):
            # Its engine is away (Kueue took it, its group or pod is made again): the runs
            # generating against it stop and wait.
            for run in self.generating_against(name, namespace):
                await self.reconcile(namespace, run)
        if kind != KIND:
            # Stalled (a Workload whose engine crash-loops past its restart limit: its runs
            # fail) or a source that cannot be fetched (a Snapshot: its runs say so): the
            # runs waiting for it are told now, once per new reason, not at the resync.
            blocked = _blocking_reason(status)
            key = (kind, namespace, name)
            if blocked is None:
                self._blocked.pop(key, None)
            elif self._blocked.get(key) != blocked:
                self._blocked[key] = blocked
                for run in self.waiting_for(Reference(kind, name), namespace):
                    await self.reconcile(namespace, run)
        if phase not in WAKING[kind] and not (kind == KIND and _in_circle(status)):
            self.svc.ready.discard((kind, namespace, name))
            return
        if kind != KIND:
            if (kind, namespace, name) in self.svc.ready:
                return  # ready before: the runs waiting for it were looked at then
            self.svc.ready.add((kind, namespace, name))
        for run in self.waiting_for(Reference(kind, name), namespace):
            await self.reconcile(namespace, run)

    def generating_against(self, workload: str, namespace: str) -> list[str]:
        """The runs of ``namespace`` generating against ``workload`` and not waiting yet.

        From the watch's cache of unfinished runs (a scan of one namespace's: only when a
        Workload says its engine is away, a rare event).
        """
        wanted = Reference("Workload", workload)
        found = []
        for key, run in list(self.svc.seen.items()):
            if key[0] != KIND or key[1] != namespace or key in self.svc.pending:
                continue
            if (run.get("status") or {}).get("phase") != "Generating":
                continue
            if wanted in run_references(self.svc, run):
                found.append(key[2])
        return sorted(found)

    def waiting_for(self, reference: Reference, namespace: str) -> list[str]:
        """The Pending runs of ``namespace`` that wait for ``reference`` (their kind says).

        From the services' index of them (:meth:`Services.index_pending`), not a scan.
        """
        keys = self.svc.waiting_on(namespace, reference)
        return sorted(key[2] for key in keys if key in self.svc.seen)

    # the resync

    async def resync_once(self, *, relist: bool = False) -> int:
        """One look at every unfinished run the operator watches; how many were reconciled.

        As controller-runtime's periodic resync replays its informer's cache, not the API
        server: the runs are the unfinished ones the watch last delivered (the services'
        cache: :meth:`Services.remember` keeps exactly those), so a pass costs nothing per
        finished run (at 10,000 runs, a LIST of them every tick cost the operator and the API
        server more than the runs' own work). Only for runs in a Job's phase are their
        current Jobs read, by a LIST selecting those runs' label values
        (``kyai.io/run in (...)``, :data:`JOBS_PER_LIST` a request), never every run Job.
        Then a reconcile of only the runs the :data:`RESYNC_POLICIES` pick.

        With ``relist`` (every ``run_relist_seconds``: :meth:`resync_forever`), the runs are
        first LISTed from the API server into the cache, as an informer relists: a run whose
        watch events never reached the operator is found too.
        """
        if relist:
            await self._relist_runs()
        runs = self._unfinished_runs()
        jobs = await self._current_jobs(runs)
        now = datetime.now(UTC)
        looked = 0
        for run in runs:
            namespace = str(run["metadata"]["namespace"])
            looked += await self._resync(run, jobs.get(namespace, {}), now)
        return looked

    async def _relist_runs(self) -> None:
        """LIST the runs (paged) into the cache; what the cache knows newer is kept."""
        patterns = self.svc.settings.namespaces
        plain = all(not any(ch in ns for ch in "*?[!") for ns in patterns)
        scopes: list[str | None] = list(patterns) if patterns and plain else [None]
        for scope in scopes:
            async for page in self.svc.kube.pages(KIND, scope):
                for run in page:
                    namespace = str((run.get("metadata") or {}).get("namespace"))
                    if plain or any(fnmatch.fnmatch(namespace, p) for p in patterns):
                        run.setdefault("kind", KIND)  # a LIST's items carry no kind
                        self.svc.remember(run)

    def _unfinished_runs(self) -> list[Mapping[str, Any]]:
        """The cached runs not being deleted.

        The cache holds no finished run: :meth:`Services.remember` drops one once it ends.
        """
        return [
            run
            for (kind, _, _), run in list(self.svc.seen.items())
            if kind == KIND and not (run.get("metadata") or {}).get("deletionTimestamp")
        ]

    async def _current_jobs(
        self, runs: list[Mapping[str, Any]]
    ) -> dict[str, dict[str, Mapping[str, Any]]]:
        """The current Jobs of ``runs`` (by namespace, then name) as listed now.

        One LIST per namespace and :data:`JOBS_PER_LIST` runs in a Job's phase, selecting
        their label values; none when no run is in a Job's phase.
        """
        wanted: dict[str, dict[str, str]] = {}  # namespace -> label value -> current Job
        for run in runs:
            current = _head(run).current_job()
            if current is not None:
                meta = run["metadata"]
                wanted.setdefault(str(meta["namespace"]), {})[label_value(str(meta["name"]))] = (
                    current
                )
        jobs: dict[str, dict[str, Mapping[str, Any]]] = {}
        for namespace, by_label in wanted.items():
            names = set(by_label.values())
            values = sorted(by_label)
            for start in range(0, len(values), JOBS_PER_LIST):
                chosen = ",".join(values[start : start + JOBS_PER_LIST])
                selector = f"{LABEL_RUN} in ({chosen})"
                async for page in self.svc.kube.pages("Job", namespace, label_selector=selector):
                    for job in page:
                        name = job["metadata"]["name"]
                        if name in names:
                            jobs.setdefault(namespace, {})[name] = job
        return jobs

    async def _resync(
        self, run: Mapping[str, Any], jobs: Mapping[str, Mapping[str, Any]], now: datetime
    ) -> int:
        """Look at ``run`` if a policy says so; 1 when it was reconciled."""
        settings = self.svc.settings
        if not resync_verdict(run, jobs, now=now, settings=settings).act:
            return 0
        meta = run["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        current = _head(run).current_job()
        listed = (jobs[current],) if current is not None and current in jobs else ()
        try:
            result = await resync_run(self.svc, namespace, name, jobs=listed)
        except KubeError as error:  # one run's trouble does not stop the others'
            log.warning("resync of run %s/%s: %s", namespace, name, error)
            return 0
        if result is None:
            return 0
        self.requeue(namespace, name, result)
        return 1

    async def resync_forever(self) -> None:
        """:meth:`resync_once` every ``run_resync_seconds``, the first that long after start.

        With a LIST of the runs (``relist``) once ``run_relist_seconds`` have passed since the
        last (the first: at start, kopf's own listing).

        (The create events come first.) An error is logged and the next tick tries again.
        """
        interval = self.svc.settings.run_resync_seconds
        loop = asyncio.get_running_loop()
        relisted = loop.time()
        while True:
            await asyncio.sleep(interval)
            relist = loop.time() - relisted >= self.svc.settings.run_relist_seconds
            try:
                await self.resync_once(relist=relist)
                if relist:
                    relisted = loop.time()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the periodic resync of the runs failed; retrying in %g s", interval)
