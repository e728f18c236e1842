"""The Kueue emulation of ``kyai devcluster --kueue`` (Kueue v0.14.8's names and messages)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devcluster.helpers import Api, job
from kyai_devcluster import DevCluster

Obj = dict[str, Any]

KUEUE = "/apis/kueue.x-k8s.io/v1beta1"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"
WORKLOADS = f"{KUEUE}/namespaces/default/workloads"
GPU = "nvidia.com/gpu"


@pytest.fixture
async def kueue(tmp_path: Path) -> AsyncIterator[Api]:
    async with (
        DevCluster(
            workdir=tmp_path / "work", bookmark_interval=0.2, job_backoff_seconds=0.05, kueue=True
        ) as running,
        aiohttp.ClientSession() as session,
    ):
        yield Api(session, running.url)


def expected_workload_name(kind: str, group: str, name: str, uid: str) -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK, spelled out independently."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()
    return f"{kind.lower()}-{name}-{digest[:5]}"


async def setup_queues(
    api: Api, *, gpus: int = 2, preemption: str = "Never", node_labels: Obj | None = None
) -> None:
    flavor: Obj = {"metadata": {"name": "default-flavor"}, "spec": {}}
    if node_labels:
        flavor["spec"]["nodeLabels"] = node_labels
    await api.ok("POST", f"{KUEUE}/resourceflavors", flavor)
    await api.ok(
        "POST",
        f"{KUEUE}/clusterqueues",
        {
            "metadata": {"name": "cluster-queue"},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": preemption},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [{"name": GPU, "nominalQuota": gpus}],
                            }
                        ],
                    }
                ],
            },
        },
    )
    await api.ok(
        "POST",
        f"{KUEUE}/namespaces/default/localqueues",
        {"metadata": {"name": "team"}, "spec": {"clusterQueue": "cluster-queue"}},
    )
    for name, value in (("low", 10), ("high", 1000)):
        await api.ok(
            "POST",
            f"{KUEUE}/workloadpriorityclasses",
            {"metadata": {"name": name}, "value": value},
        )


def gpu_job(name: str, flag: Path, *, queue: str = "team", priority: str | None = None) -> Obj:
    """A queued Job with one 1-GPU pod that runs until ``flag`` exists."""
    body = job(
        name,
        command=["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done"],
        resources={"limits": {GPU: "1"}},
    )
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    body["metadata"]["labels"] = labels
    return body


def cond(obj: Obj, kind: str) -> Obj:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item["type"] == kind:
            return dict(item)
    return {}


async def workload_of(api: Api, created: Obj) -> Obj:
    name = expected_workload_name(
        created["kind"],
        created["apiVersion"].rpartition("/")[0],
        created["metadata"]["name"],
        created["metadata"]["uid"],
    )
    return await api.wait_for(f"{WORKLOADS}/{name}", lambda wl: True)


async def wait_condition(api: Api, wl: Obj, kind: str, status: str, reason: str = "") -> Obj:
    def ok(current: Obj) -> bool:
        found = cond(current, kind)
        return found.get("status") == status and (not reason or found.get("reason") == reason)

    return await api.wait_for(f"{WORKLOADS}/{wl['metadata']['name']}", ok)


async def running_pods(api: Api, job_name: str) -> list[Obj]:
    _, pods = await api.get(PODS, params={"labelSelector": f"job-name={job_name}"})
    return [p for p in pods["items"] if p["status"].get("phase") == "Running"]


async def test_without_kueue_there_are_no_kueue_crds(api: Api) -> None:
    status, _ = await api.get(f"{KUEUE}/clusterqueues")
    assert status == 404
    status, crds = await api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    assert not [c for c in crds["items"] if c["spec"]["group"] == "kueue.x-k8s.io"]


async def test_crds_reject_an_invalid_cluster_queue(kueue: Api) -> None:
    status, body = await kueue.post(
        f"{KUEUE}/clusterqueues",
        {"metadata": {"name": "bad"}, "spec": {"queueingStrategy": "Sometimes"}},
    )
    assert status == 422, body
    assert (
        'spec.queueingStrategy: Unsupported value: "Sometimes": supported values: '
        '"StrictFIFO", "BestEffortFIFO"' in body["message"]
    )


async def test_quota_admits_two_of_three_then_the_third(kueue: Api, tmp_path: Path) -> None:
    await setup_queues(kueue, gpus=2, node_labels={"gpu": "a100"})
    flags = [tmp_path / f"done-{i}" for i in range(3)]
    created = []
    for i, flag in enumerate(flags):
        created.append(await kueue.ok("POST", JOBS, gpu_job(f"train-{i}", flag)))
    # The webhook suspended every queued Job at creation.
    assert all(c["spec"]["suspend"] is True for c in created)
    wls = [await workload_of(kueue, c) for c in created]
    for wl, c in zip(wls, created, strict=True):
        assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == c["metadata"]["uid"]
        owner = wl["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "Job",
            c["metadata"]["uid"],
            True,
        )
        assert wl["spec"]["queueName"] == "team"
        assert wl["spec"]["podSets"][0]["name"] == "main"
        assert wl["spec"]["podSets"][0]["count"] == 1
    for wl in wls[:2]:
        admitted = await wait_condition(kueue, wl, "Admitted", "True", "Admitted")
        assert cond(admitted, "QuotaReserved")["message"] == (
            "Quota reserved in ClusterQueue cluster-queue"
        )
        assert admitted["status"]["admission"] == {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {GPU: "default-flavor"},
                    "resourceUsage": {GPU: "1"},
                    "count": 1,
                }
            ],
        }
    pending = await wait_condition(kueue, wls[2], "QuotaReserved", "False", "Pending")
    assert cond(pending, "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor default-flavor, 1 more needed"
    )
    assert not cond(pending, "Admitted")
    for c in created[:2]:
        running = await kueue.wait_for(
            f"{JOBS}/{c['metadata']['name']}", lambda j: j["spec"]["suspend"] is False
        )
        # The flavor's nodeLabels went to the pod template on admission.
        assert running["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    _, third = await kueue.get(f"{JOBS}/train-2")
    assert third["spec"]["suspend"] is True
    await kueue.wait_for(
        f"{KUEUE}/clusterqueues/cluster-queue",
        lambda q: (
            (q["status"].get("admittedWorkloads"), q["status"].get("pendingWorkloads")) == (2, 1)
        ),
    )
    await kueue.wait_for(
        f"{KUEUE}/namespaces/default/localqueues/team",
        lambda q: (
            q["status"].get("admittedWorkloads") == 2
            and q["status"]["flavorUsage"]
            == [{"name": "default-flavor", "resources": [{"name": GPU, "total": "2"}]}]
        ),
    )
    # The first Job finishes: its Workload is Finished and the third is admitted.
    flags[0].touch()
    finished = await wait_condition(kueue, wls[0], "Finished", "True", "Succeeded")
    assert cond(finished, "Finished")["message"] == "Reached expected number of succeeded pods"
    await wait_condition(kueue, wls[2], "Admitted", "True")
    await kueue.wait_for(f"{JOBS}/train-2", lambda j: j["spec"]["suspend"] is False)
    for flag in flags[1:]:
        flag.touch()


async def test_priority_then_creation_order(kueue: Api, tmp_path: Path) -> None:
    await setup_queues(kueue, gpus=1)
    blocker_flag = tmp_path / "blocker"
    blocker = await kueue.ok("POST", JOBS, gpu_job("blocker", blocker_flag))
    await wait_condition(kueue, await workload_of(kueue, blocker), "Admitted", "True")
    flags = {name: tmp_path / name for name in ("low-a", "high", "low-b")}
    wls = {}
    for name, priority in (("low-a", "low"), ("high", "high"), ("low-b", "low")):
        created = await kueue.ok("POST", JOBS, gpu_job(name, flags[name], priority=priority))
        wls[name] = await workload_of(kueue, created)
    assert wls["high"]["spec"]["priority"] == 1000
    assert wls["high"]["spec"]["priorityClassName"] == "high"
    assert wls["high"]["spec"]["priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
    assert wls["low-a"]["spec"]["priority"] == 10
    order = []
    release = blocker_flag
    for _ in range(3):
        release.touch()

        done = None
        while done is None:
            for name, wl in wls.items():
                if name in order:
                    continue
                _, current = await kueue.get(f"{WORKLOADS}/{wl['metadata']['name']}")
                if cond(current, "Admitted").get("status") == "True":
                    done = name
                    break
        order.append(done)
        release = flags[done]
    assert order == ["high", "low-a", "low-b"]
    flags["low-b"].touch()


async def test_preemption_within_the_cluster_queue(kueue: Api, tmp_path: Path) -> None:
    await setup_queues(kueue, gpus=1, preemption="LowerPriority")
    low_flag, high_flag = tmp_path / "low", tmp_path / "high"
    low = await kueue.ok("POST", JOBS, gpu_job("low", low_flag, priority="low"))
    low_wl = await workload_of(kueue, low)
    await wait_condition(kueue, low_wl, "Admitted", "True")
    await kueue.wait_for(PODS, lambda pods: bool(pods["items"]))
    high = await kueue.ok("POST", JOBS, gpu_job("high", high_flag, priority="high"))
    high_wl = await workload_of(kueue, high)
    message = (
        f"Preempted to accommodate a workload (UID: {high_wl['metadata']['uid']}, "
        f"JobUID: {high['metadata']['uid']}) due to prioritization in the ClusterQueue"
    )
    evicted = await wait_condition(kueue, low_wl, "Evicted", "True", "Preempted")
    assert cond(evicted, "Evicted")["message"] == message
    assert cond(evicted, "Preempted")["reason"] == "InClusterQueue"
    assert cond(evicted, "Preempted")["message"] == message
    # The low Job is suspended, its pods go, its quota is released and it is requeued.
    await kueue.wait_for(f"{JOBS}/low", lambda j: j["spec"]["suspend"] is True)
    # (QuotaReserved False "Pending" first carries the eviction message, then the scheduler's.)
    requeued = await wait_condition(kueue, low_wl, "QuotaReserved", "False", "Pending")
    assert cond(requeued, "Requeued")["status"] == "True"
    assert cond(requeued, "Requeued")["reason"] == "Preempted"
    assert cond(requeued, "Requeued")["message"] == message
    assert cond(requeued, "Admitted")["reason"] == "NoReservation"
    assert "admission" not in requeued["status"]
    await kueue.wait_for(
        f"{JOBS}/low",
        lambda j: (
            j["status"].get("active", 0) == 0 and cond(j, "Suspended").get("status") == "True"
        ),
    )
    await wait_condition(kueue, high_wl, "Admitted", "True")
    await kueue.wait_for(f"{JOBS}/high", lambda j: j["spec"]["suspend"] is False)
    _, low_now = await kueue.get(f"{WORKLOADS}/{low_wl['metadata']['name']}")
    assert cond(low_now, "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor default-flavor, 1 more needed"
    )
    # The high one finishes: the low one is admitted again and resumes.
    high_flag.touch()
    readmitted = await wait_condition(kueue, low_wl, "Admitted", "True")
    assert cond(readmitted, "Evicted")["status"] == "False"
    assert cond(readmitted, "Evicted")["reason"] == "QuotaReserved"
    assert cond(readmitted, "Evicted")["message"] == f"Previously: {message}"
    resumed = await kueue.wait_for(f"{JOBS}/low", lambda j: j["spec"]["suspend"] is False)
    assert resumed["metadata"]["name"] == "low"
    await kueue.wait_for(
        f"{JOBS}/low", lambda j: cond(j, "Suspended").get("reason") == "JobResumed"
    )
    low_flag.touch()
    await wait_condition(kueue, low_wl, "Finished", "True", "Succeeded")


async def test_unlabelled_job_and_missing_local_queue(kueue: Api, tmp_path: Path) -> None:
    await setup_queues(kueue)
    plain = await kueue.ok("POST", JOBS, job("plain", command=["true"]))
    assert plain["spec"]["suspend"] is False
    await kueue.wait_for(f"{JOBS}/plain", lambda j: cond(j, "Complete").get("status") == "True")
    _, wls = await kueue.get(WORKLOADS)
    assert not [
        w
        for w in wls["items"]
        if w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == plain["metadata"]["uid"]
    ]
    lost = await kueue.ok("POST", JOBS, gpu_job("lost", tmp_path / "never", queue="nope"))
    wl = await workload_of(kueue, lost)
    inadmissible = await wait_condition(kueue, wl, "QuotaReserved", "False", "Inadmissible")
    assert cond(inadmissible, "QuotaReserved")["message"] == "LocalQueue nope doesn't exist"


def gpu_pod(name: str, flag: Path) -> Obj:
    return {
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "team"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "ghcr.io/kyai-io/kyai-operator:test",
                    "command": ["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done"],
                    "resources": {"limits": {GPU: "1"}},
                }
            ],
        },
    }


async def test_queued_pod_is_gated_until_admitted(kueue: Api, tmp_path: Path) -> None:
    await setup_queues(kueue, gpus=1)
    flags = [tmp_path / "a", tmp_path / "b"]
    first = await kueue.ok("POST", PODS, gpu_pod("first", flags[0]))
    second = await kueue.ok("POST", PODS, gpu_pod("second", flags[1]))
    for pod in (first, second):
        assert pod["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
        assert "nodeName" not in pod["spec"]
    first_wl = await workload_of(kueue, first)
    assert first_wl["metadata"]["name"].startswith("pod-first-")
    await wait_condition(kueue, first_wl, "Admitted", "True")
    await kueue.wait_for(
        f"{PODS}/first",
        lambda p: not p["spec"].get("schedulingGates") and p["status"].get("phase") == "Running",
    )
    gated = await kueue.wait_for(
        f"{PODS}/second", lambda p: cond(p, "PodScheduled").get("reason") == "SchedulingGated"
    )
    assert gated["status"]["phase"] == "Pending"
    assert cond(gated, "PodScheduled") | {"lastTransitionTime": None} == {
        "type": "PodScheduled",
        "status": "False",
        "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
        "lastProbeTime": None,
        "lastTransitionTime": None,
    }
    flags[0].touch()
    await kueue.wait_for(
        f"{PODS}/second",
        lambda p: not p["spec"].get("schedulingGates") and p["status"].get("phase") == "Running",
    )
    flags[1].touch()


async def test_deployment_pods_admitted_one_by_one(kueue: Api, tmp_path: Path) -> None:
    await setup_queues(kueue, gpus=2)
    flag = tmp_path / "never"
    pod = gpu_pod("x", flag)
    deployment = {
        "metadata": {"name": "engine", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "engine"}},
            "template": {
                "metadata": {"labels": {"app": "engine"}},
                "spec": {**pod["spec"], "restartPolicy": "Always"},
            },
        },
    }
    created = await kueue.ok("POST", "/apis/apps/v1/namespaces/default/deployments", deployment)
    template = created["spec"]["template"]["metadata"]
    assert template["labels"]["kueue.x-k8s.io/queue-name"] == "team"
    assert template["annotations"]["kueue.x-k8s.io/pod-suspending-parent"] == "deployment"

    def split(pods: Obj) -> bool:
        items = pods["items"]
        running = [p for p in items if p["status"].get("phase") == "Running"]
        gated = [p for p in items if p["spec"].get("schedulingGates")]
        return len(items) == 3 and len(running) == 2 and len(gated) == 1

    await kueue.wait_for(PODS, split, timeout=20)
    _, wls = await kueue.get(WORKLOADS)
    admitted = [w for w in wls["items"] if cond(w, "Admitted").get("status") == "True"]
    assert len(wls["items"]) == 3 and len(admitted) == 2
    flag.touch()
