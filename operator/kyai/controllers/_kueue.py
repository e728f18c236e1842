"""Kueue as the operator reads it: whether it is installed, and what it says of a Job or pod.

Kueue admits each queued Job (and each pod of a queued Deployment) through a Kueue
``Workload`` labelled ``kueue.x-k8s.io/job-uid=<uid of the Job or pod>``. Its conditions say
whether quota is reserved (``QuotaReserved``), whether it is admitted (``Admitted``), and
whether it was evicted (``Evicted``, reason ``Preempted`` when another workload took its
place): :func:`queue_wait` reads them into what the operator's objects say
(``WaitingForQuota`` or ``Preempted``, with Kueue's own message and since when).

The operator never writes a Kueue object: it reads Workloads (``get``/``list`` on
``workloads.kueue.x-k8s.io``). Kueue starts a Job by unsuspending it and stops it by
suspending it again; the operator leaves ``spec.suspend`` to Kueue once the Job exists.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kyai._clock import parse_time
from kyai.controllers import _conditions as c
from kyai.controllers._kube import KubeClient, KubeError
from kyai.controllers._services import Services

#: The Kueue API the operator reads (v0.14 and earlier serve Workloads as v1beta1 alone).
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta1"
#: The label Kueue puts on a Workload: the uid of the Job or pod it admits.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: The scheduling gate holding a queued pod until Kueue admits it.
ADMISSION_GATE = "kueue.x-k8s.io/admission"
#: The pod condition Kueue sets on a pod it evicts (then deletes it).
TERMINATION_TARGET = "TerminationTarget"
#: How long "is Kueue installed" is believed before the API is asked again.
DISCOVERY_TTL_SECONDS = 60.0
#: What a queued Job or pod says before Kueue has made its Workload. Kueue makes it within
#: seconds of the Job or pod; when it never does, Kueue skips or cannot compose it: the
#: WorkloadPriorityClass the priority-class label names does not exist, or the kind is not in
#: Kueue's ``integrations.frameworks`` (``batch/job``; ``pod`` and ``deployment`` for engine
#: pods), or (pod-based integrations only: engine pods) its ``managedJobsNamespaceSelector``
#: exempts the namespace. A queue name no LocalQueue can have never gets this far
#: (:func:`kyai.builders.queue.queue_label_problem`: the object is Stalled first).
NO_WORKLOAD_YET = (
    "Kueue has not made its Workload yet (it does within seconds; if it never does, check "
    "that the WorkloadPriorityClass named by kueue.x-k8s.io/priority-class exists, that "
    "Kueue's integrations.frameworks include batch/job (pod and deployment for engine pods), "
    "and for engine pods that its managedJobsNamespaceSelector takes this namespace)"
)

_installed: weakref.WeakKeyDictionary[KubeClient, tuple[bool, float]] = weakref.WeakKeyDictionary()


async def installed(svc: Services) -> bool:
    """Whether the cluster serves Kueue's API (its CRDs), asked at most once a minute.

    Without it a queued Job is not suspended (nothing would ever start it) and nothing is
    looked up: the operator works as on a cluster without Kueue.
    """
    known = _installed.get(svc.kube)
    if known is not None and time.monotonic() < known[1]:
        return known[0]
    try:
        await svc.kube.request("GET", KUEUE_API)
        found = True
    except KubeError as exc:
        if exc.status != 404:
            raise
        found = False
    _installed[svc.kube] = (found, time.monotonic() + DISCOVERY_TTL_SECONDS)
    return found


async def workload_for(svc: Services, namespace: str, uid: str) -> dict[str, Any] | None:
    """The Kueue Workload admitting the Job or pod ``uid`` (the newest if several), if any."""
    found = await svc.kube.request(
        "GET",
        f"{KUEUE_API}/namespaces/{namespace}/workloads",
        params={"labelSelector": f"{JOB_UID_LABEL}={uid}"},
    )
    items: list[dict[str, Any]] = list(found.get("items") or [])
    if not items:
        return None
    return max(items, key=lambda item: str(item["metadata"].get("creationTimestamp") or ""))


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def _true(condition: Mapping[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "True"


@dataclass(frozen=True)
class QueueWait:
    """Why Kueue holds a Job or pod: ``WaitingForQuota`` or ``Preempted``, its words, since."""

    reason: str
    kueue: str
    """Kueue's own message (its Workload's conditions)."""
    since: datetime | None
    """When the wait began as Kueue's conditions say (None: not known)."""
    workload: str | None = None
    """The Kueue Workload's name (None: Kueue has not made it yet)."""


