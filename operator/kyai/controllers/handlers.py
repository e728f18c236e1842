"""The kopf handlers: thin, typed, each parses what it needs and delegates to a reconciler.

Everything is registered into a registry made by :func:`build_registry`, not kopf's global
one, so tests and the CLI each get a fresh set.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

import kopf

from kyai.constants import (
    FINALIZER,
    GROUP,
    IN_USE_FINALIZER,
    KOPF_PREFIX,
    LABEL_MANAGED_BY,
    LABEL_RUN,
    LABEL_SNAPSHOT,
    LABEL_WORKLOAD,
    MANAGER,
    VERSION,
)
from kyai.controllers import _kopf_json
from kyai.controllers import evaluationrun as _runs
from kyai.controllers import snapshot as _snapshots
from kyai.controllers import workload as _workloads
from kyai.controllers._diffbase import DigestDiffBaseStorage
from kyai.controllers._inuse import references, release_if_unused, release_references
from kyai.controllers._kube import KubeClient, KubeError
from kyai.controllers._services import NEW, NORMAL, URGENT, Services, services
from kyai.controllers.evaluationrun import look_later, resync_forever
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings

log = logging.getLogger(__name__)

#: How often the runs that are not finished are looked at, whatever happens (a safety net: Job
#: and run events move runs on; this catches pods that cannot start, waits, deadlines and lost
#: events). One loop for all runs (two LISTs a tick; a per-run kopf timer fired 43,000 times
#: at 1,000 runs); the first look comes as late, not right after the create handler's.
RUN_RESYNC_SECONDS = 20.0

#: Seconds after a failed API call before a run's event handler is tried again.
RETRY_SECONDS = 5.0

#: The kinds with kopf create/update/resume handlers (the only ones kopf needs a diff base of).
CHANGING_KINDS = ("EngineArgsSet", "Workload", "Snapshot")

#: The built-in kinds the operator watches, only those it made (the label every child has).
CHILD_WATCHES = (("batch", "jobs"), ("apps", "deployments"))
OWN_CHILDREN = f"{LABEL_MANAGED_BY}={MANAGER}"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _counted(
    kind: str, reconcile: Callable[Concatenate[Services, _P], Awaitable[_R]]
) -> Callable[Concatenate[Services, _P], Coroutine[Any, Any, _R]]:
    """``reconcile`` counted and timed in the operator's self-metrics under ``kind``."""

    @functools.wraps(reconcile)
    async def counted(svc: Services, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with svc.metrics.reconciling(kind):
            return await reconcile(svc, *args, **kwargs)

    return counted


reconcile_run = _counted("EvaluationRun", _runs.reconcile_run)
reconcile_snapshot = _counted("Snapshot", _snapshots.reconcile_snapshot)
reconcile_engine_args = _counted("EngineArgsSet", _workloads.reconcile_engine_args)
reconcile_workload = _counted("Workload", _workloads.reconcile_workload)


def _ns(namespace: str | None) -> str:
    """Every KYAI kind is namespaced: kopf always gives a namespace."""
    assert namespace is not None
    return namespace


def _job_finished(status: kopf.Status, **_: Any) -> bool:
    """Only a finished Job moves a run on (its other events are progress of no interest)."""
    return any(
        condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True"
        for condition in status.get("conditions") or []
    )


def owning_run(meta: Any) -> str | None:
    """The name of the EvaluationRun owning a child (its label value may be cut to 63)."""
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "EvaluationRun" and owner.get("apiVersion", "").startswith(GROUP):
            return str(owner["name"])
    return None


def _workload_not_ready(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") != "Ready"


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """Set kopf's settings, before its watchers start."""
    # Their streams parse with orjson.
    if not _kopf_json.install():
        log.info("kopf's watch streams parse with json (no orjson hook in this kopf)")
    # kopf's own bookkeeping under the operator's prefix, in annotations only.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    # Only a digest of the last handled spec (no copy of it in an annotation).
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration", kinds=CHANGING_KINDS
    )
    settings.persistence.finalizer = FINALIZER
    # The operator posts its own events; kopf's per-handler ones only on trouble.
    settings.posting.level = logging.WARNING
    # Of the Jobs and Deployments of a cluster, only the operator's own are streamed to it
    # (server-side): every other Job's events would cost a parse and a dispatch each.
    for group, plural in CHILD_WATCHES:
        settings.watching.label_selectors[group, plural] = OWN_CHILDREN


def build_registry(settings: OperatorSettings) -> kopf.OperatorRegistry:
    """A registry with every handler of the operator."""
    registry = kopf.OperatorRegistry()
    _register_lifecycle(registry)
    _register_workloads(registry, settings)
    _register_snapshots(registry)
    _register_runs(registry)
    return registry


def _register_lifecycle(registry: kopf.OperatorRegistry) -> None:
    """Start-up (kopf's settings, the services in memo), login, clean-up."""

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure_kopf(settings)
        operator_settings: OperatorSettings = memo["operator_settings"]
        # `kyai operator` serves /metrics before kopf starts (a port clash fails at once).
        metrics: RunMetrics = memo.get("metrics") or RunMetrics()
        svc = Services(KubeClient.from_environment(), operator_settings, metrics)
        memo["services"] = svc
        memo["run_resync"] = asyncio.create_task(
            resync_forever(svc, RUN_RESYNC_SECONDS), name="kyai-run-resync"
        )
        log.info(
            "kyai operator started: namespaces %s, metrics on %s:%d",
            ", ".join(operator_settings.namespaces) or "all",
            operator_settings.metrics_bind_address,
            operator_settings.metrics_port,
        )

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # As kubectl does: $KUBECONFIG or ~/.kube/config, else the pod's service account.
        return kopf.login_via_client(**kwargs)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        resync: asyncio.Task[None] | None = memo.get("run_resync")
        if resync is not None:
            resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resync
        if "services" in memo:
            await services(memo).kube.aclose()


def _register_workloads(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """EngineArgsSets, Workloads and their engine Deployments."""

    @kopf.on.resume(GROUP, VERSION, "engineargssets", registry=registry)
    @kopf.on.create(GROUP, VERSION, "engineargssets", registry=registry)
    @kopf.on.update(GROUP, VERSION, "engineargssets", registry=registry)
    async def engine_args(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        await reconcile_engine_args(services(memo), dict(body))

    @kopf.on.event(GROUP, VERSION, "engineargssets", registry=registry)
    async def engine_args_changed(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, meta: kopf.Meta,
        memo: kopf.Memo, **_: Any,
    ) -> None:  # fmt: skip
        svc = services(memo)
        _keep(svc, event, body)
        await _release_deleted(svc, "EngineArgsSet", _ns(namespace), name, meta)
        if event.get("type") == "DELETED":  # its Workloads now say it is gone
            await _workloads.reconcile_workloads_naming(svc, _ns(namespace), name)

    # Workload
    @kopf.on.resume(GROUP, VERSION, "workloads", registry=registry)
    @kopf.on.create(GROUP, VERSION, "workloads", registry=registry)
    @kopf.on.update(GROUP, VERSION, "workloads", registry=registry)
    async def workload(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        await reconcile_workload(services(memo), _ns(namespace), name)

    @kopf.timer(
        GROUP,
        VERSION,
        "workloads",
        interval=settings.workload_poll_seconds,
        when=_workload_not_ready,
        registry=registry,
    )
    async def workload_poll(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        await reconcile_workload(services(memo), _ns(namespace), name)

    @kopf.on.event("apps", "v1", "deployments", labels={LABEL_WORKLOAD: kopf.PRESENT},
                   registry=registry)  # fmt: skip
    async def engine_deployment(
        labels: kopf.Labels, namespace: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        await reconcile_workload(services(memo), _ns(namespace), labels[LABEL_WORKLOAD])

    @kopf.on.event(GROUP, VERSION, "workloads", registry=registry)
    async def workload_changed(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, meta: kopf.Meta,
        status: kopf.Status, memo: kopf.Memo, **_: Any,
    ) -> None:  # fmt: skip
        _keep(services(memo), event, body)
        await _release_deleted(services(memo), "Workload", _ns(namespace), name, meta)
        await _reconcile_pending_runs(services(memo), "Workload", _ns(namespace), name, status)


def _register_snapshots(registry: kopf.OperatorRegistry) -> None:
    """Snapshots, and the Pending runs waiting for one."""

    @kopf.on.resume(GROUP, VERSION, "snapshots", registry=registry)
    @kopf.on.create(GROUP, VERSION, "snapshots", registry=registry)
    @kopf.on.update(GROUP, VERSION, "snapshots", registry=registry)
    async def snapshot(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        delay = await reconcile_snapshot(services(memo), dict(body))
        if delay is not None:
            raise kopf.TemporaryError("the snapshot's source is not available yet", delay=delay)

    @kopf.on.event("batch", "v1", "jobs", labels={LABEL_SNAPSHOT: kopf.PRESENT},
                   when=_job_finished, registry=registry)  # fmt: skip
    async def snapshot_load_job(
        meta: kopf.Meta, namespace: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == "Snapshot":
                svc = services(memo)
                body = await svc.kube.get("Snapshot", _ns(namespace), owner["name"])
                if body is not None:
                    await reconcile_snapshot(svc, body)

    @kopf.on.event(GROUP, VERSION, "snapshots", registry=registry)
    async def snapshot_changed(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, meta: kopf.Meta,
        status: kopf.Status, memo: kopf.Memo, **_: Any,
    ) -> None:  # fmt: skip
        _keep(services(memo), event, body)
        await _release_deleted(services(memo), "Snapshot", _ns(namespace), name, meta)
        await _reconcile_pending_runs(services(memo), "Snapshot", _ns(namespace), name, status)


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
    status = body.get("status") or {}
    phase = status.get("phase")
    if phase in _runs.TERMINAL or meta.get("deletionTimestamp"):
        return None
    if phase is None:
        return NEW  # a burst of new runs waits behind the steps of the runs already going
    if event_type is None:
        return NORMAL
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    if generation is not None and observed is not None and generation != observed:
        return NORMAL
    return None


async def reconcile_or_retry(
    svc: Services,
    namespace: str,
    name: str,
    *,
    job: Mapping[str, Any] | None = None,
    priority: int = NORMAL,
) -> None:
    """:func:`reconcile_run`; an API call that failed is tried again by a later look.

    An event handler is not retried by kopf (create/update handlers were): a timeout or a
    5xx of an overloaded API server would leave the run to the resync. It is logged as a
    warning (no traceback: it is the API server's state, not a bug) and the run is looked
    at again :data:`RETRY_SECONDS` later. A refused call (403) is said on the run as well.
    """
    try:
        await reconcile_run(svc, namespace, name, job=job, priority=priority)
    except KubeError as error:
        log.warning(
            "run %s/%s: %s; looking at it again in %g s", namespace, name, error, RETRY_SECONDS
        )
        look_later(svc, namespace, name, RETRY_SECONDS)


def _register_runs(registry: kopf.OperatorRegistry) -> None:
    """EvaluationRuns, their finished Jobs and their metrics (the resync loop: start-up)."""

    @kopf.on.event(GROUP, VERSION, "evaluationruns", registry=registry)
    async def evaluation_run(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo,
        **_: Any,
    ) -> None:  # fmt: skip
        svc = services(memo)
        if event.get("type") == "DELETED":
            svc.metrics.forget(_ns(namespace), name)
            svc.forget("EvaluationRun", _ns(namespace), name)
            await release_references(svc, _ns(namespace), references(body))
            return
        raw = dict(body)
        svc.metrics.observe(raw)
        svc.remember(raw)
        await wake_rejudges(svc, _ns(namespace), name, body.get("status"))
        priority = run_priority(event.get("type"), raw)
        if priority is not None:
            await reconcile_or_retry(svc, _ns(namespace), name, priority=priority)

    @kopf.on.event(
        "batch",
        "v1",
        "jobs",
        labels={LABEL_RUN: kopf.PRESENT},
        when=_job_finished,
        registry=registry,
    )
    async def worker_job(
        body: kopf.Body, meta: kopf.Meta, namespace: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        run = owning_run(meta)
        if run is not None:
            # The Job as delivered (not read again); before any other waiting step.
            svc = services(memo)
            await reconcile_or_retry(svc, _ns(namespace), run, job=dict(body), priority=URGENT)


def _keep(svc: Services, event: Any, body: Any) -> None:
    """The watch's latest copy of an object in the services' cache (gone once deleted)."""
    meta = body.get("metadata") or {}
    if event.get("type") == "DELETED":
        svc.forget(str(body.get("kind")), str(meta.get("namespace")), str(meta.get("name")))
    else:
        svc.remember(body)


async def _release_deleted(svc: Services, kind: str, namespace: str, name: str, meta: Any) -> None:
    """An object being deleted that carries the in-use finalizer: free it if unused."""
    if meta.get("deletionTimestamp") and IN_USE_FINALIZER in (meta.get("finalizers") or []):
        await release_if_unused(svc, kind, namespace, name)


def _names_in(value: Any) -> set[str]:
    """Every string in a spec (the names it refers to among them)."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_names_in(item) for item in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_names_in(item) for item in value)) if value else set()
    return set()


async def _reconcile_pending_runs(
    svc: Services, kind: str, namespace: str, name: str, status: Any
) -> None:
    """Give the Pending runs naming a Workload or Snapshot a look when it becomes Ready.

    Only runs that wait (Pending) and name it; a run not looked at yet (no phase) is its
    create handler's, and the 10-second resync covers every other change. (Looking at every
    run of the namespace on every event made 100 Workloads x 1,000 runs of reconciles.)
    """
    key = (kind, namespace, name)
    if (status or {}).get("phase") != "Ready":
        svc.ready.discard(key)
        return
    if key in svc.ready:
        return  # Ready before: the runs waiting for it were looked at then
    svc.ready.add(key)
    for run in await svc.kube.list("EvaluationRun", namespace):
        if (run.get("status") or {}).get("phase") != "Pending":
            continue
        if name in _names_in(run.get("spec") or {}):
            await reconcile_run(svc, namespace, run["metadata"]["name"])


def waiting_rejudges(svc: Services, namespace: str, source: str) -> list[str]:
    """The Pending runs of ``namespace`` that re-judge ``source`` (``spec.generationFrom``).

    Read from the watch's cache (it holds every unfinished run, and indexes those that
    re-judge): no LIST, nor a look at every unfinished run, per finished run.
    """
    waiting = []
    for key in list(svc.rejudging):
        _, ns, name = key
        run = svc.seen.get(key)
        if run is None or ns != namespace:
            continue
        if (run.get("status") or {}).get("phase") != "Pending":
            continue
        ref = ((run.get("spec") or {}).get("generationFrom") or {}).get("runRef") or {}
        if ref.get("name") == source:
            waiting.append(name)
    return sorted(waiting)


async def wake_rejudges(svc: Services, namespace: str, name: str, status: Any) -> None:
    """A run that finished: its waiting re-judgings go on now, not at the next resync."""
    if (status or {}).get("phase") not in ("Succeeded", "Failed"):
        return
    for waiting in waiting_rejudges(svc, namespace, name):
        await reconcile_run(svc, namespace, waiting)
