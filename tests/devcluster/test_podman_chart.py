"""``helm install`` of the chart into the devcluster with ``--runtime podman``.

The operator runs as the chart's Deployment, in its container of the project image, with
in-cluster configuration and the chart's RBAC only (the devcluster authorizes its service
account's token from the installed roles and bindings). Its workers are Jobs of the same
image; the candidate and the chart's default judge are the LLM double on loopback, which the
containers reach (host network). A second test takes one verb out of the chart's ClusterRole
and reads the 403 in the operator's log.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.helpers import KUBECTL
from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge

pytestmark = [pytest.mark.podman, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
HELM = shutil.which("helm") or str(Path(sys.executable).parent / "helm")
RELEASE_NS = "kyai-system"
FULLNAME = "kyai-kyai-operator"  # the chart's fullname for release "kyai"
FINISHED = ("Succeeded", "Failed")
SA_USER = f"system:serviceaccount:{RELEASE_NS}:{FULLNAME}"
ROWS = [
    {"instruction": "Capital of France?", "groundTruthResponse": "Paris"},
    {"instruction": "Capital of Peru?", "groundTruthResponse": "Lima"},
]


@dataclass
class Kubectl:
    """kubectl with the devcluster's kubeconfig."""

    kubeconfig: Path

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """kubectl's standard output (its standard error too when ``check`` is false)."""
        assert KUBECTL is not None
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
            return done.stdout
        return done.stdout + done.stderr

    def apply(self, *objects: dict[str, Any]) -> None:
        self.run("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(self.run("get", kind, name, "-n", namespace, "-o", "json"))
        return obj

    def items(self, kind: str, namespace: str, *selector: str) -> list[dict[str, Any]]:
        out = self.run("get", kind, "-n", namespace, "-o", "json", *selector)
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items


@dataclass
class Installed:
    kubectl: Kubectl
    double: LLMDouble

    def operator_logs(self) -> str:
        selector = "app.kubernetes.io/instance=kyai,app.kubernetes.io/component=operator"
        return self.kubectl.run("logs", "-n", RELEASE_NS, "-l", selector, "--tail=-1", check=False)

    def evaluation(self, name: str, namespace: str) -> list[dict[str, Any]]:
        """A Snapshot, an endpoint Workload and a run judged by the chart's default judge."""
        return [
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "Snapshot",
                "metadata": {"name": "capitals", "namespace": namespace},
                "spec": {
                    "source": {"rows": ROWS},
                    "prompts": {"generation": "Answer briefly.", "judge": "Score 0..1."},
                },
            },
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "Workload",
                "metadata": {"name": "cand", "namespace": namespace},
                "spec": {
                    "framework": "vllm",
                    "model": "cand",
                    "endpoint": {"url": self.double.base_url},
                },
            },
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "EvaluationRun",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"workloadRef": {"name": "cand"}, "snapshotRef": {"name": "capitals"}},
            },
        ]


def wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen in {timeout:.0f}s")


def run_phase(kubectl: Kubectl, name: str, namespace: str) -> dict[str, Any]:
    status: dict[str, Any] = kubectl.get("evaluationrun", name, namespace).get("status") or {}
    return status


def finished(kubectl: Kubectl, name: str, namespace: str, timeout: float) -> dict[str, Any]:
    """The run's status once it has Succeeded or Failed."""
    status: dict[str, Any] = wait(
        lambda: (s := run_phase(kubectl, name, namespace)).get("phase") in FINISHED and s,
        timeout,
        f"the end of run {namespace}/{name}",
    )
    return status


