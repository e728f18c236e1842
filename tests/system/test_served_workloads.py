"""Served Workloads: the operator deploys vLLM, SGLang and TensorRT-LLM, and evaluates them.

Workload (+ EngineArgsSet) → the operator's Deployment and Service → a pod of the engine's
image, which the devcluster's kubelet runs as the engine stand-in (``python -m
kyai_testing.engines`` with the container's real command line) → Ready → the operator reads
``/v1/models`` at the Service's name (``NAME-engine.NS.svc``) → Workload Ready with its
context window → an EvaluationRun against it Succeeds. vLLM and SGLang report the window on
``/v1/models``; TensorRT-LLM does not, so it comes from the EngineArgsSet's ``--max_seq_len``
or, without that flag, from the model's config.json (here from a HuggingFace cache, offline).

The operator runs as a process with ``cluster.network_env()`` so it resolves Service names as
a pod does. Not for ``--with-e2e``: a real cluster would run the real engines' images.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble
from system.helpers import Kubectl, Operator, pod_network_operator
from system.test_operator import snapshot

pytestmark = pytest.mark.timeout(300)

ROWS = [
    {"instruction": "Capital of France?", "groundTruthResponse": "Paris", "externalRowId": "fr"},
    {"instruction": "Capital of Peru?", "groundTruthResponse": "Lima", "externalRowId": "pe"},
]
#: A model whose config.json is in the operator's HuggingFace cache (offline).
CACHED_MODEL = "acme/tiny-llm"
CACHED_WINDOW = 12288
#: name → (framework, model, EngineArgsSet args, expected maxModelLen, expected source).
SERVED: dict[str, tuple[str, str, dict[str, Any], int, str]] = {
    "vllm": ("vllm", "Qwen/Qwen3-8B", {"max-model-len": 8192}, 8192, "server"),
    "sglang": ("sglang", "Qwen/Qwen3-8B", {"context-length": 6144}, 6144, "server"),
    "trtllm": ("trtllm", "Qwen/Qwen3-8B", {"max_seq_len": 3072}, 3072, "engine-args"),
    "trtllm-config": ("trtllm", CACHED_MODEL, {}, CACHED_WINDOW, "config"),
}


def hf_cache(root: Path) -> Path:
    """A HuggingFace cache (HF_HOME) holding CACHED_MODEL's config.json at revision main."""
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = root / "hub" / f"models--{CACHED_MODEL.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot_dir = repo / "snapshots" / revision
    snapshot_dir.mkdir(parents=True)
    (snapshot_dir / "config.json").write_text(f'{{"max_position_embeddings": {CACHED_WINDOW}}}')
    return root


@pytest.fixture(scope="module")
def served_operator(
    request: pytest.FixtureRequest,
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    if cluster is None:
        pytest.skip("the engine stand-ins run in the devcluster only")
    hf_home = hf_cache(tmp_path_factory.mktemp("hf"))
    running = pod_network_operator(
        cluster, kubectl.kubeconfig, tmp_path_factory.mktemp("operator"), double.base_url,
        HF_HOME=str(hf_home),
    )  # fmt: skip
    running.start()
    yield running
    running.stop()


def served_objects(name: str, namespace: str) -> list[dict[str, Any]]:
    framework, model, args, _, _ = SERVED[name]
    group = "kyai.io/v1alpha1"
    return [
        {
            "apiVersion": group,
            "kind": "EngineArgsSet",
            "metadata": {"name": name, "namespace": namespace},
            # The stand-in answers "Paris" to everything: one of the two rows is right.
            "spec": {
                "framework": framework,
                "args": args,
                "env": [{"name": "KYAI_STANDIN_ANSWER", "value": "Paris"}],
            },
        },
        {
            "apiVersion": group,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"framework": framework, "model": model, "engineArgsSetRef": {"name": name}},
        },
        {
            "apiVersion": group,
            "kind": "EvaluationRun",
            "metadata": {"name": f"{name}-run", "namespace": namespace},
            "spec": {"workloadRef": {"name": name}, "snapshotRef": {"name": "capitals"}},
        },
    ]


def test_served_workloads_of_each_engine_reach_ready_and_are_evaluated(
    kubectl: Kubectl, served_operator: Operator, double: LLMDouble, namespace: str
) -> None:
    started = time.monotonic()
    objects = [snapshot("capitals", namespace, ROWS)]
    for name in SERVED:
        objects += served_objects(name, namespace)
    kubectl.apply(*objects)
    runs = {}
    for name in SERVED:
        runs[name] = kubectl.wait_for(
            "evaluationrun",
            f"{name}-run",
            namespace,
            lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            timeout=240,
        )["status"]
    took = time.monotonic() - started
    for name, (framework, model, _, window, source) in SERVED.items():
        status = runs[name]
        assert status["phase"] == "Succeeded", (name, status, served_operator.logs()[-3000:])
        assert status["avgScore"] == 0.5 and status["questions"] == 2, (name, status)
        workload = kubectl.get("workload", name, namespace)["status"]
        assert workload["phase"] == "Ready", (name, workload)
        assert workload["endpoint"] == f"http://{name}-engine.{namespace}.svc:8000/v1"
        assert (workload["maxModelLen"], workload["maxModelLenSource"]) == (window, source), name
        assert workload["readyReplicas"] == 1
        deployment = kubectl.get("deployment", f"{name}-engine", namespace)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["image"].split("/")[0] in ("vllm", "lmsysorg", "nvcr.io"), container
        pods = kubectl.items("pods", namespace, "-l", f"kyai.io/workload={name}")
        engine = [p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/component")
                  == "engine"]  # fmt: skip
        assert len(engine) == 1 and engine[0]["status"]["containerStatuses"][0]["restartCount"] == 0
        log = kubectl.run("logs", "-n", namespace, engine[0]["metadata"]["name"]).stdout
        assert f"kyai stand-in for {framework}" in log and model in log, log
    # The judge saw every candidate answer: two rows for each of the four runs.
    assert len(double.requests_for("judge")) >= 2 * len(SERVED)
    print(f"\nfour served Workloads evaluated in {took:.1f}s")
