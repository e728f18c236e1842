"""The generation Job's serving flags: --no-stream, --server-metrics and --gpus.

A served Workload's run reads its engine's own histograms (where the engine profile says they
live: vLLM always, SGLang with --enable-metrics, TensorRT-LLM none) and counts its GPUs;
an endpoint Workload's run gets neither.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EngineArgsSetSpec, GeneratePlan, GenerationSettings
from kyai.builders import evaluation as build
from kyai.builders import worker_args
from kyai.builders.workload import workload_metrics_url
from kyai.controllers._references import served_by
from kyai.controllers.evaluationrun import RunEngine
from kyai.engines import engine_for

sys.path.insert(0, str(Path(__file__).parents[1] / "controllers"))
from test_worker_pods import JUDGE_KEY, NS, RUN_NAME, obj, world

METRICS = "http://qwen-engine.team-a.svc:8000/metrics"


def args(**kwargs: Any) -> list[str]:
    generation = kwargs.pop("generation", GenerationSettings())
    return worker_args.generation_args(
        namespace="n", run="r", endpoint="http://e/v1", model="m", generation=generation,
        api_key=False, context_window=None, **kwargs,
    )  # fmt: skip


def test_streaming_is_the_default_and_stream_false_is_no_stream() -> None:
    assert "--no-stream" not in args()
    assert args(generation=GenerationSettings(stream=False))[-1] == "--no-stream"


def test_a_served_workloads_metrics_and_gpus_are_passed() -> None:
    given = args(server_metrics=METRICS, gpus=4)
    assert given[given.index("--server-metrics") + 1] == METRICS
    assert given[given.index("--gpus") + 1] == "4"
    plain = args(server_metrics=None, gpus=None)
    assert "--server-metrics" not in plain and "--gpus" not in plain


def eas(framework: str, **flags: Any) -> EngineArgsSetSpec:
    return EngineArgsSetSpec.model_validate({"framework": framework, "args": flags})


@pytest.mark.parametrize(
    ("framework", "engine_args", "expected"),
    [
        ("vllm", None, True),  # vLLM always serves /metrics
        ("vllm", eas("vllm", **{"max-model-len": 4096}), True),
        ("sglang", None, False),  # SGLang only with --enable-metrics
        ("sglang", eas("sglang", **{"enable-metrics": True}), True),
        ("sglang", eas("sglang", enable_metrics=True), True),  # any spelling
        ("sglang", eas("sglang", **{"enable-metrics": False}), False),
        ("sglang", EngineArgsSetSpec(framework="sglang", extra_args=["--enable-metrics"]), True),
        ("trtllm", None, False),  # its /metrics is JSON iteration stats, not Prometheus
    ],
)
def test_the_engine_profile_says_whether_it_serves_metrics(
    framework: str, engine_args: EngineArgsSetSpec | None, expected: bool
) -> None:
    assert engine_for(framework).serves_metrics(engine_args) is expected


def test_the_metrics_url_is_the_engine_services() -> None:
    assert workload_metrics_url("qwen", "team-a", "/metrics") == METRICS


def served(replicas: int = 1, gpus: int = 2, endpoint: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"framework": "vllm", "model": "m", "replicas": replicas,
                            "resources": {"gpus": gpus}}  # fmt: skip
    status = {"phase": "Ready", "endpoint": "http://cand-engine.team-a.svc:8000/v1",
              "servedModelName": "m", "metricsUrl": METRICS}  # fmt: skip
    if endpoint:
        spec = {"framework": "vllm", "model": "m", "endpoint": {"url": "http://c/v1"}}
    return obj("Workload", "cand", spec, status)


def test_what_a_served_workload_adds_to_its_runs() -> None:
    two = served_by(served(replicas=2, gpus=4))
    assert (two.gpus, two.metrics_url) == (8, METRICS)  # GPUs per replica x replicas
    cpu = served_by(served(gpus=0))
    assert cpu.gpus is None  # a CPU-only engine: no GPU-seconds (--gpus needs at least 1)
    elsewhere = served_by(served(endpoint=True))
    assert (elsewhere.gpus, elsewhere.metrics_url) == (None, None)


async def plan_of(workload: dict[str, Any], **generation: Any) -> tuple[GeneratePlan, list[str]]:
    svc, kube = world(copy.deepcopy(JUDGE_KEY))
    kube.put(workload)
    run_spec = {
        "workloadRef": {"name": "cand"}, "snapshotRef": {"name": "snap"},
        "judge": {"type": "llm", "llm": {"endpoint": "http://j/v1", "model": "j",
                                         "apiKeySecretRef": {"name": "judge-key"}}},
        "generation": generation,
    }  # fmt: skip
    kube.put(obj("EvaluationRun", RUN_NAME, run_spec, {}))
    run = await kube.get("EvaluationRun", NS, RUN_NAME)
    assert run is not None
    await RunEngine(svc, run).reconcile()
    status = kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]
    assert status["phase"] == "Generating", status
    plan = GeneratePlan.model_validate(status["plan"])
    job = kube.objects[("Job", NS, build.generation_job_name(RUN_NAME))]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return plan, list(container["args"])


async def test_the_generation_job_of_a_served_workload_reads_its_engine() -> None:
    plan, job_args = await plan_of(served(replicas=1, gpus=2))
    flags = plan.generation_args
    assert job_args[job_args.index("--server-metrics") + 1] == METRICS  # what the Job runs
    assert flags[flags.index("--server-metrics") + 1] == METRICS
    assert flags[flags.index("--gpus") + 1] == "2"
    assert "--no-stream" not in flags


async def test_the_generation_job_of_an_endpoint_gets_neither() -> None:
    plan, job_args = await plan_of(served(endpoint=True), stream=False)
    flags = plan.generation_args
    assert "--no-stream" in job_args
    assert "--server-metrics" not in flags and "--gpus" not in flags
    assert "--no-stream" in flags