@pytest.fixture(scope="module")
def installed(
    request: pytest.FixtureRequest,
    podman_image: str,
    standin_image: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Installed]:
    if request.config.getoption("--with-e2e"):
        pytest.skip("runs the devcluster's podman runtime; make e2e installs the chart itself")
    if KUBECTL is None or not Path(HELM).exists():
        pytest.skip("kubectl and helm are needed (make setup installs helm)")
    repository, _, tag = podman_image.rpartition(":")
    double = LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(match="France", model="cand", content="Paris"),
            Rule(model="cand", content="I do not know"),
            Rule(model="judge", content=substring_judge),
        ],
    )
    workdir = tmp_path_factory.mktemp("podman-chart")
    with (
        double.start_in_thread() as llm,
        DevClusterThread(
            workdir=workdir, runtime="podman", image=podman_image, standin_image=standin_image
        ) as dc,
    ):
        kubectl = Kubectl(dc.kubeconfig_path)
        started = time.monotonic()
        subprocess.run(
            [
                HELM, "install", "kyai", str(REPO / "charts/kyai-operator"),
                "-n", RELEASE_NS, "--create-namespace", "--kubeconfig", str(dc.kubeconfig_path),
                "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                "--set", "image.pullPolicy=Never",
                "--set", f"defaultJudge.endpoint={llm.base_url}",
                "--set", "defaultJudge.model=judge",
                "--wait", "--timeout", "180s",
            ],
            check=True, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        print(f"\nhelm install --wait: {time.monotonic() - started:.1f}s", file=sys.stderr)
        yield Installed(kubectl, llm)


def test_helm_install_runs_the_operator_in_its_container_and_a_run_succeeds(
    installed: Installed,
) -> None:
    kubectl = installed.kubectl
    releases = kubectl.items("secrets", RELEASE_NS, "-l", "owner=helm")
    assert [s["type"] for s in releases] == ["helm.sh/release.v1"]
    pod = kubectl.items("pods", RELEASE_NS, "-l", "app.kubernetes.io/component=operator")[0]
    spec = pod["spec"]
    assert spec["serviceAccountName"] == FULLNAME
    assert spec["containers"][0]["image"].startswith("localhost/kyai-operator:")

    # The EngineArgsSet's validation is the operator's, through its watch.
    eas = {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EngineArgsSet",
        "metadata": {"name": "owns-port", "namespace": "default"},
        "spec": {"framework": "vllm", "extraArgs": ["--port=9000"]},
    }
    kubectl.apply(eas)
    wait(
        lambda: (
            (kubectl.get("engineargsset", "owns-port", "default").get("status") or {}).get("phase")
            == "Invalid"
        ),
        120,
        "the EngineArgsSet's Invalid phase",
    )

    kubectl.apply(*installed.evaluation("first", "default"))
    status = finished(kubectl, "first", "default", 240)
    workers = kubectl.items("pods", "default")
    assert status["phase"] == "Succeeded", (status, [p["status"] for p in workers])
    assert status["avgScore"] == 0.5 and status["questions"] == 2
    assert workers and all(p["status"]["phase"] == "Succeeded" for p in workers)
    assert all(p["spec"]["containers"][0]["image"] == pod["spec"]["containers"][0]["image"]
               for p in workers)  # fmt: skip
    assert len(installed.double.requests_for("judge")) == 2  # the chart's default judge
    pod = kubectl.items("pods", RELEASE_NS, "-l", "app.kubernetes.io/component=operator")[0]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    logs = installed.operator_logs()
    assert "kyai operator started" in logs
    assert "Initial authentication has finished" in logs  # in-cluster config, its token
    assert "forbidden" not in logs.lower(), logs[-3000:]


def test_a_verb_taken_from_the_charts_cluster_role_shows_as_the_403(
    installed: Installed,
) -> None:
    kubectl = installed.kubectl
    role: dict[str, Any] = json.loads(kubectl.run("get", "clusterrole", FULLNAME, "-o", "json"))
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        role["metadata"].pop(key, None)
    trimmed = copy.deepcopy(role)
    removed = False
    for rule in trimmed["rules"]:
        if "jobs" in rule.get("resources", []) and "create" in rule["verbs"]:
            rule["verbs"] = [verb for verb in rule["verbs"] if verb != "create"]
            removed = True
    assert removed, yaml.safe_dump(role)
    namespace = "denied"
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    kubectl.apply(trimmed)
    try:
        kubectl.apply(*installed.evaluation("denied", namespace))
        expected = (
            f'jobs.batch is forbidden: User "{SA_USER}" cannot create resource "jobs" in API '
            f'group "batch" in the namespace "{namespace}"'
        )
        wait(lambda: expected in installed.operator_logs(), 120, "the 403 in the operator's log")
        assert run_phase(kubectl, "denied", namespace).get("phase") != "Succeeded"
        assert kubectl.items("jobs", namespace) == []
    finally:
        kubectl.apply(role)
    # With the verb back, the operator's retry creates the Job and the run finishes.
    status = finished(kubectl, "denied", namespace, 240)
    assert status["phase"] == "Succeeded", status


#: framework → (EngineArgsSet args, expected maxModelLen, expected maxModelLenSource).
SERVED: dict[str, tuple[dict[str, Any], int, str]] = {
    "vllm": ({"max-model-len": 8192}, 8192, "server"),
    "sglang": ({"context-length": 6144}, 6144, "server"),
    "trtllm": ({"max_seq_len": 3072}, 3072, "engine-args"),
}


def test_the_installed_operator_serves_each_engine_in_a_container_and_evaluates_it(
    installed: Installed,
) -> None:
    kubectl = installed.kubectl
    namespace = "served"
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    snapshot = installed.evaluation("unused", namespace)[0]
    objects: list[dict[str, Any]] = [snapshot]
    for framework, (args, _, _) in SERVED.items():
        meta = {"name": framework, "namespace": namespace}
        objects += [
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "EngineArgsSet",
                "metadata": meta,
                # The stand-in answers "Paris" to everything: one of the two rows is right.
                "spec": {
                    "framework": framework,
                    "args": args,
                    "env": [{"name": "KYAI_STANDIN_ANSWER", "value": "Paris"}],
                },
            },
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "Workload",
                "metadata": meta,
                "spec": {
                    "framework": framework,
                    "model": "Qwen/Qwen3-8B",
                    "engineArgsSetRef": {"name": framework},
                },
            },
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "EvaluationRun",
                "metadata": {"name": framework, "namespace": namespace},
                "spec": {"workloadRef": {"name": framework}, "snapshotRef": {"name": "capitals"}},
            },
        ]
    started = time.monotonic()
    kubectl.apply(*objects)
    runs = {framework: finished(kubectl, framework, namespace, 300) for framework in SERVED}
    print(f"\nthree served Workloads in containers evaluated in {time.monotonic() - started:.0f}s")
    for framework, (_, window, source) in SERVED.items():
        assert runs[framework]["phase"] == "Succeeded", (framework, runs[framework])
        assert runs[framework]["avgScore"] == 0.5, (framework, runs[framework])
        workload = kubectl.get("workload", framework, namespace)["status"]
        assert workload["phase"] == "Ready", (framework, workload)
        assert (workload["maxModelLen"], workload["maxModelLenSource"]) == (window, source)
        assert workload["endpoint"] == f"http://{framework}-engine.{namespace}.svc:8000/v1"
        engine = kubectl.items("pods", namespace, "-l", f"kyai.io/workload={framework}")
        engine = [p for p in engine if p["metadata"]["name"].startswith(f"{framework}-engine")]
        assert len(engine) == 1 and engine[0]["status"]["containerStatuses"][0]["ready"]
        log = kubectl.run("logs", "-n", namespace, engine[0]["metadata"]["name"])
        assert f"kyai stand-in for {framework}" in log, log


