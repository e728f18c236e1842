"""Kueue emulation (``kyai devcluster --kueue``): Kueue's CRDs, webhooks and admission.

It follows Kueue v0.14.8 (the last release whose CRDs serve ``kueue.x-k8s.io/v1beta1`` only;
``crds/kueue/SOURCE.md``): the names, labels, conditions, reasons and messages below are
that release's, taken from its code (``pkg/controller/jobframework``, ``pkg/controller/jobs``,
``pkg/workload``, ``pkg/scheduler``). What it leaves out is in the README ("Kueue
emulation"): no cohorts, borrowing, fair sharing, admission checks, topology-aware
scheduling, partial admission, pod groups or the LeaderWorkerSet integration (its pods are
admitted one by one); one scheduling pass at a time.

Three parts:

* :func:`kueue_webhook` — the mutating webhooks at create time: a queued batch/v1 Job is
  suspended, a queued Pod gets the ``kueue.x-k8s.io/admission`` scheduling gate, a queued
  Deployment's pod template carries the queue name to its pods;
* :class:`KueueController` — the Job and Pod reconcilers of ``jobframework`` (a Workload per
  Job or Pod; start on admission, stop on eviction, Finished when the Job or Pod is) and the
  scheduler (quota reserved against the ClusterQueue's nominal quota in priority then
  creation order; preemption within the ClusterQueue), plus the queues' status;
* :func:`install_crds` — the five CRDs, read from the package data.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
from collections.abc import Hashable, Iterable
from decimal import ROUND_CEILING, Decimal
from importlib import resources
from typing import Any

import yaml

from kyai._json import clone
from kyai_devcluster._controllers import (
    JOBS,
    PODS,
    Controller,
    controller_ref,
    record_event,
)
from kyai_devcluster._errors import StatusError
from kyai_devcluster._resources import ResourceType
from kyai_devcluster._store import CRDS, Event, Store, meta, now_rfc3339

Obj = dict[str, Any]

#: The Kueue release this emulation follows.
KUEUE_VERSION = "v0.14.8"
GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta1"

WORKLOADS = (GROUP, "workloads")
CLUSTER_QUEUES = (GROUP, "clusterqueues")
LOCAL_QUEUES = (GROUP, "localqueues")
RESOURCE_FLAVORS = (GROUP, "resourceflavors")
PRIORITY_CLASSES = (GROUP, "workloadpriorityclasses")
DEPLOYMENTS = ("apps", "deployments")

#: pkg/controller/constants.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOAD_PRIORITY_CLASS_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
#: pkg/constants.
MANAGED_LABEL = "kueue.x-k8s.io/managed"
#: pkg/controller/jobs/pod/constants.
ADMISSION_GATE = "kueue.x-k8s.io/admission"
SUSPENDED_BY_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
#: The Workload finalizer (kueue.ResourceInUseFinalizerName).
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
#: The pod condition Kueue sets before deleting a stopped pod.
TERMINATION_TARGET = "TerminationTarget"
#: Labels of a Job's template the batch Job controller manages (dropped from the PodSet).
_JOB_MANAGED_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/controller-uid")
#: kueue.HumanReadablePreemptionReasons[InClusterQueue].
_IN_CLUSTER_QUEUE = "InClusterQueue"

_CRD_FILES = (
    "kueue.x-k8s.io_resourceflavors.yaml",
    "kueue.x-k8s.io_clusterqueues.yaml",
    "kueue.x-k8s.io_localqueues.yaml",
    "kueue.x-k8s.io_workloadpriorityclasses.yaml",
    "kueue.x-k8s.io_workloads.yaml",
)


# -- CRDs ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _crd_texts() -> tuple[Obj, ...]:
    folder = resources.files("kyai_devcluster").joinpath("crds", "kueue")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(yaml.load(folder.joinpath(name).read_text(), Loader=loader) for name in _CRD_FILES)


def crd_documents() -> list[Obj]:
    """Kueue's five CRDs (fresh copies), as its release ships them."""
    return [clone(doc) for doc in _crd_texts()]


def install_crds(store: Store) -> None:
    """Create Kueue's CRDs in ``store`` (the devcluster validates them as any CRD)."""
    crds = store.type_for(*CRDS)
    for doc in crd_documents():
        store.create(crds, None, doc)


# -- quantities ------------------------------------------------------------------------------

_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def _quantity(value: Any) -> Decimal:
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return Decimal(text)


def resource_value(name: str, value: Any) -> int:
    """Kueue's int64 of a quantity: milli-units for ``cpu``, units (rounded up) otherwise."""
    amount = _quantity(value)
    if name == "cpu":
        amount *= 1000
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def quantity_string(name: str, value: int) -> str:
    """``resources.ResourceQuantityString``: how Kueue prints an amount of ``name``."""
    if name == "cpu":
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    binary = name in ("memory", "ephemeral-storage") or name.startswith("hugepages-")
    if binary and value:
        for power, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
            if value % 1024**power == 0:
                return f"{value // 1024**power}{suffix}"
        if abs(value) < 1024:
            return str(value)
    if value:
        for power, suffix in ((6, "E"), (5, "P"), (4, "T"), (3, "G"), (2, "M"), (1, "k")):
            if value % 1000**power == 0:
                return f"{value // 1000**power}{suffix}"
    return str(value)


