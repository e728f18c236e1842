"""The Workload controller on several nodes: a LeaderWorkerSet, or why there is none.

Against the in-memory API of test_worker_pods (a LeaderWorkerSet's POST answers 404 where
its CRD is missing, as the API server does); ``/v1/models`` is answered by a stub. The
groups' real behaviour (Ray, ranks, recreation) is tested against the devcluster's LWS in
tests/system/test_multinode.py.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.api import WorkloadStatus
from kyai.controllers import workload as controller
from kyai.controllers._kube import KubeError

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, MemoryKube, obj, world


@pytest.fixture(autouse=True)
def models(monkeypatch: pytest.MonkeyPatch) -> None:
    async def probe(url: str, *, api_key: str | None) -> list[dict[str, Any]]:
        return [{"id": "Qwen/Qwen3-8B", "max_model_len": 8192}]

    monkeypatch.setattr(controller, "probe_models", probe)


class NoLeaderWorkerSet(MemoryKube):
    """A cluster without LeaderWorkerSet's CRD: its resource is not served."""

    async def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if obj["kind"] == "LeaderWorkerSet":
            raise KubeError("POST .../leaderworkersets: HTTP 404: not found", status=404)
        return await super().create(obj)


def setup(
    kube: MemoryKube, args: dict[str, Any], *, nodes: int = 2, framework: str = "vllm"
) -> None:
    kube.put(obj("EngineArgsSet", "flags", {"framework": framework, "args": args}, {}))
    spec = {"framework": framework, "model": "Qwen/Qwen3-8B", "nodes": nodes,
            "resources": {"gpus": 1}, "engineArgsSetRef": {"name": "flags"}}  # fmt: skip
    kube.put(obj("Workload", "big", spec, {}))


async def reconcile(svc: Any, kube: MemoryKube) -> WorkloadStatus:
    body = copy.deepcopy(kube.objects[("Workload", NS, "big")])
    await controller.WorkloadReconciler(svc, body).reconcile()
    return WorkloadStatus.model_validate(kube.objects[("Workload", NS, "big")]["status"])


def condition(status: WorkloadStatus, type_: str) -> tuple[str, str]:
    found = status.condition(type_)
    assert found is not None
    return found.status, found.reason


def made(kube: MemoryKube) -> set[tuple[str, str]]:
    return {(kind, name) for kind, _, name in kube.objects if kind not in
            ("Workload", "EngineArgsSet", "Snapshot")}  # fmt: skip


def swap(kube: MemoryKube, cls: type[MemoryKube]) -> MemoryKube:
    kube.__class__ = cls
    return kube


async def test_without_the_crd_the_workload_says_the_cluster_lacks_leader_worker_set() -> None:
    svc, kube = world()
    swap(kube, NoLeaderWorkerSet)
    setup(kube, {"pipeline-parallel-size": 2})
    before = made(kube)
    status = await reconcile(svc, kube)
    assert status.phase == "Pending"
    assert condition(status, "Ready") == ("False", "LeaderWorkerSetNotInstalled")
    assert condition(status, "Stalled") == ("True", "LeaderWorkerSetNotInstalled")
    assert status.message is not None
    assert "lacks LeaderWorkerSet" in status.message and "spec.nodes is 2" in status.message
    # Nothing else changes: no Service, no Deployment, nothing deleted.
    assert made(kube) == before and kube.deleted == []


async def test_parallel_sizes_that_do_not_fit_are_stalled_before_anything_is_made() -> None:
    svc, kube = world()
    setup(kube, {"tensor-parallel-size": 4})
    before = made(kube)
    status = await reconcile(svc, kube)
    assert status.phase == "Failed"
    assert condition(status, "Stalled") == ("True", "InvalidSpec")
    assert status.message is not None and "--tensor-parallel-size 4" in status.message
    assert made(kube) == before


async def test_a_group_set_is_deploying_until_a_group_is_ready_then_ready() -> None:
    svc, kube = world()
    setup(kube, {"tensor-parallel-size": 1, "pipeline-parallel-size": 2})
    status = await reconcile(svc, kube)
    assert status.phase == "Deploying" and (status.ready_groups, status.ready_replicas) == (0, 0)
    assert {("LeaderWorkerSet", "big-lws"), ("Service", "big-engine")} <= made(kube)
    assert ("Deployment", "big-engine") not in made(kube)
    kube.objects[("LeaderWorkerSet", NS, "big-lws")]["status"] = {"readyReplicas": 1}
    status = await reconcile(svc, kube)
    assert status.phase == "Ready" and status.ready_groups == 1, status.message
    assert status.endpoint == f"http://big-engine.{NS}.svc:8000/v1"
    # A pod failed: LWS recreates the group, none is ready, the Workload is Deploying.
    kube.objects[("LeaderWorkerSet", NS, "big-lws")]["status"] = {"readyReplicas": 0}
    status = await reconcile(svc, kube)
    assert status.phase == "Deploying" and status.ready_groups == 0


async def test_from_one_node_to_two_and_back_the_other_kind_goes() -> None:
    svc, kube = world()
    setup(kube, {}, nodes=1)
    await reconcile(svc, kube)
    assert ("Deployment", "big-engine") in made(kube)
    spec = kube.objects[("Workload", NS, "big")]["spec"]
    spec["nodes"] = 2
    kube.put(obj("EngineArgsSet", "flags", {"framework": "vllm", "args": {"pp": 2}}, {}))
    await reconcile(svc, kube)
    assert ("Deployment", "big-engine") in kube.deleted
    assert ("LeaderWorkerSet", "big-lws") in made(kube)
    selector = kube.objects[("Service", NS, "big-engine")]["spec"]["selector"]
    assert selector["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    spec["nodes"] = 1
    status = await reconcile(svc, kube)
    assert ("LeaderWorkerSet", "big-lws") in kube.deleted
    assert ("Deployment", "big-engine") in made(kube)
    selector = kube.objects[("Service", NS, "big-engine")]["spec"]["selector"]
    assert "leaderworkerset.sigs.k8s.io/worker-index" not in selector
    assert status.ready_groups is None


async def test_a_crashing_pod_of_a_group_is_on_the_workload() -> None:
    svc, kube = world()
    setup(kube, {"tensor-parallel-size": 1, "pipeline-parallel-size": 2})
    await reconcile(svc, kube)
    # The group's worker (not its leader) exits and restarts: the Workload says so.
    labels = kube.objects[("LeaderWorkerSet", NS, "big-lws")]["spec"]["leaderWorkerTemplate"][
        "workerTemplate"
    ]["metadata"]["labels"]
    terminated = {"exitCode": 1, "reason": "Error", "message": "ray: cannot reach the head"}
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "big-lws-0-1", "namespace": NS, "labels": dict(labels)},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "engine",
                        "ready": False,
                        "restartCount": 1,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": terminated},
                    },
                ],
            },
        }
    )
    status = await reconcile(svc, kube)
    assert status.phase == "Deploying"
    assert condition(status, "Ready") == ("False", "EngineCrashing")
    assert status.message is not None and "pod big-lws-0-1 exited with code 1" in status.message
    assert "ray: cannot reach the head" in status.message
