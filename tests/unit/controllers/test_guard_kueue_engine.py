"""A served engine Kueue preempts says Preempted, though Kueue deletes the pod at once (issue 45).

Kueue marks the evicted engine pod (``TerminationTarget``) and deletes it; a reconcile that
lists the pods after sees only the gated replacement, whose new Kueue Workload knows nothing
of the eviction. The pod event passes the evicted pod to the reconcile (read beside the
list), and a gated replacement of an engine the Workload already says was preempted stays
``Preempted`` until Kueue admits it again.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from kyai.api import WorkloadStatus
from kyai.controllers import _conditions as c
from kyai.controllers import _kueue as kueue
from kyai.controllers import workload as controller

sys.path.insert(0, str(Path(__file__).parent))
from test_engine_pods import engine_pod
from test_kueue import EVICTED, PENDING, KueueKube, kueue_workload
from test_worker_pods import NS, obj, world

QUEUE = {"kueue.x-k8s.io/queue-name": "team"}


def served(**status: Any) -> dict[str, Any]:
    workload = obj("Workload", "cand", {"framework": "vllm", "model": "org/m"}, status)
    workload["metadata"]["labels"] = dict(QUEUE)
    return workload


def evicted_pod() -> dict[str, Any]:
    pod = engine_pod("cand-engine-old")
    pod["metadata"]["uid"] = "old"
    pod["metadata"]["labels"].update(QUEUE)
    pod["status"]["conditions"] = [
        {"type": "TerminationTarget", "status": "True", "reason": "StoppedByKueue",
         "message": EVICTED},
    ]  # fmt: skip
    return pod


def gated_pod(kube: KueueKube) -> dict[str, Any]:
    pod = engine_pod("cand-engine-new")
    pod["metadata"]["uid"] = "new"
    pod["metadata"]["labels"].update(QUEUE)
    pod["spec"] = {"schedulingGates": [{"name": kueue.ADMISSION_GATE}]}
    kube.kueue["new"] = kueue_workload(("QuotaReserved", "False", "Pending", PENDING))
    return pod


def kueue_world(*objects: dict[str, Any]) -> tuple[Any, KueueKube]:
    svc, _ = world()
    kube = KueueKube(*objects)
    svc.kube = kube  # type: ignore[assignment]
    return svc, kube


def ready(kube: KueueKube) -> tuple[str, str, str]:
    status = WorkloadStatus.model_validate(kube.objects[("Workload", NS, "cand")]["status"])
    found = status.condition(c.READY)
    assert found is not None
    return found.status, found.reason, found.message


async def test_the_evicted_pod_of_the_event_is_read_though_it_is_gone_from_the_list() -> None:
    svc, kube = kueue_world(served())
    kube.put(gated_pod(kube))  # the list holds the replacement only: Kueue deleted the old one
    await controller.reconcile_workload(svc, NS, "cand", pod=evicted_pod())
    status, reason, message = ready(kube)
    assert (status, reason) == ("False", c.PREEMPTED)
    assert message.startswith("the engine's pod cand-engine-old was preempted by Kueue"), message
    # Without the event's pod, the list alone says the replacement waits for quota.
    svc, kube = kueue_world(served())
    kube.put(gated_pod(kube))
    await controller.reconcile_workload(svc, NS, "cand")
    assert ready(kube)[1] == c.WAITING_FOR_QUOTA


async def test_an_engine_said_preempted_stays_preempted_until_kueue_admits_it_again() -> None:
    preempted = {"conditions": [{
        "type": "Ready", "status": "False", "reason": c.PREEMPTED, "message": "preempted",
        "lastTransitionTime": "2026-12-05T00:00:00Z"}]}  # fmt: skip
    svc, kube = kueue_world(served(**preempted))
    kube.put(gated_pod(kube))
    await controller.reconcile_workload(svc, NS, "cand")
    status, reason, message = ready(kube)
    assert (status, reason) == ("False", c.PREEMPTED)
    assert message.startswith("the engine (now the engine's pod cand-engine-new) was preempted")
    # Admitted again: no longer held by Kueue.
    kube.kueue["new"] = kueue_workload(
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
    )
    body = copy.deepcopy(kube.objects[("Workload", NS, "cand")])
    await controller.WorkloadReconciler(svc, body).reconcile()
    assert ready(kube)[1] != c.PREEMPTED