def pod_requests(spec: Obj) -> dict[str, int]:
    """A pod's requests as Kueue counts them (limits stand for missing requests)."""

    def of(container: Obj) -> dict[str, int]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {name: resource_value(name, qty) for name, qty in merged.items()}

    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, value in of(container).items():
            total[name] = total.get(name, 0) + value
    for container in spec.get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, 0), value)
    for name, qty in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + resource_value(name, qty)
    return {name: value for name, value in total.items() if value}


# -- names and conditions ---------------------------------------------------------------------


def workload_name(owner_name: str, owner_uid: str, kind: str, group: str) -> str:
    """``jobframework.GetWorkloadNameForOwnerWithGVK``: ``<kind>-<name>-<sha1[:5]>``."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode()).hexdigest()
    prefix = f"{kind.lower()}-{owner_name}"[: 252 - 5]
    return f"{prefix}-{digest[:5]}"


def condition(obj: Obj, kind: str) -> Obj | None:
    """The status condition of type ``kind``."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(obj: Obj, kind: str) -> bool:
    """Whether condition ``kind`` is True."""
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def _truncate(message: str) -> str:
    # api.TruncateConditionMessage: 32 KiB.
    return message[: 32 * 1024]


def set_condition(
    status: Obj,
    kind: str,
    value: bool,
    reason: str,
    message: str,
    *,
    generation: int | None = None,
    now: str | None = None,
) -> bool:
    """``apimeta.SetStatusCondition``: the transition time moves only with the status."""
    conditions: list[Obj] = [dict(c) for c in status.get("conditions") or []]
    wanted: Obj = {
        "type": kind,
        "status": "True" if value else "False",
        "reason": reason,
        "message": _truncate(message),
    }
    if generation is not None:
        wanted["observedGeneration"] = generation
    for index, existing in enumerate(conditions):
        if existing.get("type") != kind:
            continue
        updated = dict(existing)
        if existing.get("status") != wanted["status"]:
            updated["lastTransitionTime"] = now or now_rfc3339()
        updated.update(wanted)
        if updated == existing:
            return False
        conditions[index] = updated
        status["conditions"] = conditions
        return True
    wanted["lastTransitionTime"] = now or now_rfc3339()
    conditions.append(wanted)
    status["conditions"] = conditions
    return True


def _generation(wl: Obj) -> int:
    return int(meta(wl).get("generation") or 1)


def has_quota_reservation(wl: Obj) -> bool:
    """``workload.HasQuotaReservation``."""
    return is_true(wl, "QuotaReserved")


