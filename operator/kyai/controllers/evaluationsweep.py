"""EvaluationSweep: list, decide (:mod:`kyai.sweeps`), carry out, write the status.

One reconcile of a sweep (:class:`SweepReconciler`):

1. lists, from the API server, the namespace's Workloads, Snapshots and (when the spec names
   sets) EngineArgsSets, and the sweep's runs (label ``kyai.io/sweep``). Runs are listed from
   the API server, not a watch cache, and the reconciles of one sweep never overlap, so a run
   created by the previous reconcile is always counted: ``spec.parallelism`` holds even
   when that run's watch event has not arrived yet, and after a restart (names are
   deterministic: a create of a name that exists is a harmless 409);
2. :func:`kyai.sweeps.expand` → :func:`kyai.sweeps.plan`, then carries the plan out:
   derived Workloads first (a run waits for its Workload), then runs, then deletions;
3. :func:`kyai.sweeps.sweep_status` on the runs as listed plus those just created, the full
   table's ConfigMap (``<sweep>-table``, written only when the table changed, deleted once
   the table fits in status again), and the status through the one
   :class:`~kyai.controllers._status.StatusWriter` (Ready from the report; Reconciling and
   Stalled follow from phase and reason, as for every kind). Nothing is written when
   nothing changed.

When a sweep is looked at (:class:`Sweeps`, a small work queue: requests for a sweep whose
reconcile is running are coalesced into one more reconcile after it): sweeps are reconciled
from their own watch events as runs are (no kopf create/update handlers, so no kopf
annotation or finalizer on a sweep): a new sweep, a spec its status does not describe yet
(``generation`` ahead of ``observedGeneration``), every sweep at the operator's start; then
when one of its runs changes *phase* (a progress write does not count), when one of its
derived Workloads changes phase, starts being deleted or is gone, when a Workload, Snapshot
or EngineArgsSet it names or selects appears, disappears or changes its labels or spec; and
every ``run_resync_seconds`` while it is Pending or Running (a safety net for lost events,
and a missing object's grace period running out).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from kyai._clock import parse_time
from kyai.api.evaluationsweep import EvaluationSweepSpec, EvaluationSweepStatus
from kyai.builders import label_value
from kyai.builders.queue import queue_label_problem
from kyai.constants import LABEL_SWEEP
from kyai.controllers import _conditions as c
from kyai.controllers._conditions import Change
from kyai.controllers._kube import KubeError
from kyai.controllers._result import DONE, Result, after
from kyai.controllers._services import Services
from kyai.controllers._status import StatusWriter
from kyai.controllers._workqueue import WorkQueue
from kyai.metrics import SweepMetrics
from kyai.sweeps import (
    Plan,
    SweepReport,
    expand,
    owned_by,
    plan,
    sweep_status,
    table_config_map_name,
)

log = logging.getLogger(__name__)

KIND = "EvaluationSweep"
#: Phases after which a sweep is not resynced (its events still wake it).
FINISHED = frozenset({"Succeeded", "Failed"})
#: HTTP statuses of a refused create or delete: said on the sweep (others are retried).
REFUSED = frozenset({400, 403, 422})
#: The kinds a sweep names or selects (besides the Workloads it derives).
REFERENCE_KINDS = ("Workload", "Snapshot", "EngineArgsSet")

_Key = tuple[str, str]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _phase(obj: Mapping[str, Any]) -> str | None:
    phase = (obj.get("status") or {}).get("phase")
    return None if phase is None else str(phase)


def owning_sweep(obj: Mapping[str, Any]) -> str | None:
    """The name of the EvaluationSweep controlling ``obj`` (its owner reference), if any."""
    for owner in _meta(obj).get("ownerReferences") or ():
        if owner.get("kind") == KIND and owner.get("controller"):
            return str(owner.get("name"))
    return None


# -- one reconcile ------------------------------------------------------------------------------


@dataclass
class Listed:
    """What a reconcile read from the API server."""

    workloads: list[dict[str, Any]]
    """The namespace's Workloads (the sweep's derived ones among them)."""
    engine_args_sets: list[dict[str, Any]]
    """The namespace's EngineArgsSets (none listed when the spec names no set)."""
    snapshots: list[dict[str, Any]]
    """The namespace's Snapshots."""
    runs: list[dict[str, Any]]
    """The runs labelled with the sweep."""

    def derived(self, sweep: str) -> list[dict[str, Any]]:
        """The Workloads labelled with the sweep."""
        value = label_value(sweep)
        return [
            w for w in self.workloads if (_meta(w).get("labels") or {}).get(LABEL_SWEEP) == value
        ]


