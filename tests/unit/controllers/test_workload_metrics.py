"""A served Workload's status names its engine's Prometheus metrics where the engine has them.

Against the in-memory API of test_worker_pods; ``/v1/models`` is answered by a stub (the
real probe is tested against the stand-ins in tests/system).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.api import WorkloadStatus
from kyai.controllers import workload as controller

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, MemoryKube, obj, world


@pytest.fixture(autouse=True)
def models(monkeypatch: pytest.MonkeyPatch) -> None:
    async def probe(url: str, *, api_key: str | None) -> list[dict[str, Any]]:
        return [{"id": "Qwen/Qwen3-8B", "max_model_len": 8192}, {"id": "m", "max_model_len": 4096}]

    monkeypatch.setattr(controller, "probe_models", probe)


async def reconciled(framework: str, args: dict[str, Any]) -> WorkloadStatus:
    svc, kube = world()
    kube.put(obj("EngineArgsSet", "flags", {"framework": framework, "args": args}, {}))
    spec = {"framework": framework, "model": "Qwen/Qwen3-8B", "engineArgsSetRef": {"name": "flags"}}
    kube.put(obj("Workload", "qwen", spec, {}))
    await reconcile(svc, kube)  # the Deployment and Service are made
    deployment = kube.objects[("Deployment", NS, "qwen-engine")]
    deployment["status"] = {"availableReplicas": 1}
    await reconcile(svc, kube)  # a replica is available: /v1/models is read
    return WorkloadStatus.model_validate(kube.objects[("Workload", NS, "qwen")]["status"])


async def reconcile(svc: Any, kube: MemoryKube) -> None:
    body = copy.deepcopy(kube.objects[("Workload", NS, "qwen")])
    await controller.WorkloadReconciler(svc, body).reconcile()


@pytest.mark.parametrize(
    ("framework", "args", "metrics"),
    [
        ("vllm", {}, f"http://qwen-engine.{NS}.svc:8000/metrics"),
        ("sglang", {"enable-metrics": True}, f"http://qwen-engine.{NS}.svc:8000/metrics"),
        ("sglang", {}, None),
        ("trtllm", {}, None),
    ],
)
async def test_the_metrics_url_follows_the_engine_profile(
    framework: str, args: dict[str, Any], metrics: str | None
) -> None:
    status = await reconciled(framework, args)
    assert status.phase == "Ready", status.message
    assert status.metrics_url == metrics


async def test_an_endpoint_workload_has_no_metrics_url() -> None:
    svc, kube = world()  # its Workload "cand" has spec.endpoint
    body = copy.deepcopy(kube.objects[("Workload", NS, "cand")])
    await controller.WorkloadReconciler(svc, body).reconcile()
    status = WorkloadStatus.model_validate(kube.objects[("Workload", NS, "cand")]["status"])
    assert status.phase == "Ready" and status.metrics_url is None
