"""EngineArgsSets checked against the engine versions their Workloads run, where users look.

Against the in-memory API of test_worker_pods; ``/v1/models`` is answered by a stub. The
EngineArgsSet's own condition says Invalid at once (naming the flag and the nearest known
spelling); a Workload whose version refuses its EngineArgsSet is Failed and makes nothing;
a declared ``false`` reaches the Deployment as the engine's negative form.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EngineArgsSetStatus, WorkloadStatus
from kyai.controllers import workload as controller

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, MemoryKube, obj, world

OLD = "vllm/vllm-openai:v0.11.0"


@pytest.fixture(autouse=True)
def models(monkeypatch: pytest.MonkeyPatch) -> None:
    async def probe(url: str, *, api_key: str | None) -> list[dict[str, Any]]:
        return [{"id": "org/m", "max_model_len": 4096}]

    monkeypatch.setattr(controller, "probe_models", probe)


def flags(kube: MemoryKube, args: dict[str, Any], framework: str = "vllm") -> None:
    kube.put(obj("EngineArgsSet", "flags", {"framework": framework, "args": args}, {}))


def served(kube: MemoryKube, name: str, image: str | None = None, framework: str = "vllm") -> None:
    spec: dict[str, Any] = {"framework": framework, "model": "org/m",
                            "engineArgsSetRef": {"name": "flags"}}  # fmt: skip
    if image:
        spec["image"] = image
    kube.put(obj("Workload", name, spec, {}))


async def check(svc: Any, kube: MemoryKube) -> EngineArgsSetStatus:
    body = copy.deepcopy(kube.objects[("EngineArgsSet", NS, "flags")])
    await controller.reconcile_engine_args(svc, body)
    return EngineArgsSetStatus.model_validate(
        kube.objects[("EngineArgsSet", NS, "flags")]["status"]
    )


def workload(kube: MemoryKube, name: str) -> WorkloadStatus:
    return WorkloadStatus.model_validate(kube.objects[("Workload", NS, name)]["status"])


def ready(status: EngineArgsSetStatus | WorkloadStatus) -> tuple[str, str, str]:
    found = status.condition("Ready")
    assert found is not None
    return found.status, found.reason, found.message


def container(kube: MemoryKube, name: str) -> dict[str, Any]:
    deployment = kube.objects[("Deployment", NS, f"{name}-engine")]
    (engine,) = deployment["spec"]["template"]["spec"]["containers"]
    return engine  # type: ignore[no-any-return]


async def test_a_typo_is_invalid_at_once_naming_the_flag_meant() -> None:
    svc, kube = world()
    flags(kube, {"tensor-paralel-size": 1})
    served(kube, "cand-a")
    status = await check(svc, kube)
    assert status.phase == "Invalid"
    state, reason, message = ready(status)
    assert (state, reason) == ("False", "InvalidFlags")
    assert message == (
        "spec.args: `tensor-paralel-size` is not an option of vllm 0.34.0: did you mean "
        "`tensor-parallel-size`? (spec.extraArgs passes arguments unchecked) (checked against "
        "vllm 0.34.0)"
    )
    stalled = status.condition("Stalled")
    assert stalled is not None and stalled.status == "True"
    # The Workload naming it says so too, and nothing was made for it.
    wl = workload(kube, "cand-a")
    assert wl.phase == "Failed"
    state, reason, message = ready(wl)
    assert reason == "InvalidFlags"
    assert "the EngineArgsSet flags has flags vllm 0.34.0" in message
    assert "did you mean `tensor-parallel-size`?" in message
    assert ("Deployment", NS, "cand-a-engine") not in kube.objects
    await svc.events.aclose()
    assert ("Warning", "InvalidFlags") in {(e["type"], e["reason"]) for e in kube.events}


async def test_each_workload_is_checked_against_its_own_version() -> None:
    # --swap-space is in vLLM 0.11.0 and gone from 0.34.0 (the default image).
    svc, kube = world()
    flags(kube, {"swap-space": 4})
    served(kube, "pinned", image=OLD)
    status = await check(svc, kube)
    assert status.phase == "Ready"
    assert ready(status)[2] == "1 flags for vllm, checked against vllm 0.11.0"
    assert container(kube, "pinned")["args"][-2:] == ["--swap-space", "4"]
    served(kube, "current")
    status = await check(svc, kube)
    assert status.phase == "Invalid"
    assert "`swap-space` is not an option of vllm 0.34.0" in ready(status)[2]
    assert "(checked against vllm 0.11.0, vllm 0.34.0)" in ready(status)[2]
    assert workload(kube, "current").phase == "Failed"
    assert ("Deployment", NS, "current-engine") not in kube.objects
    assert ("Deployment", NS, "pinned-engine") in kube.objects


async def test_false_reaches_the_engine_as_its_negative_form() -> None:
    svc, kube = world()
    flags(kube, {"enable-prefix-caching": False, "enable-chunked-prefill": False})
    served(kube, "pinned", image="vllm/vllm-openai:v0.32.0")
    status = await check(svc, kube)
    assert status.phase == "Ready", status.message
    assert container(kube, "pinned")["args"][-2:] == [
        "--no-enable-chunked-prefill",
        "--no-enable-prefix-caching",
    ]


async def test_a_switch_off_by_default_passes_nothing_and_the_status_says_so() -> None:
    svc, kube = world()
    flags(kube, {"enable-metrics": False}, framework="sglang")
    served(kube, "sgl", framework="sglang")
    status = await check(svc, kube)
    assert status.phase == "Ready"
    assert ready(status)[2] == (
        "1 flags for sglang, checked against sglang 0.5.23; `enable-metrics`: false is "
        "sglang 0.5.23's default (nothing passed)"
    )
    assert "--enable-metrics" not in container(kube, "sgl")["args"]


async def test_a_version_without_a_table_warns_and_still_deploys() -> None:
    svc, kube = world()
    flags(kube, {"tensor-paralel-size": 1})
    served(kube, "custom", image="registry.local/vllm-custom:nightly")
    status = await check(svc, kube)
    assert status.phase == "Ready"
    message = ready(status)[2]
    assert "checked against an image whose tag names no version (no table of its own" in message
    assert "warnings: `tensor-paralel-size` is not an option of" in message
    # The flag reaches the engine, which will judge it (and the crash is reported there).
    assert container(kube, "custom")["args"][-2:] == ["--tensor-paralel-size", "1"]
    await svc.events.aclose()
    assert ("Warning", "UncheckedFlags") in {(e["type"], e["reason"]) for e in kube.events}
