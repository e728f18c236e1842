"""The kopf handlers: thin, typed, each parses what it needs and delegates to a reconciler.

Everything is registered into a registry made by :func:`build_registry`, not kopf's global
one, so tests and the CLI each get a fresh set.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

import kopf

from kyai.builders.workload import COMPONENT as ENGINE_COMPONENT
from kyai.constants import (
    FINALIZER,
    GROUP,
    IN_USE_FINALIZER,
    KOPF_PREFIX,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_RUN,
    LABEL_SCHEDULE,
    LABEL_SNAPSHOT,
    LABEL_SWEEP,
    LABEL_WORKLOAD,
    MANAGER,
    VERSION,
)
from kyai.controllers import _kopf_json
from kyai.controllers import snapshot as _snapshots
from kyai.controllers import workload as _workloads
from kyai.controllers._diffbase import DigestDiffBaseStorage
from kyai.controllers._inuse import release_if_unused
from kyai.controllers._kube import KubeClient
from kyai.controllers._multinode import say_once_without_leader_worker_set
from kyai.controllers._services import Services, services
from kyai.controllers.evaluationschedule import Schedules
from kyai.controllers.evaluationsweep import Sweeps
from kyai.controllers.scheduling import Scheduler
from kyai.metrics import RunMetrics, ScheduleMetrics, SweepMetrics
from kyai.settings import OperatorSettings

log = logging.getLogger(__name__)

#: The kinds with kopf create/update/resume handlers (the only ones kopf needs a diff base of).
CHANGING_KINDS = ("EngineArgsSet", "Workload", "Snapshot")

#: The built-in kinds the operator watches, only those it made (the label every child has).
CHILD_WATCHES = (
    ("batch", "jobs"),
    ("apps", "deployments"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
)
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
    # A cluster without LeaderWorkerSet: said once, at INFO (kopf warns at every rescan).
    say_once_without_leader_worker_set()
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
    _register_sweeps(registry)
    _register_schedules(registry)
    return registry


def _register_lifecycle(registry: kopf.OperatorRegistry) -> None:
    """Start-up (kopf's settings, the services in memo), login, clean-up."""

    @kopf.on.startup(id="startup", registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure_kopf(settings)
        operator_settings: OperatorSettings = memo["operator_settings"]
        # `kyai operator` serves /metrics before kopf starts (a port clash fails at once).
        metrics: RunMetrics = memo.get("metrics") or RunMetrics()
        svc = Services(KubeClient.from_environment(), operator_settings, metrics)
        memo["services"] = svc
        # One loop for all runs (two LISTs a tick; a per-run kopf timer fired 43,000 times at
        # 1,000 runs); the first look comes a resync interval after start.
        memo["scheduler"] = runs = Scheduler(svc)
        memo["run_resync"] = asyncio.create_task(runs.resync_forever(), name="kyai-run-resync")
        # EvaluationSweeps: their own work queue and resync; kyai_sweep_cells on /metrics.
        memo["sweeps"] = Sweeps(svc, SweepMetrics(registry=metrics.registry))
        sweeps(memo).start()
        # EvaluationSchedules: their own work queue, cron timers and resync.
        memo["schedules"] = Schedules(svc, ScheduleMetrics(registry=metrics.registry))
        schedules(memo).start()
        log.info(
            "kyai operator started: namespaces %s, metrics on %s:%d",
            ", ".join(operator_settings.namespaces) or "all",
            operator_settings.metrics_bind_address,
            operator_settings.metrics_port,
        )

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # As kubectl does: $KUBECONFIG or ~/.kube/config, else the pod's service account.
        return kopf.login_via_client(**kwargs)

    @kopf.on.cleanup(id="cleanup", registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        if "scheduler" in memo:
            scheduler(memo).close()
        if "sweeps" in memo:
            await sweeps(memo).aclose()
        if "schedules" in memo:
            await schedules(memo).aclose()
        resync: asyncio.Task[None] | None = memo.get("run_resync")
        if resync is not None:
            resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resync
        if "services" in memo:
            await services(memo).events.aclose()
            await services(memo).kube.aclose()


def _register_workloads(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """EngineArgsSets, Workloads and their engine Deployments."""

    @kopf.on.resume(GROUP, VERSION, "engineargssets", id="engineargsset", registry=registry)
    @kopf.on.create(GROUP, VERSION, "engineargssets", id="engineargsset", registry=registry)
    @kopf.on.update(GROUP, VERSION, "engineargssets", id="engineargsset", registry=registry)
    async def engine_args(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        await reconcile_engine_args(services(memo), dict(body))

    @kopf.on.event(GROUP, VERSION, "engineargssets", id="engineargsset-event", registry=registry)
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
    @kopf.on.resume(GROUP, VERSION, "workloads", id="workload", registry=registry)
    @kopf.on.create(GROUP, VERSION, "workloads", id="workload", registry=registry)
    @kopf.on.update(GROUP, VERSION, "workloads", id="workload", registry=registry)
    async def workload(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        await reconcile_workload(services(memo), _ns(namespace), name)

    @kopf.timer(
        GROUP,
        VERSION,
        "workloads",
        id="workload-poll",
        interval=settings.workload_poll_seconds,
        # Not at once: the create/resume handler has just looked (at 1,000 new Workloads the
        # first tick doubled their reconciles, /v1/models probes included).
        initial_delay=settings.workload_poll_seconds,
        when=_workload_not_ready,
        registry=registry,
    )
    async def workload_poll(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        await reconcile_workload(services(memo), _ns(namespace), name)

    @kopf.on.event("apps", "v1", "deployments", labels={LABEL_WORKLOAD: kopf.PRESENT},
                   id="engine-deployment", registry=registry)  # fmt: skip
    async def engine_deployment(
        labels: kopf.Labels, namespace: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        await reconcile_workload(services(memo), _ns(namespace), labels[LABEL_WORKLOAD])

    # Its engine pods: a container that exits and restarts, an image that cannot be pulled,
    # a pod the scheduler cannot place is on the Workload's condition at once (a Deployment's
    # status does not change when its pod crash-loops).
    @kopf.on.event("", "v1", "pods", labels={LABEL_WORKLOAD: kopf.PRESENT,
                   LABEL_COMPONENT: ENGINE_COMPONENT}, id="engine-pod",
                   registry=registry)  # fmt: skip
    async def engine_pod(labels: kopf.Labels, namespace: str | None, memo: kopf.Memo,
                         body: kopf.Body, **_: Any) -> None:  # fmt: skip
        await reconcile_workload(services(memo), _ns(namespace), labels[LABEL_WORKLOAD],
                                 pod=dict(body))  # fmt: skip

    # A Workload on several nodes: its LeaderWorkerSet's groups turning (un)ready. kopf
    # serves this watch only where the CRD exists (it picks the CRD up once installed).
    @kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
                   labels={LABEL_WORKLOAD: kopf.PRESENT}, id="engine-leaderworkerset",
                   registry=registry)  # fmt: skip
    async def engine_leader_worker_set(
        labels: kopf.Labels, namespace: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        await reconcile_workload(services(memo), _ns(namespace), labels[LABEL_WORKLOAD])

    @kopf.on.event(GROUP, VERSION, "workloads", id="workload-event", registry=registry)
    async def workload_changed(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, meta: kopf.Meta,
        status: kopf.Status, memo: kopf.Memo, **_: Any,
    ) -> None:  # fmt: skip
        _keep(services(memo), event, body)
        await _release_deleted(services(memo), "Workload", _ns(namespace), name, meta)
        await scheduler(memo).reference_changed("Workload", _ns(namespace), name, status)


def _register_snapshots(registry: kopf.OperatorRegistry) -> None:
    """Snapshots, and the Pending runs waiting for one."""

    @kopf.on.resume(GROUP, VERSION, "snapshots", id="snapshot", registry=registry)
    @kopf.on.create(GROUP, VERSION, "snapshots", id="snapshot", registry=registry)
    @kopf.on.update(GROUP, VERSION, "snapshots", id="snapshot", registry=registry)
    async def snapshot(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
        first = await reconcile_snapshot(services(memo), dict(body))
        if first is not None:
            ceiling = services(memo).settings.snapshot_retry_max_seconds
            delay = _snapshots.retry_delay(first, retry, ceiling)
            raise kopf.TemporaryError(
                f"the snapshot is not resolved yet (its source is not available, or its load "
                f"Job waits for Kueue); looking again in {delay:g} s",
                delay=delay,
            )

    # Every event of a load Job (a few in its life): its end, and Kueue (un)suspending it.
    @kopf.on.event("batch", "v1", "jobs", labels={LABEL_SNAPSHOT: kopf.PRESENT},
                   id="snapshot-load-job", registry=registry)  # fmt: skip
    async def snapshot_load_job(
        meta: kopf.Meta, namespace: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == "Snapshot":
                svc = services(memo)
                body = await svc.kube.get("Snapshot", _ns(namespace), owner["name"])
                if body is not None:
                    await reconcile_snapshot(svc, body)

    @kopf.on.event(GROUP, VERSION, "snapshots", id="snapshot-event", registry=registry)
    async def snapshot_changed(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, meta: kopf.Meta,
        status: kopf.Status, memo: kopf.Memo, **_: Any,
    ) -> None:  # fmt: skip
        _keep(services(memo), event, body)
        await _release_deleted(services(memo), "Snapshot", _ns(namespace), name, meta)
        await scheduler(memo).reference_changed("Snapshot", _ns(namespace), name, status)


def _register_runs(registry: kopf.OperatorRegistry) -> None:
    """EvaluationRuns, their finished Jobs and their metrics (the resync loop: start-up)."""

    @kopf.on.event(GROUP, VERSION, "evaluationruns", id="evaluationrun-event", registry=registry)
    async def evaluation_run(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        await scheduler(memo).run_event(event.get("type"), dict(body))

    @kopf.on.event(
        "batch",
        "v1",
        "jobs",
        labels={LABEL_RUN: kopf.PRESENT},
        id="worker-job",
        when=_job_finished,
        registry=registry,
    )
    async def worker_job(body: kopf.Body, meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
        run = owning_run(meta)
        if run is not None:
            await scheduler(memo).job_finished(dict(body), run)


def _register_sweeps(registry: kopf.OperatorRegistry) -> None:
    """EvaluationSweeps, from their events (no kopf annotations), and what wakes them.

    Their runs and derived Workloads (owned by a sweep), and the Workloads, Snapshots and
    EngineArgsSets a sweep names or selects; :class:`Sweeps` decides which events matter.
    """

    @kopf.on.event(GROUP, VERSION, "evaluationsweeps", id="evaluationsweep-event",
                   registry=registry)  # fmt: skip
    async def evaluation_sweep(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        await sweeps(memo).sweep_event(event.get("type"), dict(body))

    @kopf.on.event(GROUP, VERSION, "evaluationruns", labels={LABEL_SWEEP: kopf.PRESENT},
                   id="sweep-run-event", registry=registry)  # fmt: skip
    async def sweep_run(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        await sweeps(memo).child_event("EvaluationRun", event.get("type"), body)

    @kopf.on.event(GROUP, VERSION, "workloads", id="sweep-workload-event", registry=registry)
    async def sweep_workload(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        await sweeps(memo).child_event("Workload", event.get("type"), body)
        await sweeps(memo).reference_event("Workload", event.get("type"), body)

    @kopf.on.event(GROUP, VERSION, "snapshots", id="sweep-snapshot-event", registry=registry)
    async def sweep_snapshot(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        await sweeps(memo).reference_event("Snapshot", event.get("type"), body)

    @kopf.on.event(GROUP, VERSION, "engineargssets", id="sweep-engineargsset-event",
                   registry=registry)  # fmt: skip
    async def sweep_engine_args(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        await sweeps(memo).reference_event("EngineArgsSet", event.get("type"), body)


def _register_schedules(registry: kopf.OperatorRegistry) -> None:
    """EvaluationSchedules, from their events, their runs' and the Workloads they watch."""

    @kopf.on.event(GROUP, VERSION, "evaluationschedules", id="evaluationschedule-event",
                   registry=registry)  # fmt: skip
    async def evaluation_schedule(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        await schedules(memo).schedule_event(event.get("type"), dict(body))

    @kopf.on.event(GROUP, VERSION, "evaluationruns", labels={LABEL_SCHEDULE: kopf.PRESENT},
                   id="schedule-run-event", registry=registry)  # fmt: skip
    async def schedule_run(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        await schedules(memo).run_event(event.get("type"), dict(body))

    @kopf.on.event(GROUP, VERSION, "workloads", id="schedule-workload-event", registry=registry)
    async def schedule_workload(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        await schedules(memo).workload_event(event.get("type"), dict(body))


def schedules(memo: kopf.Memo) -> Schedules:
    """The schedules' controller kept in kopf's memo by the start-up handler."""
    value: Any = memo["schedules"]
    assert isinstance(value, Schedules)
    return value


def sweeps(memo: kopf.Memo) -> Sweeps:
    """The sweeps' controller kept in kopf's memo by the start-up handler."""
    value: Any = memo["sweeps"]
    assert isinstance(value, Sweeps)
    return value


def scheduler(memo: kopf.Memo) -> Scheduler:
    """The run scheduler kept in kopf's memo by the start-up handler."""
    value: Any = memo["scheduler"]
    assert isinstance(value, Scheduler)
    return value


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
