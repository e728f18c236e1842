"""Workloads on several nodes: a LeaderWorkerSet group per replica (vLLM on Ray, SGLang).

A devcluster with LeaderWorkerSet (``lws=True``): Workload with ``nodes: 2`` → the operator's
LeaderWorkerSet (a leader and a worker per group) and the Service in front of the leaders →
pods of the engine's image, which the kubelet runs as the engine stand-ins' multi-node
launches (vLLM's ``multi-node-serving.sh`` with Ray, SGLang's ``--nnodes``) → the group Ready
→ Workload Ready → a run against it Succeeds. A worker pod deleted recreates its group; the
Workload goes Deploying, then Ready. Parallel sizes that do not fit the group are Stalled
before anything starts. Not for ``--with-e2e``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble
from system.conftest import e2e_kubeconfig
from system.helpers import WORKER_IMAGE, Kubectl, Operator, pod_network_operator
from system.test_operator import snapshot

pytestmark = pytest.mark.timeout(240)

ROWS = [
    {"instruction": "Capital of France?", "groundTruthResponse": "Paris", "externalRowId": "fr"},
    {"instruction": "Capital of Peru?", "groundTruthResponse": "Lima", "externalRowId": "pe"},
]
GROUP = "kyai.io/v1alpha1"
#: name → (framework, EngineArgsSet args): 2 nodes × 1 GPU each.
SERVED: dict[str, tuple[str, dict[str, Any]]] = {
    "vllm-2n": ("vllm", {"tensor-parallel-size": 1, "pipeline-parallel-size": 2}),
    "sglang-2n": ("sglang", {"tp": 2}),
}


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevClusterThread | None]:
    """The devcluster with LeaderWorkerSet (this module's override of conftest's)."""
    if e2e_kubeconfig(request.config) is not None:
        yield None
        return
    workdir = tmp_path_factory.mktemp("devcluster-lws")
    with DevClusterThread(workdir=workdir, local_images=(WORKER_IMAGE,), lws=True) as running:
        yield running


@pytest.fixture(scope="module")
def lws_operator(
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    if cluster is None:
        pytest.skip("the engine stand-ins run in the devcluster only")
    running = pod_network_operator(
        cluster, kubectl.kubeconfig, tmp_path_factory.mktemp("operator"), double.base_url
    )
    running.start()
    yield running
    running.stop()


def objects(name: str, namespace: str, framework: str, args: dict[str, Any]) -> list[Any]:
    return [
        {
            "apiVersion": GROUP,
            "kind": "EngineArgsSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "framework": framework,
                "args": args,
                "env": [{"name": "KYAI_STANDIN_ANSWER", "value": "Paris"}],
            },
        },
        {
            "apiVersion": GROUP,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "framework": framework,
                "model": "Qwen/Qwen3-8B",
                "nodes": 2,
                "resources": {"gpus": 1},
                "engineArgsSetRef": {"name": name},
            },
        },
    ]


def run(name: str, namespace: str, workload: str) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"workloadRef": {"name": workload}, "snapshotRef": {"name": "capitals"}},
    }


def phase(obj: dict[str, Any]) -> str | None:
    return (obj.get("status") or {}).get("phase")


def engine_pods(kubectl: Kubectl, name: str, namespace: str) -> list[dict[str, Any]]:
    return kubectl.items("pods", namespace, "-l", f"kyai.io/workload={name}")


def test_workloads_on_two_nodes_serve_from_a_group_and_recreate_it(
    kubectl: Kubectl, lws_operator: Operator, namespace: str
) -> None:
    started = time.monotonic()
    applied: list[Any] = [snapshot("capitals", namespace, ROWS)]
    for name, (framework, args) in SERVED.items():
        applied += [*objects(name, namespace, framework, args), run(f"{name}-run", namespace, name)]
    kubectl.apply(*applied)
    for name, (framework, _) in SERVED.items():
        status = kubectl.wait_for(
            "evaluationrun", f"{name}-run", namespace,
            lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            timeout=150,
        )["status"]  # fmt: skip
        assert status["phase"] == "Succeeded", (name, status, lws_operator.logs()[-3000:])
        workload = kubectl.get("workload", name, namespace)["status"]
        assert workload["phase"] == "Ready", (name, workload)
        assert workload["readyGroups"] == 1 and workload["readyReplicas"] == 1, workload
        assert workload["endpoint"] == f"http://{name}-engine.{namespace}.svc:8000/v1"
        group_set = kubectl.get("leaderworkerset", f"{name}-lws", namespace)
        assert group_set["spec"]["leaderWorkerTemplate"]["size"] == 2
        assert group_set["spec"]["leaderWorkerTemplate"]["restartPolicy"] == (
            "RecreateGroupOnPodRestart"
        )
        pods = engine_pods(kubectl, name, namespace)
        assert sorted(p["metadata"]["name"] for p in pods) == [f"{name}-lws-0", f"{name}-lws-0-1"]
        assert all(p["status"]["phase"] == "Running" for p in pods), pods
        # The Service reaches the leader only; no Deployment was made.
        service = kubectl.get("service", f"{name}-engine", namespace)
        assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
        assert kubectl.items("deployments", namespace, "-l", f"kyai.io/workload={name}") == []
        log = kubectl.run("logs", "-n", namespace, f"{name}-lws-0").stdout
        assert f"kyai stand-in for {framework}" in log, log

    # A worker killed: its group is recreated; the Workload goes Deploying, then Ready.
    name = "vllm-2n"
    kubectl.run("delete", "pod", "-n", namespace, f"{name}-lws-0-1", "--wait=false")
    kubectl.wait_for("workload", name, namespace, lambda o: phase(o) == "Deploying", timeout=30)
    ready = kubectl.wait_for("workload", name, namespace, lambda o: phase(o) == "Ready",
                             timeout=90)["status"]  # fmt: skip
    assert ready["readyGroups"] == 1, ready
    pods = engine_pods(kubectl, name, namespace)
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods), pods
    print(f"\ntwo Workloads on two nodes evaluated, a group recreated, in "
          f"{time.monotonic() - started:.1f}s")  # fmt: skip


def test_parallel_sizes_that_do_not_fit_the_group_are_stalled_before_anything_starts(
    kubectl: Kubectl, lws_operator: Operator, namespace: str
) -> None:
    kubectl.apply(*objects("tp4", namespace, "vllm", {"tensor-parallel-size": 4}))
    status = kubectl.wait_for(
        "workload", "tp4", namespace,
        lambda o: (o.get("status") or {}).get("phase") == "Failed", timeout=30,
    )["status"]  # fmt: skip
    stalled = {c["type"]: c for c in status["conditions"]}["Stalled"]
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec", status
    assert "--tensor-parallel-size 4" in status["message"], status
    assert "spec.nodes 2 × spec.resources.gpus 1 = 2" in status["message"], status
    assert kubectl.items("leaderworkersets", namespace) == []
    assert kubectl.items("pods", namespace) == []