def sync_admitted(wl: Obj, status: Obj) -> bool:
    """``workload.SyncAdmittedCondition`` (no admission checks, no delayed topology)."""
    reserved = any(
        c.get("type") == "QuotaReserved" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    admitted = any(
        c.get("type") == "Admitted" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if admitted == reserved:
        return False
    if reserved:
        return set_condition(
            status,
            "Admitted",
            True,
            "Admitted",
            "The workload is admitted",
            generation=_generation(wl),
        )
    return set_condition(
        status,
        "Admitted",
        False,
        "NoReservation",
        "The workload has no reservation",
        generation=_generation(wl),
    )


def unset_quota_reservation(wl: Obj, status: Obj, reason: str, message: str) -> bool:
    """``workload.UnsetQuotaReservationWithCondition``."""
    changed = set_condition(
        status, "QuotaReserved", False, reason, message, generation=_generation(wl)
    )
    if status.get("admission") is not None:
        status.pop("admission")
        changed = True
    return sync_admitted(wl, status) or changed


def set_quota_reservation(wl: Obj, status: Obj, admission: Obj) -> None:
    """``workload.SetQuotaReservation`` then ``SyncAdmittedCondition`` (the scheduler's)."""
    status["admission"] = admission
    gen = _generation(wl)
    set_condition(
        status,
        "QuotaReserved",
        True,
        "QuotaReserved",
        f"Quota reserved in ClusterQueue {admission['clusterQueue']}",
        generation=gen,
    )
    for kind in ("Evicted", "Preempted"):
        previous = next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)
        if previous is not None and previous.get("status") == "True":
            set_condition(
                status,
                kind,
                False,
                "QuotaReserved",
                "Previously: " + str(previous.get("message", "")),
                generation=gen,
            )
    sync_admitted(wl, status)


def priority_of(wl: Obj) -> int:
    """``priority.Priority``: spec.priority, 0 when unset."""
    return int((wl.get("spec") or {}).get("priority") or 0)


# -- webhooks --------------------------------------------------------------------------------


def _queue_name(obj: Obj) -> str:
    return str((meta(obj).get("labels") or {}).get(QUEUE_LABEL) or "")


def kueue_webhook(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Kueue's mutating webhooks for a create (the Job, Pod and Deployment integrations)."""
    if old is not None:
        return
    if rt.group_resource == JOBS:
        # jobframework.ApplyDefaultForSuspend: a queued Job is suspended at creation.
        if _queue_name(obj) and not _managed_ancestor(obj):
            obj.setdefault("spec", {})["suspend"] = True
    elif rt.group_resource == DEPLOYMENTS:
        if _queue_name(obj):
            template = obj.setdefault("spec", {}).setdefault("template", {})
            template_meta = template.setdefault("metadata", {})
            annotations = template_meta.setdefault("annotations", {})
            annotations[SUSPENDED_BY_PARENT] = "deployment"
            labels = template_meta.setdefault("labels", {})
            labels[MANAGED_LABEL] = "true"
            labels[QUEUE_LABEL] = _queue_name(obj)
            priority = (meta(obj).get("labels") or {}).get(PRIORITY_CLASS_LABEL)
            if priority:
                labels[PRIORITY_CLASS_LABEL] = priority
    elif rt.group_resource == PODS:
        metadata = meta(obj)
        by_parent = SUSPENDED_BY_PARENT in (metadata.get("annotations") or {})
        if not by_parent and (not _queue_name(obj) or _managed_ancestor(obj)):
            return
        if not by_parent:
            metadata.setdefault("labels", {})[MANAGED_LABEL] = "true"
        spec = obj.setdefault("spec", {})
        gates = spec.setdefault("schedulingGates", [])
        if not any(gate.get("name") == ADMISSION_GATE for gate in gates):
            gates.append({"name": ADMISSION_GATE})


def _managed_ancestor(obj: Obj) -> bool:
    """Whether a controlling owner is a Job Kueue manages (its pods are the Job's concern)."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job":
            return True
    return False


# -- the controller --------------------------------------------------------------------------


class KueueController(Controller):
    """Kueue's Job and Pod reconcilers and its scheduler, on the devcluster's event loop."""

    name = "kueue"

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        #: Creation order of the Workloads (their creationTimestamp has second resolution).
        self._order: dict[str, int] = {}
        self._counter = itertools.count()

    # -- plumbing ----------------------------------------------------------------------------

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        group_resource = event.group_resource
        metadata = meta(event.obj)
        namespace = metadata.get("namespace", "")
        if group_resource == JOBS:
            if _queue_name(event.obj) or event.type == "DELETED":
                return [("job", namespace, metadata["name"]), "schedule"]
            return []
        if group_resource == PODS:
            labels = metadata.get("labels") or {}
            if labels.get(MANAGED_LABEL) == "true":
                return [("pod", namespace, metadata["name"]), "schedule"]
            return []
        if group_resource == WORKLOADS:
            uid = metadata.get("uid", "")
            if event.type == "ADDED" and uid not in self._order:
                self._order[uid] = next(self._counter)
            elif event.type == "DELETED":
                self._order.pop(uid, None)
            keys: list[Hashable] = [("workload", namespace, metadata["name"]), "schedule"]
            for ref in metadata.get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == "Job":
                    keys.append(("job", namespace, ref.get("name")))
                elif ref.get("controller") and ref.get("kind") == "Pod":
                    keys.append(("pod", namespace, ref.get("name")))
            return keys
        if group_resource in (CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS, PRIORITY_CLASSES):
            return ["schedule", "retry-owners"]
        return []

    def _rt(self, group_resource: tuple[str, str]) -> ResourceType:
        return self.store.type_for(*group_resource)

    def reconcile(self, key: Hashable) -> None:
        if key == "schedule":
            self._schedule()
        elif key == "retry-owners":
            self._retry_owners()
        elif isinstance(key, tuple) and key[0] == "job":
            self._reconcile_job(str(key[1]), str(key[2]))
        elif isinstance(key, tuple) and key[0] == "pod":
            self._reconcile_pod(str(key[1]), str(key[2]))
        elif isinstance(key, tuple) and key[0] == "workload":
            self._reconcile_workload(str(key[1]), str(key[2]))

    def _retry_owners(self) -> None:
        """Jobs and Pods still without a Workload (e.g. a WorkloadPriorityClass was missing)."""
        for job in self.store.objects(self._rt(JOBS), None):
            if _queue_name(job) and not self._workload_of(job):
                self.enqueue(("job", meta(job)["namespace"], meta(job)["name"]))
        for pod in self.store.objects(self._rt(PODS), None):
            if (meta(pod).get("labels") or {}).get(MANAGED_LABEL) == "true":
                if not self._workload_of(pod):
                    self.enqueue(("pod", meta(pod)["namespace"], meta(pod)["name"]))

    def _workload_of(self, owner: Obj) -> Obj | None:
        found = self.store.controlled(self._rt(WORKLOADS), meta(owner)["uid"])
        return found[0] if found else None

    def _write_workload_status(self, wl: Obj, status: Obj) -> Obj | None:
        return self.store.write_status(self._rt(WORKLOADS), wl, status)

    # -- Workloads ---------------------------------------------------------------------------

    def _reconcile_workload(self, namespace: str, name: str) -> None:
        wl = self.store.find(self._rt(WORKLOADS), namespace, name)
        if wl is None:
            return
        finalizers = meta(wl).get("finalizers") or []
        if RESOURCE_IN_USE in finalizers and (
            meta(wl).get("deletionTimestamp") or is_true(wl, "Finished")
        ):
            # The job reconciler drops the finalizer of a finished or deleted Workload.
            self.store.remove_finalizer(self._rt(WORKLOADS), wl, RESOURCE_IN_USE)

    def _new_workload(self, owner: Obj, pod_sets: list[Obj]) -> Obj | None:
        """``jobframework.ConstructWorkload`` + ``prepareWorkload``; None: no priority class."""
        metadata = meta(owner)
        kind, group = str(owner["kind"]), str(owner["apiVersion"]).rpartition("/")[0]
        spec: Obj = {"queueName": _queue_name(owner), "podSets": pod_sets}
        wpc_name = (metadata.get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        if wpc_name:
            wpc = self.store.find(self._rt(PRIORITY_CLASSES), None, str(wpc_name))
            if wpc is None:
                return None  # Kueue retries until the WorkloadPriorityClass exists
            spec.update(
                priorityClassName=str(wpc_name),
                priority=int(wpc.get("value") or 0),
                priorityClassSource=WORKLOAD_PRIORITY_CLASS_SOURCE,
            )
        else:
            spec["priority"] = 0
        return {
            "apiVersion": API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": workload_name(metadata["name"], metadata["uid"], kind, group),
                "namespace": metadata["namespace"],
                "labels": {JOB_UID_LABEL: metadata["uid"]},
                "finalizers": [RESOURCE_IN_USE],
                "ownerReferences": [controller_ref(owner)],
            },
            "spec": spec,
        }

    def _create_workload(self, owner: Obj, pod_sets: list[Obj]) -> None:
        body = self._new_workload(owner, pod_sets)
        if body is None:
            return
        with contextlib.suppress(StatusError):
            wl = self.store.create(self._rt(WORKLOADS), meta(owner)["namespace"], body).obj
            record_event(
                self.store,
                owner,
                "Normal",
                "CreatedWorkload",
                f"Created Workload: {meta(wl)['namespace']}/{meta(wl)['name']}",
            )

    def _finish(self, wl: Obj, succeeded: bool, message: str) -> None:
        status = clone(wl.get("status") or {})
        set_condition(
            status,
            "Finished",
            True,
            "Succeeded" if succeeded else "Failed",
            message,
            generation=_generation(wl),
        )
        self._write_workload_status(wl, status)

    def _release_if_evicted(self, wl: Obj, active: bool) -> None:
        """After stopping an evicted Workload's job: clear its reservation once inactive."""
        evicted = condition(wl, "Evicted")
        if evicted is None or not has_quota_reservation(wl) or active:
            return
        status = clone(wl.get("status") or {})
        reason, message = str(evicted.get("reason")), str(evicted.get("message"))
        set_condition(
            status,
            "Requeued",
            reason in ("Preempted", "NodeFailures"),
            reason,
            message,
            generation=_generation(wl),
        )
        unset_quota_reservation(wl, status, "Pending", message)
        self._write_workload_status(wl, status)

    # -- batch/v1 Jobs -----------------------------------------------------------------------

    def _reconcile_job(self, namespace: str, name: str) -> None:
        jobs = self._rt(JOBS)
        job = self.store.find(jobs, namespace, name)
        if job is None or meta(job).get("deletionTimestamp"):
            return
        wl = self._workload_of(job)
        if wl is None and not _queue_name(job):
            return
        if wl is not None and is_true(wl, "Finished"):
            return
        if wl is not None and meta(wl).get("deletionTimestamp"):
            self._stop_job(job, wl, "Workload is deleted")
            return
        finished = next(
            (
                c
                for c in (job.get("status") or {}).get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            None,
        )
        if finished is not None:
            if wl is not None:
                self._finish(wl, finished["type"] == "Complete", str(finished.get("message", "")))
            return
        if wl is None:
            if not (job.get("spec") or {}).get("suspend"):
                self._stop_job(job, None, "missing workload")
            template = clone((job.get("spec") or {}).get("template") or {})
            labels = (template.get("metadata") or {}).get("labels") or {}
            for key in _JOB_MANAGED_LABELS:
                labels.pop(key, None)
            count = int((job.get("spec") or {}).get("parallelism", 1))
            self._create_workload(job, [{"name": "main", "count": count, "template": template}])
            return
        if is_true(wl, "Evicted"):
            evicted = condition(wl, "Evicted") or {}
            job = self._stop_job(job, wl, str(evicted.get("message", ""))) or job
            self._release_if_evicted(wl, int((job.get("status") or {}).get("active") or 0) > 0)
            return
        suspended = bool((job.get("spec") or {}).get("suspend"))
        if suspended:
            if is_true(wl, "Admitted"):
                self._start_job(job, wl)
            return
        if not is_true(wl, "Admitted"):
            self._stop_job(job, wl, "Not admitted by cluster queue")

    def _start_job(self, job: Obj, wl: Obj) -> None:
        admission = (wl.get("status") or {}).get("admission") or {}
        updated = clone(job)
        updated["spec"]["suspend"] = False
        template_spec = updated["spec"].setdefault("template", {}).setdefault("spec", {})
        selector = dict(template_spec.get("nodeSelector") or {})
        selector.update(self._flavor_node_labels(admission))
        if selector:
            template_spec["nodeSelector"] = selector
        if self.store.write_spec(self._rt(JOBS), job, updated) is not None:
            record_event(
                self.store,
                job,
                "Normal",
                "Started",
                f"Admitted by clusterQueue {admission.get('clusterQueue', '')}",
            )

    def _flavor_node_labels(self, admission: Obj) -> dict[str, str]:
        labels: dict[str, str] = {}
        for assignment in admission.get("podSetAssignments") or []:
            for flavor_name in sorted(set((assignment.get("flavors") or {}).values())):
                flavor = self.store.find(self._rt(RESOURCE_FLAVORS), None, str(flavor_name))
                if flavor is not None:
                    labels.update((flavor.get("spec") or {}).get("nodeLabels") or {})
        return labels

    def _stop_job(self, job: Obj, wl: Obj | None, message: str) -> Obj | None:
        """``Job.Stop``: suspend, reset the start time, restore the template's nodeSelector."""
        jobs = self._rt(JOBS)
        current: Obj | None = job
        if not (job.get("spec") or {}).get("suspend") or wl is not None:
            updated = clone(job)
            updated["spec"]["suspend"] = True
            if wl is not None:
                original = ((wl.get("spec") or {}).get("podSets") or [{}])[0]
                original_spec = (original.get("template") or {}).get("spec") or {}
                template_spec = updated["spec"].setdefault("template", {}).setdefault("spec", {})
                if original_spec.get("nodeSelector"):
                    template_spec["nodeSelector"] = dict(original_spec["nodeSelector"])
                else:
                    template_spec.pop("nodeSelector", None)
            if updated != job:
                was_running = not (job.get("spec") or {}).get("suspend")
                current = self.store.write_spec(jobs, job, updated)
                if was_running:
                    record_event(self.store, job, "Normal", "Stopped", message)
        if current is not None and (current.get("status") or {}).get("startTime"):
            status = clone(current["status"])
            status.pop("startTime")
            current = self.store.write_status(jobs, current, status)
        return current

    # -- Pods --------------------------------------------------------------------------------

    def _reconcile_pod(self, namespace: str, name: str) -> None:
        pods = self._rt(PODS)
        pod = self.store.find(pods, namespace, name)
        if pod is None or (meta(pod).get("labels") or {}).get(MANAGED_LABEL) != "true":
            return
        if (meta(pod).get("labels") or {}).get(POD_GROUP_LABEL):
            return  # pod groups are not emulated (README)
        wl = self._workload_of(pod)
        if wl is not None and is_true(wl, "Finished"):
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            if wl is not None:
                self._finish(
                    wl, phase == "Succeeded", str((pod.get("status") or {}).get("message", ""))
                )
            return
        gated = any(
            gate.get("name") == ADMISSION_GATE
            for gate in (pod.get("spec") or {}).get("schedulingGates") or []
        )
        if meta(pod).get("deletionTimestamp"):
            return
        if wl is None:
            if gated:
                template = {"spec": clone(pod.get("spec") or {})}
                self._create_workload(pod, [{"name": "main", "count": 1, "template": template}])
            return
        if is_true(wl, "Evicted"):
            evicted = condition(wl, "Evicted") or {}
            self._stop_pod(
                pod,
                f"WorkloadEvictedDueTo{evicted.get('reason', '')}",
                str(evicted.get("message", "")),
            )
            return
        if gated and is_true(wl, "Admitted"):
            admission = (wl.get("status") or {}).get("admission") or {}
            updated = clone(pod)
            spec = updated["spec"]
            spec["schedulingGates"] = [
                gate
                for gate in spec.get("schedulingGates") or []
                if gate.get("name") != ADMISSION_GATE
            ]
            if not spec["schedulingGates"]:
                spec.pop("schedulingGates")
            selector = dict(spec.get("nodeSelector") or {})
            selector.update(self._flavor_node_labels(admission))
            if selector:
                spec["nodeSelector"] = selector
            if self.store.write_spec(pods, pod, updated) is not None:
                record_event(
                    self.store,
                    pod,
                    "Normal",
                    "Started",
                    f"Admitted by clusterQueue {admission.get('clusterQueue', '')}",
                )
        elif not gated and not is_true(wl, "Admitted"):
            self._stop_pod(pod, "NotAdmitted", "Not admitted by cluster queue")

    def _stop_pod(self, pod: Obj, reason: str, message: str) -> None:
        """``Pod.Stop``: the TerminationTarget condition, then the pod is deleted."""
        pods = self._rt(PODS)
        status = clone(pod.get("status") or {})
        conditions = [
            c for c in status.get("conditions") or [] if c.get("type") != TERMINATION_TARGET
        ]
        conditions.append(
            {
                "type": TERMINATION_TARGET,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": now_rfc3339(),
            }
        )
        status["conditions"] = conditions
        current = self.store.write_status(pods, pod, status) or pod
        with contextlib.suppress(StatusError):
            self.store.delete(pods, meta(current)["namespace"], meta(current)["name"])
        record_event(self.store, pod, "Normal", "Stopped", message)

    # -- the scheduler -----------------------------------------------------------------------

    def _schedule(self) -> None:
        workloads = list(self.store.objects(self._rt(WORKLOADS), None))
        cluster_queues = {
            meta(cq)["name"]: cq for cq in self.store.objects(self._rt(CLUSTER_QUEUES), None)
        }
        flavors = {
            meta(rf)["name"]: rf for rf in self.store.objects(self._rt(RESOURCE_FLAVORS), None)
        }
        local_queues = {
            (meta(lq)["namespace"], meta(lq)["name"]): lq
            for lq in self.store.objects(self._rt(LOCAL_QUEUES), None)
        }
        usage: dict[str, dict[tuple[str, str], int]] = {name: {} for name in cluster_queues}
        admitted: dict[str, list[Obj]] = {name: [] for name in cluster_queues}
        pending: dict[str, list[Obj]] = {name: [] for name in cluster_queues}
        for wl in workloads:
            status = wl.get("status") or {}
            if is_true(wl, "Finished"):
                continue
            if has_quota_reservation(wl):
                if meta(wl).get("deletionTimestamp"):
                    continue
                cq_name = str((status.get("admission") or {}).get("clusterQueue", ""))
                if cq_name in usage:
                    admitted[cq_name].append(wl)
                    for fr, value in _admission_usage(wl).items():
                        usage[cq_name][fr] = usage[cq_name].get(fr, 0) + value
                continue
            if meta(wl).get("deletionTimestamp") or (wl.get("spec") or {}).get("active") is False:
                continue
            queue = str((wl.get("spec") or {}).get("queueName") or "")
            lq = local_queues.get((meta(wl)["namespace"], queue))
            message = ""
            if lq is None:
                message = f"LocalQueue {queue} doesn't exist"
            elif str((lq.get("spec") or {}).get("stopPolicy") or "None") != "None":
                message = f"LocalQueue {queue} is inactive"
            else:
                cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
                cq = cluster_queues.get(cq_name)
                if cq is None:
                    message = f"ClusterQueue {cq_name} doesn't exist"
                elif _active(cq, flavors)[0] != "Ready":
                    message = f"ClusterQueue {cq_name} is inactive"
                else:
                    pending[cq_name].append(wl)
            if message:
                status = clone(wl.get("status") or {})
                if unset_quota_reservation(wl, status, "Inadmissible", message):
                    self._write_workload_status(wl, status)
        for cq_name, heads in pending.items():
            cq = cluster_queues[cq_name]
            heads.sort(
                key=lambda w: (
                    -priority_of(w),
                    meta(w)["creationTimestamp"],
                    self._order.get(meta(w)["uid"], 0),
                )
            )
            strict = (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
            for wl in heads:
                outcome = self._try_admit(wl, cq, flavors, usage[cq_name], admitted[cq_name])
                if outcome == "admitted":
                    continue
                if outcome == "preempting" or strict:
                    break
        self._write_queue_statuses(cluster_queues, flavors, local_queues)

    def _try_admit(
        self,
        wl: Obj,
        cq: Obj,
        flavors: dict[str, Obj],
        usage: dict[tuple[str, str], int],
        admitted: list[Obj],
    ) -> str:
        """One scheduling attempt: ``admitted``, ``preempting`` or ``pending``."""
        cq_name = meta(cq)["name"]
        assignment = _assign_flavors(wl, cq, flavors, usage)
        if assignment.fits:
            status = clone(wl.get("status") or {})
            set_quota_reservation(
                wl, status, {"clusterQueue": cq_name, "podSetAssignments": assignment.to_api()}
            )
            if self._write_workload_status(wl, status) is not None:
                for fr, value in assignment.usage.items():
                    usage[fr] = usage.get(fr, 0) + value
                admitted.append(
                    self.store.find(self._rt(WORKLOADS), meta(wl)["namespace"], meta(wl)["name"])
                    or wl
                )
            return "admitted"
        message = assignment.message()
        outcome = "pending"
        if assignment.preempt:
            targets = _preemption_targets(wl, cq, assignment, usage, admitted)
            if targets:
                for target in targets:
                    self._preempt(target, wl)
                message += f". Pending the preemption of {len(targets)} workload(s)"
                outcome = "preempting"
        status = clone(wl.get("status") or {})
        if unset_quota_reservation(wl, status, "Pending", message):
            self._write_workload_status(wl, status)
            record_event(self.store, wl, "Warning", "Pending", message)
        return outcome

    def _preempt(self, target: Obj, preemptor: Obj) -> None:
        """``Preemptor.IssuePreemptions`` for one target (once: an evicted one is left be)."""
        if is_true(target, "Evicted"):
            return
        uid = meta(preemptor).get("uid") or "UNKNOWN"
        job_uid = (meta(preemptor).get("labels") or {}).get(JOB_UID_LABEL) or "UNKNOWN"
        message = (
            f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) "
            "due to prioritization in the ClusterQueue"
        )
        now = now_rfc3339()
        status = clone(target.get("status") or {})
        set_condition(
            status, "Evicted", True, "Preempted", message, generation=_generation(target), now=now
        )
        set_condition(status, "Preempted", True, _IN_CLUSTER_QUEUE, message, now=now)
        status.pop("clusterName", None)
        status.pop("nominatedClusterNames", None)
        stats = status.setdefault("schedulingStats", {})
        evictions = stats.setdefault("evictions", [])
        for item in evictions:
            if item.get("reason") == "Preempted" and not item.get("underlyingCause"):
                item["count"] = int(item.get("count") or 0) + 1
                break
        else:
            evictions.append({"reason": "Preempted", "underlyingCause": "", "count": 1})
        if self._write_workload_status(target, status) is not None:
            record_event(self.store, target, "Normal", "EvictedDueToPreempted", message)
            record_event(self.store, target, "Normal", "Preempted", message)

    # -- queue status ------------------------------------------------------------------------

    def _write_queue_statuses(
        self,
        cluster_queues: dict[str, Obj],
        flavors: dict[str, Obj],
        local_queues: dict[tuple[str, str], Obj],
    ) -> None:
        workloads = [
            wl
            for wl in self.store.objects(self._rt(WORKLOADS), None)
            if not is_true(wl, "Finished")
        ]
        cq_of_lq = {
            key: str((lq.get("spec") or {}).get("clusterQueue") or "")
            for key, lq in local_queues.items()
        }
        for cq_name, cq in cluster_queues.items():
            reserving = [
                wl
                for wl in workloads
                if has_quota_reservation(wl)
                and ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") == cq_name
            ]
            waiting = [
                wl
                for wl in workloads
                if not has_quota_reservation(wl)
                and cq_of_lq.get(
                    (meta(wl)["namespace"], str((wl.get("spec") or {}).get("queueName")))
                )
                == cq_name
            ]
            reason, message = _active(cq, flavors)
            status = clone(cq.get("status") or {})
            status.update(
                pendingWorkloads=len(waiting),
                reservingWorkloads=len(reserving),
                admittedWorkloads=sum(1 for wl in reserving if is_true(wl, "Admitted")),
                flavorsReservation=_flavors_usage(cq, reserving, with_borrowed=True),
                flavorsUsage=_flavors_usage(
                    cq, [wl for wl in reserving if is_true(wl, "Admitted")], with_borrowed=True
                ),
            )
            set_condition(
                status, "Active", reason == "Ready", reason, message, generation=_generation(cq)
            )
            if status != cq.get("status"):
                self.store.write_status(self._rt(CLUSTER_QUEUES), cq, status)
        for key, lq in local_queues.items():
            mine = [
                wl
                for wl in workloads
                if (meta(wl)["namespace"], str((wl.get("spec") or {}).get("queueName"))) == key
            ]
            reserving = [wl for wl in mine if has_quota_reservation(wl)]
            target = cluster_queues.get(cq_of_lq[key])
            status = clone(lq.get("status") or {})
            status.update(
                pendingWorkloads=len(mine) - len(reserving),
                reservingWorkloads=len(reserving),
                admittedWorkloads=sum(1 for wl in reserving if is_true(wl, "Admitted")),
            )
            if target is not None:
                status["flavorsReservation"] = _flavors_usage(
                    target, reserving, with_borrowed=False
                )
                status["flavorUsage"] = _flavors_usage(
                    target, [wl for wl in reserving if is_true(wl, "Admitted")], with_borrowed=False
                )
            if str((lq.get("spec") or {}).get("stopPolicy") or "None") != "None":
                active = (False, "Stopped", "LocalQueue is stopped")
            elif target is None:
                active = (
                    False,
                    "ClusterQueueDoesNotExist",
                    "Can't submit new workloads to clusterQueue",
                )
            elif _active(target, flavors)[0] != "Ready":
                active = (
                    False,
                    "ClusterQueueIsInactive",
                    "Can't submit new workloads to clusterQueue",
                )
            else:
                active = (True, "Ready", "Can submit new workloads to localQueue")
            set_condition(
                status, "Active", active[0], active[1], active[2], generation=_generation(lq)
            )
            if status != lq.get("status"):
                self.store.write_status(self._rt(LOCAL_QUEUES), lq, status)


# -- flavor assignment and preemption (pure functions) -----------------------------------------


def _admission_usage(wl: Obj) -> dict[tuple[str, str], int]:
    used: dict[tuple[str, str], int] = {}
    admission = (wl.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        flavors = assignment.get("flavors") or {}
        for resource, qty in (assignment.get("resourceUsage") or {}).items():
            flavor = flavors.get(resource)
            if flavor is not None:
                key = (str(flavor), str(resource))
                used[key] = used.get(key, 0) + resource_value(resource, qty)
    return used


def _nominal(cq: Obj) -> dict[tuple[str, str], int]:
    quota: dict[tuple[str, str], int] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                quota[(str(flavor["name"]), str(res["name"]))] = resource_value(
                    str(res["name"]), res.get("nominalQuota", 0)
                )
    return quota


def _active(cq: Obj, flavors: dict[str, Obj]) -> tuple[str, str]:
    """The ClusterQueue's Active reason and message (``ClusterQueue.inactiveReason``)."""
    if meta(cq).get("deletionTimestamp"):
        return "Terminating", "Can't admit new workloads; clusterQueue is terminating"
    reasons: list[str] = []
    messages: list[str] = []
    if str((cq.get("spec") or {}).get("stopPolicy") or "None") != "None":
        reasons.append("Stopped")
        messages.append("is stopped")
    missing: list[str] = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            if flavor["name"] not in flavors and flavor["name"] not in missing:
                missing.append(str(flavor["name"]))
    if missing:
        reasons.append("FlavorNotFound")
        messages.append(f"references missing ResourceFlavor(s): {','.join(missing)}")
    if reasons:
        return reasons[0], _truncate(f"Can't admit new workloads: {', '.join(messages)}.")
    return "Ready", "Can admit new workloads"


def _flavors_usage(cq: Obj, wls: list[Obj], *, with_borrowed: bool) -> list[Obj]:
    used: dict[tuple[str, str], int] = {}
    for wl in wls:
        for fr, value in _admission_usage(wl).items():
            used[fr] = used.get(fr, 0) + value
    result: list[Obj] = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources_out = []
            for res in flavor.get("resources") or []:
                name = str(res["name"])
                item: Obj = {
                    "name": name,
                    "total": quantity_string(name, used.get((flavor["name"], name), 0)),
                }
                if with_borrowed:
                    item["borrowed"] = "0"
                resources_out.append(item)
            result.append({"name": flavor["name"], "resources": resources_out})
    return result


class _Assignment:
    """A flavor assignment for a Workload's pod sets (``flavorassigner.Assignment``)."""

    def __init__(self) -> None:
        self.pod_sets: list[tuple[str, int, dict[str, str], dict[str, int], list[str]]] = []
        self.usage: dict[tuple[str, str], int] = {}
        self.fits = True
        self.preempt = False
        #: The flavor/resources whose unused quota is short (preemption frees them).
        self.short: set[tuple[str, str]] = set()

    def message(self) -> str:
        parts = [
            f"couldn't assign flavors to pod set {name}: {', '.join(sorted(reasons))}"
            for name, _, _, _, reasons in self.pod_sets
            if reasons
        ]
        return "; ".join(parts)

    def to_api(self) -> list[Obj]:
        return [
            {
                "name": name,
                "flavors": dict(flavors),
                "resourceUsage": {
                    res: quantity_string(res, value) for res, value in sorted(total.items())
                },
                "count": count,
            }
            for name, count, flavors, total, _ in self.pod_sets
        ]


def _assign_flavors(
    wl: Obj, cq: Obj, flavors: dict[str, Obj], usage: dict[tuple[str, str], int]
) -> _Assignment:
    """``FlavorAssigner.Assign`` without cohorts: nominal quota, in the flavors' order."""
    assignment = _Assignment()
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    nominal = _nominal(cq)
    covers_pods = any("pods" in (g.get("coveredResources") or []) for g in groups)
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        count = int(pod_set.get("count", 1))
        pod_spec = (pod_set.get("template") or {}).get("spec") or {}
        requests = {res: value * count for res, value in pod_requests(pod_spec).items()}
        if covers_pods:
            requests["pods"] = count
        chosen: dict[str, str] = {}
        reasons: list[str] = []
        fits, preempt = True, False
        for res in sorted(requests):
            if res in chosen:
                continue
            group = next((g for g in groups if res in (g.get("coveredResources") or [])), None)
            if group is None:
                reasons = [f"resource {res} unavailable in ClusterQueue"]
                fits, preempt = False, False
                break
            group_requests = {
                r: v for r, v in requests.items() if r in (group.get("coveredResources") or [])
            }
            best: tuple[str, dict[str, str]] | None = None
            for flavor_ref in group.get("flavors") or []:
                fname = str(flavor_ref["name"])
                flavor = flavors.get(fname)
                if flavor is None:
                    reasons.append(f"flavor {fname} not found")
                    continue
                node_labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
                selector = pod_spec.get("nodeSelector") or {}
                if any(
                    key in node_labels and node_labels[key] != value
                    for key, value in selector.items()
                ):
                    reasons.append(f"flavor {fname} doesn't match node affinity")
                    continue
                mode = "fit"
                for r in sorted(group_requests):
                    previous = assignment.usage.get((fname, r), 0)
                    value = group_requests[r] + previous
                    quota = nominal.get((fname, r), 0)
                    available = max(0, quota - usage.get((fname, r), 0))
                    if value > quota:
                        reasons.append(
                            f"insufficient quota for {r} in flavor {fname}, previously considered "
                            f"podsets requests ({quantity_string(r, previous)}) "
                            f"+ current podset request ({quantity_string(r, group_requests[r])}) "
                            f"> maximum capacity ({quantity_string(r, quota)})"
                        )
                        mode = "nofit"
                        break
                    if value > available:
                        reasons.append(
                            f"insufficient unused quota for {r} in flavor {fname}, "
                            f"{quantity_string(r, value - available)} more needed"
                        )
                        assignment.short.add((fname, r))
                        mode = "preempt"
                if mode == "fit":
                    best = (fname, {r: fname for r in group_requests})
                    reasons = []
                    break
                if mode == "preempt" and best is None:
                    best = (fname, {r: fname for r in group_requests})
            if best is None:
                fits, preempt = False, False
                break
            chosen.update(best[1])
            if any((best[0], r) in assignment.short for r in group_requests):
                fits, preempt = False, True
        if not fits:
            assignment.fits = False
            assignment.preempt = assignment.preempt or preempt
        else:
            reasons = []
        total = {res: value for res, value in requests.items()}
        for res, value in total.items():
            if res in chosen:
                key = (chosen[res], res)
                assignment.usage[key] = assignment.usage.get(key, 0) + value
        assignment.pod_sets.append(
            (str(pod_set.get("name", "main")), count, chosen, total, reasons)
        )
    return assignment


def _preemption_targets(
    wl: Obj,
    cq: Obj,
    assignment: _Assignment,
    usage: dict[tuple[str, str], int],
    admitted: list[Obj],
) -> list[Obj]:
    """``classicalPreemptions`` within one ClusterQueue (no cohort candidates)."""
    policy = ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue", "Never")
    if policy == "Never":
        return []
    mine = priority_of(wl)
    created = meta(wl)["creationTimestamp"]
    candidates: list[Obj] = []
    for other in admitted:
        theirs = priority_of(other)
        if policy == "LowerPriority" and theirs >= mine:
            continue
        if policy == "LowerOrNewerEqualPriority":
            if theirs > mine or (theirs == mine and not created < meta(other)["creationTimestamp"]):
                continue
        if not set(_admission_usage(other)) & assignment.short:
            continue
        candidates.append(other)

    def reserved_at(other: Obj) -> str:
        found = condition(other, "QuotaReserved") or {}
        return str(found.get("lastTransitionTime") or "")

    # CandidatesOrdering: evicted first, lower priority first, most recently reserved first.
    candidates.sort(
        key=lambda o: (
            not is_true(o, "Evicted"),
            priority_of(o),
            _desc(reserved_at(o)),
            meta(o)["uid"],
        )
    )
    nominal = _nominal(cq)
    wanted = assignment.usage
    remaining = dict(usage)

    def fits() -> bool:
        return all(
            value <= nominal.get(fr, 0) - remaining.get(fr, 0)
            for fr, value in wanted.items()
            if fr in assignment.short
        )

    targets: list[Obj] = []
    for candidate in candidates:
        for fr, value in _admission_usage(candidate).items():
            remaining[fr] = remaining.get(fr, 0) - value
        targets.append(candidate)
        if fits():
            # fillBackWorkloads: give back those not needed, newest removal first.
            for index in range(len(targets) - 2, -1, -1):
                for fr, value in _admission_usage(targets[index]).items():
                    remaining[fr] = remaining.get(fr, 0) + value
                if fits():
                    targets.pop(index)
                else:
                    for fr, value in _admission_usage(targets[index]).items():
                        remaining[fr] = remaining.get(fr, 0) - value
            return targets
    return []


def _desc(text: str) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in text)
