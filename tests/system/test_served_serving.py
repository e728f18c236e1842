"""The serving figures of a served Workload: the client's and the engine's, side by side.

A vLLM Workload served by the operator (the engine stand-in in the devcluster, paced by
``KYAI_STANDIN_TTFT_MS`` / ``KYAI_STANDIN_TOKEN_MS`` from its EngineArgsSet's env) reports
its engine's metrics URL; the generation Job reads the engine's ``/metrics`` before and
after the phase (``--server-metrics``) and counts its GPUs (``--gpus``), and the run's
``status.serving.server`` holds the engine's own TTFT beside the client's, within 10 % of
each other on loopback. An SGLang Workload without ``--enable-metrics`` serves no metrics:
its run has the client's figures only.

The stand-in's first token comes 375 ms after the request: the middle of vLLM's TTFT bucket
(0.25 s, 0.5 s], where the engine-side p50 (interpolated in the bucket as PromQL's
``histogram_quantile`` does) is 375 ms when every answer falls in that bucket. The client's
TTFT adds loopback and event-loop time to it: 10 % of 375 ms leaves that 37 ms on a CI
machine running three test workers (at 175 ms, 10 % was 17 ms, and a loaded run measured 27).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kyai.api import EvaluationRunStatus, WorkloadStatus
from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble
from system.helpers import Kubectl, Operator, pod_network_operator
from system.test_operator import snapshot

pytestmark = pytest.mark.timeout(300)

TTFT_MS = 375
ROWS = [
    {"instruction": f"Capital of country {i}?", "groundTruthResponse": "Paris",
     "externalRowId": f"c{i}"}
    for i in range(6)
]  # fmt: skip


@pytest.fixture(scope="module")
def served_operator(
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    if cluster is None:
        pytest.skip("the engine stand-ins run in the devcluster only")
    running = pod_network_operator(
        cluster, kubectl.kubeconfig, tmp_path_factory.mktemp("operator"), double.base_url,
        KYAI_JOB_START_GRACE_SECONDS="2", KYAI_RUN_RESYNC_SECONDS="3",
    )  # fmt: skip
    running.start()
    yield running
    running.stop()


def served(name: str, framework: str, namespace: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    group = "kyai.io/v1alpha1"
    env = {"KYAI_STANDIN_ANSWER": "Paris", "KYAI_STANDIN_TTFT_MS": str(TTFT_MS),
           "KYAI_STANDIN_TOKEN_MS": "2", "KYAI_STANDIN_LOAD_SECONDS": "0"}  # fmt: skip
    return [
        {
            "apiVersion": group,
            "kind": "EngineArgsSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "framework": framework,
                "args": args,
                "env": [{"name": key, "value": value} for key, value in env.items()],
            },
        },
        {
            "apiVersion": group,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "framework": framework,
                "model": "Qwen/Qwen3-8B",
                "engineArgsSetRef": {"name": name},
            },
        },
        {
            "apiVersion": group,
            "kind": "EvaluationRun",
            "metadata": {"name": f"{name}-run", "namespace": namespace},
            "spec": {
                "workloadRef": {"name": name},
                "snapshotRef": {"name": "capitals"},
                "generation": {"concurrency": 2},
            },
        },
    ]


def test_a_served_run_has_the_engines_ttft_beside_the_clients(
    kubectl: Kubectl, served_operator: Operator, namespace: str
) -> None:
    started = time.monotonic()
    kubectl.apply(
        snapshot("capitals", namespace, ROWS),
        *served("vllm", "vllm", namespace, {"max-model-len": 8192}),
        *served("sglang", "sglang", namespace, {"context-length": 8192}),
    )
    done = {
        name: kubectl.wait_for(
            "evaluationrun", f"{name}-run", namespace,
            lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            timeout=240,
        )["status"]
        for name in ("vllm", "sglang")
    }  # fmt: skip
    took = time.monotonic() - started
    for name, body in done.items():
        assert body["phase"] == "Succeeded", (name, body, served_operator.logs()[-3000:])
    # The Workload says where its engine's metrics are; the generation Job reads them.
    vllm = WorkloadStatus.model_validate(kubectl.get("workload", "vllm", namespace)["status"])
    url = f"http://vllm-engine.{namespace}.svc:8000/metrics"
    assert vllm.metrics_url == url
    job = kubectl.get("job", "vllm-run-generate", namespace)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--server-metrics") + 1] == url
    assert args[args.index("--gpus") + 1] == "1" and "--no-stream" not in args
    status = EvaluationRunStatus.model_validate(done["vllm"])
    serving = status.serving
    assert serving is not None and serving.streamed is True and serving.requests == len(ROWS)
    client = serving.ttft_p50_ms
    assert client is not None and TTFT_MS <= client < TTFT_MS * 1.5, serving
    server = serving.server
    assert server is not None and server.url == url and server.requests == len(ROWS), serving
    assert server.ttft_p50_ms is not None
    assert abs(server.ttft_p50_ms - client) <= 0.1 * client, (server, client)
    # Each request's engine TTFT lies inside its client TTFT, so the means keep that order
    # (a mean against a median would not: the histogram's sum is exact, its median is not).
    assert serving.ttft_mean_ms is not None and server.ttft_mean_ms is not None
    assert server.ttft_mean_ms <= serving.ttft_mean_ms, (server, serving)
    assert serving.gpus == 1 and serving.wall_seconds is not None
    assert serving.gpu_seconds == pytest.approx(serving.wall_seconds, abs=1e-3)
    # SGLang without --enable-metrics: no metrics route, so the client's figures alone.
    sglang = WorkloadStatus.model_validate(kubectl.get("workload", "sglang", namespace)["status"])
    assert sglang.metrics_url is None
    job = kubectl.get("job", "sglang-run-generate", namespace)
    assert "--server-metrics" not in job["spec"]["template"]["spec"]["containers"][0]["args"]
    other = EvaluationRunStatus.model_validate(done["sglang"]).serving
    assert other is not None and other.server is None and other.ttft_p50_ms is not None
    # On the operator's /metrics: both sides' quantiles, in seconds.
    text = served_operator.metrics()
    assert "kyai_evaluation_server_ttft_seconds{" in text and 'quantile="0.5"' in text
    line = next(
        line for line in text.splitlines()
        if line.startswith("kyai_evaluation_ttft_seconds{") and 'run="vllm-run"' in line
        and 'quantile="0.5"' in line
    )  # fmt: skip
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(client / 1000.0)
    print(f"\nclient TTFT p50 {client:.1f} ms, engine {server.ttft_p50_ms:.1f} ms ({took:.1f}s)")