def queue_wait(workload: Mapping[str, Any] | None) -> QueueWait | None:
    """What Kueue's Workload says of its Job or pod; None once admitted (or finished).

    Evicted (``Evicted`` True, e.g. ``Preempted``): the eviction's message, then what holds
    it now (``QuotaReserved``'s Pending message); the eviction message stays in ``Evicted``
    until the Workload is admitted again. Otherwise ``QuotaReserved`` False: its message
    ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu
    in flavor default-flavor, 1 more needed", "LocalQueue team doesn't exist").
    """
    if workload is None:
        return QueueWait(c.WAITING_FOR_QUOTA, NO_WORKLOAD_YET, None)
    name = str((workload.get("metadata") or {}).get("name") or "")
    if _true(_condition(workload, "Finished")):
        return None
    evicted = _condition(workload, "Evicted")
    reserved = _condition(workload, "QuotaReserved")
    admitted = _condition(workload, "Admitted")
    pending = str((reserved or {}).get("message") or "") if not _true(reserved) else ""
    if _true(evicted):
        assert evicted is not None
        told = str(evicted.get("message") or evicted.get("reason") or "evicted")
        if pending and pending != told:
            told = f"{told}; now: {pending}"
        reason = c.PREEMPTED if evicted.get("reason") == "Preempted" else c.WAITING_FOR_QUOTA
        if reason != c.PREEMPTED:
            told = f"evicted by Kueue ({evicted.get('reason')}): {told}"
        return QueueWait(reason, told, parse_time(evicted.get("lastTransitionTime")), name)
    if _true(admitted):
        return None
    created = parse_time((workload.get("metadata") or {}).get("creationTimestamp"))
    if _true(reserved):
        assert reserved is not None
        since = parse_time(reserved.get("lastTransitionTime")) or created
        return QueueWait(
            c.WAITING_FOR_QUOTA, "quota reserved; waiting for Kueue's admission checks", since, name
        )
    since = parse_time((reserved or {}).get("lastTransitionTime")) or created
    return QueueWait(c.WAITING_FOR_QUOTA, pending or "Kueue has not considered it yet", since, name)


def waited(since: datetime | None, now: datetime | None = None) -> str:
    """How long a wait has lasted, coarsely (so that a status is rewritten once a minute)."""
    if since is None:
        return ""
    seconds = ((now or datetime.now(UTC)) - since).total_seconds()
    if seconds < 60:
        return "for less than a minute"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"for {minutes} min"
    return f"for {minutes // 60} h {minutes % 60} min"


def describe(wait: QueueWait, what: str, queue: str | None, now: datetime | None = None) -> str:
    """The message of an object held by Kueue: what waits, in which queue, Kueue's words."""
    where = f" in LocalQueue {queue}" if queue else ""
    how_long = waited(wait.since, now)
    tail = f" ({how_long})" if how_long else ""
    if wait.reason == c.PREEMPTED:
        return (
            f"{what} was preempted by Kueue{where}: {wait.kueue}; it goes on from what it "
            f"stored once Kueue admits it again{tail}"
        )
    return f"{what} waits for Kueue to admit it{where}: {wait.kueue}{tail}"


def gated(pod: Mapping[str, Any]) -> bool:
    """Whether a pod waits for Kueue's admission (its ``kueue.x-k8s.io/admission`` gate)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == ADMISSION_GATE for gate in gates)


def evicted_message(pod: Mapping[str, Any]) -> str | None:
    """Kueue's message on a pod it evicts (``TerminationTarget`` True), else None."""
    condition = _condition(pod, TERMINATION_TARGET)
    if not _true(condition):
        return None
    assert condition is not None
    return str(condition.get("message") or condition.get("reason") or "evicted by Kueue")