def operator_pods(kubectl: Kubectl) -> list[dict[str, Any]]:
    return kubectl.items("pods", RELEASE_NS, "-l", "app.kubernetes.io/component=operator")


def lease_holder(kubectl: Kubectl) -> str:
    lease = kubectl.get("lease", "kyai-operator", RELEASE_NS)
    return str(lease["spec"].get("holderIdentity") or "")


def pod_of(kubectl: Kubectl, identity: str) -> str | None:
    """The operator pod that holds the Lease as ``identity`` (its log says so)."""
    for pod in operator_pods(kubectl):
        name = str(pod["metadata"]["name"])
        log = kubectl.run("logs", "-n", RELEASE_NS, name, check=False)
        if f"Holding the Lease {RELEASE_NS}/kyai-operator as {identity}" in log:
            return name
    return None


def test_two_operator_replicas_one_leader_and_the_lease_moves_with_its_pod(
    installed: Installed,
) -> None:
    kubectl = installed.kubectl
    pods = wait(
        lambda: len(ready := [p for p in operator_pods(kubectl) if is_ready(p)]) == 2 and ready,
        180,
        "two Ready operator pods",
    )
    holder = wait(lambda: lease_holder(kubectl), 60, "a holder of the Lease")
    leader = wait(lambda: pod_of(kubectl, holder), 60, "the leader's log")
    (standby,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != leader]
    assert "Waiting for the Lease" in kubectl.run("logs", "-n", RELEASE_NS, standby)
    kubectl.apply(*installed.evaluation("moved", "default"))
    kubectl.run("delete", "pod", "-n", RELEASE_NS, leader, "--wait=false")
    moved = wait(
        lambda: (h := lease_holder(kubectl)) and h != holder and h, 120, "the Lease to move"
    )
    assert pod_of(kubectl, moved) != leader
    status = finished(kubectl, "moved", "default", 240)
    assert status["phase"] == "Succeeded" and status["avgScore"] == 0.5, status
    jobs = kubectl.items("jobs", "default", "-l", "kyai.io/evaluation-run=moved")
    assert sorted(j["metadata"]["name"] for j in jobs) == ["moved-generate", "moved-judge"]


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
