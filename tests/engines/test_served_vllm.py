"""A vLLM Workload served by the operator, its engine the real ``vllm serve`` (engines.served).

The devcluster runs the Workload's engine container as the launcher followed by exactly the
operator's command line (``kyai.engines.engine_command`` for the Workload and its
EngineArgsSet); an EvaluationRun against it Succeeds with every row answered, its status
holding the engine's own serving figures; deleting the Workload leaves no process of the
engine's group behind.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import time
from typing import Any

import httpx
import pytest

from engines.real_vllm import group_members, wait_group_gone
from engines.served import (
    ENGINE_ARGS,
    ROWS,
    RUN,
    WORKLOAD,
    Served,
    manifests,
    processes_of_pod,
)
from kyai.api import EngineArgsSetSpec, EvaluationRunStatus, WorkloadSpec, WorkloadStatus
from kyai.builders.evaluation import results_claim_name
from kyai.builders.workload import workload_selector
from kyai.engines import engine_command
from kyai_testing.real_engines import VLLM_LAUNCHER

pytestmark = [pytest.mark.engines, pytest.mark.timeout(420)]


def spec_of(served: Served, kind: str) -> dict[str, Any]:
    (manifest,) = [m for m in manifests(served.model) if m["kind"] == kind]
    spec: dict[str, Any] = manifest["spec"]
    return spec


def engine_pods(served: Served) -> list[dict[str, Any]]:
    selector = ",".join(f"{k}={v}" for k, v in workload_selector(WORKLOAD).items())
    return served.kubectl.items("pods", served.namespace, "-l", selector)


def engine_pod(served: Served) -> dict[str, Any]:
    pods = engine_pods(served)
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def non_default_args(log: str) -> dict[str, Any]:
    """What ``vllm serve`` logs as its non-default arguments (a Python dict's repr)."""
    match = re.search(r"non-default args: (\{.*\})", log)
    assert match is not None, log[-3000:]
    parsed: dict[str, Any] = ast.literal_eval(match.group(1))
    return parsed


def test_the_engine_runs_the_operators_command_line(served: Served) -> None:
    pod = engine_pod(served)
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "vllm/vllm-openai:v0.32.0"
    expected = engine_command(
        WorkloadSpec.model_validate(spec_of(served, "Workload")),
        EngineArgsSetSpec.model_validate(spec_of(served, "EngineArgsSet")),
    )
    assert container["command"] == expected.command and container["args"] == expected.args
    # The process: the launcher, then exactly that command line.
    pod_ip = pod["status"]["podIP"]
    cmdlines = {}
    for pid in processes_of_pod(pod_ip):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdlines[pid] = handle.read().decode().split("\0")[:-1]
        except OSError:
            continue
    (main,) = [argv for argv in cmdlines.values() if str(VLLM_LAUNCHER) in argv]
    assert main[main.index(str(VLLM_LAUNCHER)) + 1 :] == expected.argv
    # What vLLM made of it: the pod's address for 0.0.0.0, and every flag as declared (a
    # `false` too: the engine's metrics say prefix caching is off).
    log = served.kubectl.run("logs", "-n", served.namespace, pod["metadata"]["name"]).stdout
    args = non_default_args(log)
    assert args["host"] == pod_ip and args.get("port", 8000) == 8000  # 8000: the default
    assert args["max_model_len"] == ENGINE_ARGS["max-model-len"] and args["enforce_eager"] is True
    assert args["reasoning_parser"] == "deepseek_r1"
    assert args["override_generation_config"] == {"temperature": 0.0}
    assert args.get("enable_prefix_caching") is False, args
    metrics = httpx.get(f"http://{pod_ip}:8000/metrics", timeout=10).text
    (info,) = [line for line in metrics.splitlines() if line.startswith("vllm:cache_config_info{")]
    assert 'enable_prefix_caching="False"' in info, info


def test_an_evaluation_run_against_it_succeeds_with_the_engines_figures(served: Served) -> None:
    run = served.get("evaluationrun", RUN)
    status = EvaluationRunStatus.model_validate(run["status"])
    assert status.phase == "Succeeded", (run["status"], served.operator.logs()[-3000:])
    workload = WorkloadStatus.model_validate(served.get("workload", WORKLOAD)["status"])
    assert workload.max_model_len == ENGINE_ARGS["max-model-len"]
    assert workload.max_model_len_source == "server"
    assert workload.metrics_url == f"http://{WORKLOAD}-engine.{served.namespace}.svc:8000/metrics"
    # Every row answered, and right: the grader saw the content, not the reasoning.
    assert status.questions == len(ROWS) and status.avg_score == 1.0, run["status"]
    claim = served.cluster.cluster.claim_dir(served.namespace, results_claim_name(RUN))
    (generations,) = claim.rglob("generations.jsonl")
    records = [json.loads(line) for line in generations.read_text().splitlines()]
    assert len(records) == len(ROWS)
    for record in records:
        assert record["error"] is None, record
        assert record["content"] == served.model.answer
        assert record["reasoning"] == served.model.reasoning
        assert record["reasoning_content"] is None and record["streamed"] is True
    # The client's serving figures and the engine's own, read from its /metrics.
    serving = status.serving
    assert serving is not None and serving.streamed and serving.requests == len(ROWS)
    assert serving.ttft_p50_ms is not None
    server = serving.server
    assert server is not None and server.url == workload.metrics_url, serving
    assert server.requests == len(ROWS)
    assert server.output_tokens == sum(r["usage"]["completion_tokens"] for r in records)
    for figure in ("ttft_mean_ms", "itl_mean_ms", "e2e_mean_ms"):
        value = getattr(server, figure)
        assert value is not None and value > 0, (figure, server)


def test_deleting_the_workload_stops_every_engine_process(served: Served) -> None:
    pod = engine_pod(served)
    groups = set()
    for pid in processes_of_pod(pod["status"]["podIP"]):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    (pgid,) = groups  # the container is one process group: the API server and its engine
    members = group_members(pgid)
    assert len(members) >= 3, members  # the API server, EngineCore, its worker (at least)
    served.kubectl.run("delete", "workload", WORKLOAD, "-n", served.namespace, "--wait=true")
    deadline = time.monotonic() + 60
    while engine_pods(served) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not engine_pods(served), "the engine's pod outlived its Workload"
    left = wait_group_gone(pgid, timeout=30)
    assert not left, f"engine processes left after the Workload was deleted: {left}"