@dataclass
class Outcome:
    """What a reconcile did (tests and logs read it)."""

    created_runs: list[str] = field(default_factory=list)
    created_workloads: list[str] = field(default_factory=list)
    deleted_runs: list[str] = field(default_factory=list)
    deleted_workloads: list[str] = field(default_factory=list)
    report: SweepReport | None = None
    result: Result = DONE


def table_digest(config_map: Mapping[str, Any] | None) -> str | None:
    """A digest of a table ConfigMap's contents (None: no ConfigMap)."""
    if config_map is None:
        return None
    payload = {"data": config_map.get("data"), "binaryData": config_map.get("binaryData")}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class SweepReconciler:
    """One reconcile of one EvaluationSweep (its body as read from the API server)."""

    def __init__(
        self,
        svc: Services,
        body: Mapping[str, Any],
        *,
        tables: dict[_Key, str | None] | None = None,
        on_created: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.svc = svc
        self.body = body
        self.writer = StatusWriter(svc, body)
        self.namespace, self.name = self.writer.namespace, self.writer.name
        #: Digests of the table ConfigMaps written, by sweep (shared across reconciles).
        self.tables = tables if tables is not None else {}
        self.on_created = on_created
        self.outcome = Outcome()

    async def reconcile(self) -> Outcome:
        """List, decide, carry out, write the status."""
        try:
            spec = EvaluationSweepSpec.model_validate(self.body.get("spec") or {})
        except ValidationError as exc:
            await self._invalid(c.validation_message(exc))
            return self.outcome
        if (bad_queue := queue_label_problem(self.body)) is not None:  # its runs would carry it
            await self._invalid(bad_queue, c.INVALID_QUEUE_NAME)
            return self.outcome
        listed = await self.read(spec)
        expansion = expand(
            self.name,
            spec,
            workloads=listed.workloads,
            engine_args_sets=listed.engine_args_sets,
            snapshots=listed.snapshots,
        )
        decided = plan(
            self.body, spec, expansion, runs=listed.runs, workloads=listed.derived(self.name)
        )
        try:
            runs = await self.carry_out(decided, listed.runs)
        except KubeError as error:
            if error.status not in REFUSED:
                raise
            await self._refused(error)
            return self.outcome
        report = sweep_status(self.body, spec, expansion, runs, waiting=decided.waiting)
        self.outcome.report = report
        await self._table(report)
        await self._write(report)
        self.outcome.result = self._requeue(report)
        return self.outcome

    async def read(self, spec: EvaluationSweepSpec) -> Listed:
        """The objects the sweep's decisions read, from the API server."""
        kube, namespace = self.svc.kube, self.namespace
        selector = f"{LABEL_SWEEP}={label_value(self.name)}"
        workloads, snapshots, runs = await asyncio.gather(
            kube.list("Workload", namespace),
            kube.list("Snapshot", namespace),
            kube.list("EvaluationRun", namespace, label_selector=selector),
        )
        sets = await kube.list("EngineArgsSet", namespace) if spec.engine_args_set_names() else []
        return Listed(workloads, sets, snapshots, runs)

    async def carry_out(
        self, decided: Plan, runs: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """Create, then delete, as ``decided``; the runs as they now are (for the status)."""
        kube = self.svc.kube
        for workload in decided.create_workloads:
            _, created = await kube.create(workload)
            if created:
                self.outcome.created_workloads.append(_name(workload))
        current = {_name(run): run for run in runs}
        for manifest in decided.create_runs:
            run, created = await kube.create(manifest)
            current[_name(run)] = run
            if created:
                self.outcome.created_runs.append(_name(run))
                if self.on_created is not None:
                    self.on_created(run)
        for name in decided.delete_runs:
            await kube.delete("EvaluationRun", self.namespace, name)
            current.pop(name, None)
            self.outcome.deleted_runs.append(name)
        for name in decided.delete_workloads:
            await kube.delete("Workload", self.namespace, name)
            self.outcome.deleted_workloads.append(name)
        self._log_changes()
        return list(current.values())

    def _log_changes(self) -> None:
        done = self.outcome
        for verb, kind, names in (
            ("created", "Workload", done.created_workloads),
            ("created", "EvaluationRun", done.created_runs),
            ("deleted", "EvaluationRun", done.deleted_runs),
            ("deleted", "Workload", done.deleted_workloads),
        ):
            if names:
                log.info("sweep %s/%s: %s %s %s", self.namespace, self.name, verb, kind,
                         ", ".join(names))  # fmt: skip

    async def _table(self, report: SweepReport) -> None:
        """Create or replace the full table's ConfigMap; delete it once not needed."""
        key = (self.namespace, self.name)
        wanted = report.config_map
        digest = table_digest(wanted)
        if key in self.tables and self.tables[key] == digest:
            return
        name = table_config_map_name(self.name)
        if wanted is None:
            if key in self.tables or self._had_table():
                await self.svc.kube.delete("ConfigMap", self.namespace, name)
            self.tables[key] = None
            return
        current, created = await self.svc.kube.create(wanted)
        if not created and table_digest(current) != digest:
            if not owned_by(current, self.body):
                message = (
                    f"the ConfigMap {name} exists and is not this sweep's: the full table is "
                    "not written"
                )
                log.warning("sweep %s/%s: %s", self.namespace, self.name, message)
                self.writer.event("Warning", "TableConfigMapTaken", message)
                return
            meta = {**wanted["metadata"], "resourceVersion": _meta(current).get("resourceVersion")}
            await self.svc.kube.replace({**wanted, "metadata": meta})
        self.tables[key] = digest

    def _previous(self) -> EvaluationSweepStatus | None:
        """The status as read (None: unreadable)."""
        try:
            return EvaluationSweepStatus.model_validate(self.writer.status)
        except ValidationError:
            return None

    def _had_table(self) -> bool:
        """Whether the status as read names a table ConfigMap (unreadable: maybe)."""
        previous = self._previous()
        return previous is None or previous.table_config_map is not None

    async def _write(self, report: SweepReport) -> None:
        """The status (unless nothing changes); an event when the phase changes."""
        previous = self.writer.seen().phase
        status = report.status
        status.conditions = self.writer.conditions(
            Change(c.READY, report.ready, report.reason, report.message)
        )
        if self.writer.unchanged(status):
            return
        await self.writer.patch(status)
        if previous != status.phase:
            failed = status.phase == "Failed" or report.stalled
            self.writer.event("Warning" if failed else "Normal", report.reason, report.message)

    async def _invalid(self, message: str, reason: str = c.INVALID_SPEC) -> None:
        """A spec (or queue label) the operator cannot use: Stalled until it changes."""
        status = EvaluationSweepStatus(
            phase="Pending",
            message=message,
            conditions=self.writer.conditions(Change(c.READY, False, reason, message)),
        )
        if not self.writer.unchanged(status):
            await self.writer.patch(status)
            self.writer.event("Warning", reason, message)

    async def _refused(self, error: KubeError) -> None:
        """The API server refused a create or delete: say so (Ready False), look again later.

        403 (the operator's RBAC): ``Forbidden``, tried again ``api_retry_seconds`` later. 400
        or 422 (a cell's run or Workload the API refuses, e.g. an EvaluationRun rule the run
        template breaks): ``InvalidSpec``, Stalled until the spec changes.
        """
        forbidden = error.status == 403
        previous = self._previous()
        reason = c.FORBIDDEN if forbidden else c.INVALID_SPEC
        message = f"the API server refused a change this sweep needs: {error}"
        status = EvaluationSweepStatus(
            phase=(previous.phase if previous is not None else None) or "Pending",
            message=message,
            conditions=self.writer.conditions(Change(c.READY, False, reason, message)),
        )
        if not self.writer.unchanged(status):
            await self.writer.patch(status)
            self.writer.event("Warning", reason, message)
        log.warning("sweep %s/%s: %s", self.namespace, self.name, message)
        self.outcome.result = after(self.svc.settings.api_retry_seconds) if forbidden else DONE

    def _requeue(self, report: SweepReport) -> Result:
        """A missing object's grace period running out: look again then (Stalled is due)."""
        if report.reason not in c.MISSING_REFERENCE or report.status.phase != "Pending":
            return DONE
        started = parse_time(_meta(self.body).get("creationTimestamp"))
        if started is None:
            return DONE  # the resync looks at a Pending sweep anyway
        age = (datetime.now(UTC) - started).total_seconds()
        remaining = self.svc.settings.missing_reference_grace_seconds - age
        return after(remaining + 1) if remaining >= 0 else DONE


async def reconcile_sweep(
    svc: Services,
    namespace: str,
    name: str,
    *,
    tables: dict[_Key, str | None] | None = None,
    on_created: Callable[[Mapping[str, Any]], None] | None = None,
) -> Outcome | None:
    """Read the sweep and reconcile it; None when it is gone or being deleted.

    Deleting a sweep needs nothing from the operator: its runs, derived Workloads and table
    ConfigMap carry its controller owner reference, so the garbage collector deletes them.
    """
    async with svc.locked(KIND, namespace, name):
        body = await svc.kube.get(KIND, namespace, name)
        if body is None or _meta(body).get("deletionTimestamp"):
            return None
        with svc.metrics.reconciling(KIND):
            reconciler = SweepReconciler(svc, body, tables=tables, on_created=on_created)
            return await reconciler.reconcile()


# -- when sweeps are looked at --------------------------------------------------------------


def wants_reconcile(event_type: str | None, body: Mapping[str, Any]) -> bool:
    """Whether a sweep's own watch event calls for a reconcile.

    Its first sight (event type None: the operator's start; or no status yet: a new sweep)
    and a spec the status does not describe yet. Its own status writes do not.
    """
    meta = _meta(body)
    if meta.get("deletionTimestamp"):
        return False
    if event_type is None or not body.get("status"):
        return True
    try:
        observed = EvaluationSweepStatus.model_validate(body["status"]).observed_generation
    except ValidationError:
        return True  # an unreadable status: the reconcile writes a good one
    return meta.get("generation") != observed


def _names(refs: Any) -> set[str]:
    return {str(ref.get("name")) for ref in refs or () if isinstance(ref, Mapping)}


def cares_about(sweep: Mapping[str, Any], kind: str, name: str) -> bool:
    """Whether a change of the ``kind`` named ``name`` may change the sweep's cells.

    It names it (listed, or as the baseline), or selects objects of its kind.
    """
    spec = sweep.get("spec") or {}
    if kind == "Workload":
        baseline = (spec.get("baseline") or {}).get("workload")
        listed = _names(spec.get("workloads")) | ({baseline} if baseline else set())
        return name in listed or spec.get("workloadSelector") is not None
    if kind == "Snapshot":
        return name in _names(spec.get("snapshots")) or spec.get("snapshotSelector") is not None
    return name in _names(spec.get("engineArgsSets"))


def reference_fingerprint(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a Workload, Snapshot or EngineArgsSet a sweep reads: its spec and labels."""
    meta = _meta(body)
    labels = tuple(sorted((meta.get("labels") or {}).items()))
    return (meta.get("generation"), labels)


def child_fingerprint(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a sweep's run or derived Workload the sweep reads: its phase, its deletion."""
    return (_phase(body), bool(_meta(body).get("deletionTimestamp")))


class Sweeps(WorkQueue):
    """Looks at sweeps when their events, their children's or a requeue call for it.

    A work queue as controller-runtime's (:class:`~kyai.controllers._workqueue.WorkQueue`):
    a sweep asked for while its reconcile runs is reconciled once more after it (any number of
    asks coalesce into one), never twice at once.
    """

    what = "sweep"

    def __init__(self, svc: Services, metrics: SweepMetrics | None = None) -> None:
        super().__init__(svc)
        self.metrics = metrics if metrics is not None else SweepMetrics()
        #: Sweeps as last seen by their watch.
        self.known: dict[_Key, Mapping[str, Any]] = {}
        #: What was last seen of each child (run or derived Workload) and referenced object.
        self._children: dict[tuple[str, str, str], tuple[Any, ...]] = {}
        self._references: dict[tuple[str, str, str], tuple[Any, ...]] = {}
        self._tables: dict[_Key, str | None] = {}

    # -- events --

    async def sweep_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A sweep's own watch event: metrics, the known sweeps, maybe a reconcile."""
        meta = _meta(body)
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event_type == "DELETED":
            self.metrics.forget(*key)
            self.svc.forget(KIND, *key)
            self.known.pop(key, None)
            self._tables.pop(key, None)
            self.cancel(*key)
            return
        self.metrics.observe(body)
        self.known[key] = body
        if wants_reconcile(event_type, body):
            self.enqueue(*key)

    async def child_event(self, kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A sweep's run or derived Workload changed: its sweep, when something it reads did."""
        sweep = owning_sweep(body)
        if sweep is None:
            return
        meta = _meta(body)
        namespace = str(meta.get("namespace"))
        key = (kind, namespace, str(meta.get("name")))
        if event_type == "DELETED":
            self._children.pop(key, None)
            self.enqueue(namespace, sweep)
            return
        seen = child_fingerprint(body)
        if self._children.get(key) != seen:
            self._children[key] = seen
            self.enqueue(namespace, sweep)

    def created(self, body: Mapping[str, Any]) -> None:
        """A run this controller just made: its first event calls for no reconcile."""
        meta = _meta(body)
        self._children[("EvaluationRun", str(meta.get("namespace")), str(meta.get("name")))] = (
            child_fingerprint(body)
        )

    async def reference_event(
        self, kind: str, event_type: str | None, body: Mapping[str, Any]
    ) -> None:
        """A Workload, Snapshot or EngineArgsSet changed: the sweeps naming or selecting it."""
        if owning_sweep(body) is not None:
            return  # a derived Workload: a child (child_event)
        meta = _meta(body)
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        key = (kind, namespace, name)
        if event_type == "DELETED":
            self._references.pop(key, None)
        else:
            seen = reference_fingerprint(body)
            if self._references.get(key) == seen:
                return
            self._references[key] = seen
        for (sweep_namespace, sweep), sweep_body in list(self.known.items()):
            if sweep_namespace == namespace and cares_about(sweep_body, kind, name):
                self.enqueue(namespace, sweep)

    # -- the queue (WorkQueue) --

    def exists(self, key: _Key) -> bool:
        """Whether the sweep is still watched."""
        return key in self.known

    async def reconcile(self, namespace: str, name: str) -> Result:
        """One reconcile of the sweep."""
        outcome = await reconcile_sweep(self.svc, namespace, name, tables=self._tables,
                                        on_created=self.created)  # fmt: skip
        return DONE if outcome is None else outcome.result

    def resync_keys(self) -> list[_Key]:
        """The sweeps not finished."""
        return [key for key, body in self.known.items() if _phase(body) not in FINISHED]
