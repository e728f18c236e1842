"""A multi-node Workload with several replicas: readiness is counted in whole groups.

Issue 45, item 11. A replica on several nodes is a LeaderWorkerSet group; the set's
``status.readyReplicas`` counts the groups whose leader and workers are all ready. The Workload
reads that count (never pods, never the set's ``replicas``): ready pods spread over groups that
are each still missing one are no ready group, and ``readyGroups``/``readyReplicas`` say
groups. Against the in-memory API of test_worker_pods, as test_multinode_workload.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.controllers import workload as controller

sys.path.insert(0, str(Path(__file__).parent))
from test_multinode_workload import reconcile
from test_worker_pods import NS, MemoryKube, obj, world

GROUP_SET = ("LeaderWorkerSet", NS, "big-lws")


@pytest.fixture(autouse=True)
def models(monkeypatch: pytest.MonkeyPatch) -> None:
    async def probe(url: str, *, api_key: str | None) -> list[dict[str, Any]]:
        return [{"id": "Qwen/Qwen3-8B", "max_model_len": 8192}]

    monkeypatch.setattr(controller, "probe_models", probe)


def setup(kube: MemoryKube) -> None:
    kube.put(obj("EngineArgsSet", "flags", {"framework": "vllm", "args": {"pp": 2}}, {}))
    spec = {"framework": "vllm", "model": "Qwen/Qwen3-8B", "nodes": 2, "replicas": 3,
            "resources": {"gpus": 1}, "engineArgsSetRef": {"name": "flags"}}  # fmt: skip
    kube.put(obj("Workload", "big", spec, {}))


def ready_pod(kube: MemoryKube, group: int, index: int) -> None:
    """A running, ready engine pod ``big-lws-<group>-<index>`` (0: the group's leader)."""
    template = kube.objects[GROUP_SET]["spec"]["leaderWorkerTemplate"]
    side = "leaderTemplate" if index == 0 else "workerTemplate"
    labels = dict(template.get(side, template["workerTemplate"])["metadata"]["labels"])
    name = f"big-lws-{group}" + (f"-{index}" if index else "")
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "engine", "ready": True, "restartCount": 0, "state": {"running": {}}},
                ],
            },
        }
    )


async def test_groups_are_deploying_while_no_group_is_whole_then_counted_by_groups() -> None:
    svc, kube = world()
    setup(kube)
    status = await reconcile(svc, kube)
    assert status.phase == "Deploying" and (status.ready_groups, status.ready_replicas) == (0, 0)
    assert kube.objects[GROUP_SET]["spec"]["replicas"] == 3
    # Three of the six pods are ready, one of each group: no group is ready, and
    # LeaderWorkerSet says so (readyReplicas 0 of replicas 3).
    for group, index in ((0, 0), (1, 1), (2, 0)):
        ready_pod(kube, group, index)
    kube.objects[GROUP_SET]["status"] = {"replicas": 3, "readyReplicas": 0, "updatedReplicas": 3}
    status = await reconcile(svc, kube)
    assert status.phase == "Deploying", status.message
    assert (status.ready_groups, status.ready_replicas) == (0, 0)
    assert status.message is not None
    assert "(0/3 groups of 2 pods ready, LeaderWorkerSet big-lws;" in status.message
    ready_cond = status.condition("Ready")
    assert ready_cond is not None and ready_cond.status == "False"
    # One group whole: counted as one (not as its two pods, nor as the set's replicas).
    ready_pod(kube, 0, 1)
    kube.objects[GROUP_SET]["status"] = {"replicas": 3, "readyReplicas": 1, "updatedReplicas": 3}
    status = await reconcile(svc, kube)
    assert (status.ready_groups, status.ready_replicas) == (1, 1)
    # Every group whole: Ready, three groups and three replicas (six pods).
    kube.objects[GROUP_SET]["status"] = {"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3}
    status = await reconcile(svc, kube)
    assert status.phase == "Ready", status.message
    assert (status.ready_groups, status.ready_replicas) == (3, 3)
    ready_cond = status.condition("Ready")
    assert ready_cond is not None and ready_cond.status == "True"
    # A pod of one group fails: LWS recreates that group; the count drops by one group.
    kube.objects[GROUP_SET]["status"] = {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3}
    status = await reconcile(svc, kube)
    assert (status.ready_groups, status.ready_replicas) == (2, 2)
