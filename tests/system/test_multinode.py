"""Workloads on several nodes: a LeaderWorkerSet group per replica (vLLM on Ray, SGLang).

A devcluster with LeaderWorkerSet (``pytest.mark.devcluster(lws=True)``): Workload with
``nodes: 2`` → the operator's LeaderWorkerSet (a leader and a worker per group) and the
Service in front of the leaders → pods of the engine's image, which the kubelet runs as the
engine stand-ins' multi-node launches (vLLM's ``multi-node-serving.sh`` with Ray, SGLang's
``--nnodes``) → the group Ready → Workload Ready → a run against it Succeeds. A worker pod
deleted recreates its group; the Workload goes Deploying, then Ready, and a run generating
against it waits in between (its generation Job made again, no error rows). A change of the
flags or of ``nodes`` (3, back to 1, 2 again) rolls the groups. Parallel sizes that do not
fit the group are Stalled before anything starts. Not for ``--with-e2e``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble
from system.helpers import (
    Kubectl,
    Operator,
    condition,
    phase_is,
    pod_network_operator,
    progress,
    reason_is,
)
from system.test_operator import snapshot

pytestmark = [pytest.mark.timeout(240), pytest.mark.devcluster(lws=True)]

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


def objects(
    name: str, namespace: str, framework: str, args: dict[str, Any], **env: str
) -> list[Any]:
    env = {"KYAI_STANDIN_ANSWER": "Paris", **env}
    return [
        {
            "apiVersion": GROUP,
            "kind": "EngineArgsSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "framework": framework,
                "args": args,
                "env": [{"name": key, "value": value} for key, value in env.items()],
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
            "evaluationrun", f"{name}-run", namespace, phase_is("Succeeded", "Failed"), timeout=150
        )["status"]
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
    kubectl.wait_for("workload", name, namespace, phase_is("Deploying"), timeout=30)
    ready = kubectl.wait_for("workload", name, namespace, phase_is("Ready"), timeout=90)["status"]
    assert ready["readyGroups"] == 1, ready
    pods = engine_pods(kubectl, name, namespace)
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods), pods
    print(f"\ntwo Workloads on two nodes evaluated, a group recreated, in "
          f"{time.monotonic() - started:.1f}s")  # fmt: skip


def test_parallel_sizes_that_do_not_fit_the_group_are_stalled_before_anything_starts(
    kubectl: Kubectl, lws_operator: Operator, namespace: str
) -> None:
    kubectl.apply(*objects("tp4", namespace, "vllm", {"tensor-parallel-size": 4}))
    failed = kubectl.wait_for("workload", "tp4", namespace, phase_is("Failed"), timeout=30)
    status = failed["status"]
    stalled = {c["type"]: c for c in status["conditions"]}["Stalled"]
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec", status
    assert "--tensor-parallel-size 4" in status["message"], status
    assert "spec.nodes 2 × spec.resources.gpus 1 = 2" in status["message"], status
    assert kubectl.items("leaderworkersets", namespace) == []
    assert kubectl.items("pods", namespace) == []


def test_a_run_waits_while_a_failed_worker_recreates_its_group_then_succeeds(
    kubectl: Kubectl, lws_operator: Operator, namespace: str
) -> None:
    started = time.monotonic()
    rows = [ROWS[i % 2] | {"externalRowId": f"r{i}"} for i in range(8)]
    body = run("kill-run", namespace, "kill")
    body["spec"]["generation"] = {"concurrency": 1}
    kubectl.apply(
        snapshot("capitals", namespace, rows),
        *objects("kill", namespace, "vllm", {"pipeline-parallel-size": 2},
                 KYAI_STANDIN_LOAD_SECONDS="0", KYAI_STANDIN_TTFT_MS="1000"),
        body,
    )  # fmt: skip
    kubectl.wait_for("evaluationrun", "kill-run", namespace, lambda o: progress(o) >= 1,
                     timeout=90)  # fmt: skip
    job = kubectl.get("job", "kill-run-generate", namespace)["metadata"]["uid"]
    # A worker of the group fails: LWS recreates the group, the engine is away a while.
    kubectl.run("delete", "pod", "-n", namespace, "kill-lws-0-1", "--wait=false")
    kubectl.wait_for("workload", "kill", namespace, phase_is("Deploying"), timeout=30)
    waiting = kubectl.wait_for(
        "evaluationrun", "kill-run", namespace, reason_is("WorkloadNotReady"), timeout=30
    )
    said = condition(waiting)
    assert waiting["status"]["phase"] == "Generating" and said["status"] == "False", said
    assert said["message"].startswith("the Workload kill is not Ready ("), said
    assert "the generation Job kill-run-generate is stopped" in said["message"], said
    assert progress(waiting) < len(rows), waiting["status"]
    done = kubectl.wait_for(
        "evaluationrun", "kill-run", namespace, phase_is("Succeeded", "Failed"), timeout=120
    )["status"]
    assert done["phase"] == "Succeeded", (done, lws_operator.logs()[-3000:])
    assert done["errorCount"] == 0, done
    # The scores of an undisturbed run: the engine answers Paris to every question.
    assert done["scores"] == [float(row["groundTruthResponse"] == "Paris") for row in rows]
    assert kubectl.get("workload", "kill", namespace)["status"]["phase"] == "Ready"
    # The generation went on in a Job made again once the group was back.
    again = kubectl.get("job", "kill-run-generate", namespace)["metadata"]["uid"]
    assert again != job
    print(f"\na run waited while its group was recreated, then Succeeded, in "
          f"{time.monotonic() - started:.1f}s")  # fmt: skip


def test_changing_the_flags_or_nodes_rolls_the_groups(
    kubectl: Kubectl, lws_operator: Operator, namespace: str
) -> None:
    started = time.monotonic()
    fast = {"KYAI_STANDIN_LOAD_SECONDS": "0"}
    [two_args, workload] = objects("roll", namespace, "vllm", {"pipeline-parallel-size": 2}, **fast)
    # The EngineArgsSets a later change of spec.nodes names (flags that fit 3 nodes, 1 node).
    three = {"pipeline-parallel-size": 3, "max-model-len": 1024}
    three_args = objects("roll3", namespace, "vllm", three, **fast)[0]
    one_args = objects("roll1", namespace, "vllm", {"max-model-len": 512}, **fast)[0]
    kubectl.apply(two_args, three_args, one_args, workload)

    def serving(window: int | None = None, groups: int | None = 1) -> Any:
        return lambda o: (
            phase(o) == "Ready"
            and o["status"].get("readyGroups") == groups
            and (window is None or o["status"].get("maxModelLen") == window)
        )

    kubectl.wait_for("workload", "roll", namespace, serving(), timeout=60)
    first = {p["metadata"]["uid"] for p in engine_pods(kubectl, "roll", namespace)}
    assert len(first) == 2

    def leader_script() -> str:
        return str(kubectl.get("pod", "roll-lws-0", namespace)["spec"]["containers"][0]["args"])

    # A flag changes: the group is made again with the new command line, and serves it.
    two_args["spec"]["args"]["max-model-len"] = 2048
    kubectl.apply(two_args)
    kubectl.wait_for("workload", "roll", namespace, serving(2048), timeout=60)
    pods = engine_pods(kubectl, "roll", namespace)
    assert len(pods) == 2 and not first & {p["metadata"]["uid"] for p in pods}, pods
    assert "--max-model-len 2048" in leader_script()
    # Three nodes (with flags for three): a group of three pods.
    workload["spec"] |= {"nodes": 3, "engineArgsSetRef": {"name": "roll3"}}
    kubectl.apply(workload)
    kubectl.wait_for("workload", "roll", namespace, serving(1024), timeout=60)
    group_set = kubectl.get("leaderworkerset", "roll-lws", namespace)
    assert group_set["spec"]["leaderWorkerTemplate"]["size"] == 3
    pods = engine_pods(kubectl, "roll", namespace)
    assert sorted(p["metadata"]["name"] for p in pods) == [
        "roll-lws-0", "roll-lws-0-1", "roll-lws-0-2",
    ], pods  # fmt: skip
    assert "--pipeline-parallel-size 3" in leader_script()
    # Back to one node: a Deployment instead of the set; the Service selects its pod.
    workload["spec"] |= {"nodes": 1, "engineArgsSetRef": {"name": "roll1"}}
    kubectl.apply(workload)
    kubectl.wait_for("workload", "roll", namespace, serving(512, groups=None), timeout=60)
    assert kubectl.items("leaderworkersets", namespace) == []
    assert len(kubectl.items("deployments", namespace, "-l", "kyai.io/workload=roll")) == 1
    pods = engine_pods(kubectl, "roll", namespace)
    assert len(pods) == 1 and "--max-model-len" in str(pods[0]["spec"]["containers"][0]), pods
    service = kubectl.get("service", "roll-engine", namespace)
    assert "leaderworkerset.sigs.k8s.io/worker-index" not in service["spec"]["selector"]
    # And two nodes again: the Deployment's pod gives its GPU back to the group.
    workload["spec"] |= {"nodes": 2, "engineArgsSetRef": {"name": "roll"}}
    kubectl.apply(workload)
    kubectl.wait_for("workload", "roll", namespace, serving(2048), timeout=60)
    assert kubectl.items("deployments", namespace, "-l", "kyai.io/workload=roll") == []
    assert len(engine_pods(kubectl, "roll", namespace)) == 2
    service = kubectl.get("service", "roll-engine", namespace)
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    print(f"\nflags, 2 → 3 → 1 → 2 nodes rolled in {time.monotonic() - started:.1f}s")
