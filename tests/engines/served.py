"""A vLLM Workload served by the operator in the devcluster, its engine the real ``vllm serve``.

The devcluster maps vLLM's images to the launcher (``engine_commands``), so the Workload's
engine container runs ``<engines python> vllm_launcher.py`` followed by exactly the
operator's command line; the launcher only binds the pod's address where that line says
``--host 0.0.0.0``. The operator runs as a process that resolves Service names as pods do;
the run is judged by a Python grader (no judge server). Everything starts as early as the
session allows (see conftest.py); :func:`served` waits for the run's end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engines.real_vllm import ENGINE_ENV, IMAGE, MAX_MODEL_LEN, SERVED_NAME, TIMINGS, TinyModel
from engines.real_vllm import engines_python as engines_python_path
from kyai_devcluster import DevClusterThread
from kyai_testing.real_engines import VLLM_LAUNCHER
from system.helpers import REPO, WORKER_IMAGE, Kubectl, Operator, pod_network_operator

NAMESPACE = "real-vllm"
GROUP = "kyai.io/v1alpha1"
WORKLOAD = "tiny"
RUN = "tiny-run"
ROWS = [
    {"instruction": f"What is the capital of France? ({i})", "groundTruthResponse": "Paris",
     "externalRowId": f"r{i}"}
    for i in range(4)
]  # fmt: skip
#: The EngineArgsSet: a switch turned off (vLLM's --no-X), a JSON-valued flag, the reasoning
#: parser, and what two CPU cores need.
ENGINE_ARGS: dict[str, Any] = {
    "max-model-len": MAX_MODEL_LEN,
    "enforce-eager": True,
    "enable-prefix-caching": False,
    "reasoning-parser": "deepseek_r1",
    "override-generation-config": '{"temperature": 0.0}',
}
GRADER = (
    "def grade(sample, item):\n"
    "    return 1.0 if sample.get('extracted_output') == item.get('target') else 0.0\n"
)
#: Seconds the run may take from the start of the session (the engine loads for 25-90 s on
#: two cores beside the other server).
RUN_TIMEOUT_S = 270.0


@dataclass
class Served:
    """The devcluster, the operator and the manifests applied, before the run has ended."""

    cluster: DevClusterThread
    kubectl: Kubectl
    operator: Operator
    model: TinyModel
    started: float
    namespace: str = NAMESPACE

    def get(self, kind: str, name: str) -> dict[str, Any]:
        return self.kubectl.get(kind, name, self.namespace)


def manifests(model: TinyModel) -> list[dict[str, Any]]:
    meta = {"namespace": NAMESPACE}
    return [
        {
            "apiVersion": GROUP,
            "kind": "EngineArgsSet",
            "metadata": {"name": WORKLOAD, **meta},
            "spec": {
                "framework": "vllm",
                "args": ENGINE_ARGS,
                "env": [{"name": key, "value": value} for key, value in ENGINE_ENV.items()],
            },
        },
        {
            "apiVersion": GROUP,
            "kind": "Workload",
            "metadata": {"name": WORKLOAD, **meta},
            "spec": {
                "framework": "vllm",
                "model": str(model.path),
                "servedModelName": SERVED_NAME,
                "image": IMAGE,
                "engineArgsSetRef": {"name": WORKLOAD},
                "resources": {"gpus": 0},
            },
        },
        {
            "apiVersion": GROUP,
            "kind": "Snapshot",
            "metadata": {"name": "capitals", **meta},
            "spec": {
                "source": {"rows": ROWS},
                "prompts": {
                    "generation": "Answer with the city only.",
                    "judge": "Score 1 if the response names the ground truth, else 0.",
                },
            },
        },
        {
            "apiVersion": GROUP,
            "kind": "EvaluationRun",
            "metadata": {"name": RUN, **meta},
            "spec": {
                "workloadRef": {"name": WORKLOAD},
                "snapshotRef": {"name": "capitals"},
                "judge": {"type": "python", "python": {"source": GRADER}},
                "generation": {"concurrency": 2},
            },
        },
    ]


@pytest.fixture(scope="session")
def served_started(
    tiny_model: TinyModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The devcluster and the operator started, the Workload and its run applied."""
    started = time.monotonic()
    launcher = (str(engines_python_path()), str(VLLM_LAUNCHER))
    with DevClusterThread(
        workdir=tmp_path_factory.mktemp("devcluster"),
        local_images=(WORKER_IMAGE,),
        engine_commands={"vllm/vllm-openai*": launcher},
    ) as cluster:
        kubectl = Kubectl(cluster.kubeconfig_path)
        kubectl.run("apply", "-f", str(REPO / "crds"))
        operator = pod_network_operator(
            cluster,
            kubectl.kubeconfig,
            tmp_path_factory.mktemp("operator"),
            "http://127.0.0.1:9/v1",  # no LLM judge here: the run's judge is a Python grader
            KYAI_JOB_START_GRACE_SECONDS="2",
            KYAI_RUN_RESYNC_SECONDS="3",
        )
        operator.start()
        try:
            kubectl.apply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            )
            kubectl.apply(*manifests(tiny_model))
            yield Served(cluster, kubectl, operator, tiny_model, started)
        finally:
            operator.stop()


@pytest.fixture(scope="session")
def served(served_started: Served) -> Served:
    """The same, once the run has ended (Succeeded or Failed)."""

    def remaining() -> float:
        return max(RUN_TIMEOUT_S - (time.monotonic() - served_started.started), 30.0)

    try:
        served_started.kubectl.wait_for(
            "workload",
            WORKLOAD,
            NAMESPACE,
            lambda o: (o.get("status") or {}).get("phase") == "Ready",
            timeout=remaining(),
        )
        TIMINGS["the served Workload Ready (from the devcluster's start)"] = (
            time.monotonic() - served_started.started
        )
        served_started.kubectl.wait_for(
            "evaluationrun",
            RUN,
            NAMESPACE,
            lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            timeout=remaining(),
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(served_started)}") from None
    TIMINGS["the served run ended (from the devcluster's start)"] = (
        time.monotonic() - served_started.started
    )
    return served_started


def diagnosis(served: Served) -> str:
    """The Workload's status, the pods' and the last lines of every container's log."""
    parts = [f"Workload status: {served.get('workload', WORKLOAD).get('status')}"]
    for pod in served.kubectl.items("pods", served.namespace):
        statuses = (pod.get("status") or {}).get("containerStatuses")
        parts.append(f"pod {pod['metadata']['name']}: {statuses}")
    logs = served.cluster.workdir / "pods" / served.namespace
    for log in sorted(logs.glob("*/logs/*.log")):
        lines = [
            line for line in log.read_text(errors="replace").splitlines() if "Route:" not in line
        ]
        parts.append(f"--- {log.relative_to(logs)}:\n" + "\n".join(lines[-40:]))
    parts.append(f"--- operator:\n{served.operator.logs()[-3000:]}")
    return "\n".join(parts)


def processes_of_pod(pod_ip: str) -> list[int]:
    """Pids of the processes started with the pod's address (its containers' main ones)."""
    found = []
    marker = f"KYAI_DEVCLUSTER_POD_IP={pod_ip}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
