"""A run records the EngineArgsSet that served it, and its hash, when it starts (issue 43).

A served Workload's status holds the hash of the EngineArgsSet its engine was rendered from
(its pods' ``kyai.io/engine-args-hash``); a generate or lm-eval run copies the set's name and
that hash into its own status, a re-judge its source run's. What served a run is then known
once its Workload is gone (a sweep deletes its derived Workloads when their cells end).
Against the in-memory API of test_worker_pods; ``/v1/models`` is answered by a stub.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EngineArgsSetSpec, EvaluationRunSpec, WorkloadStatus
from kyai.builders import engine_args_hash
from kyai.constants import ANNOTATION_ENGINE_ARGS_HASH
from kyai.controllers import workload as controller
from kyai.controllers._services import Services
from kyai.controllers.kinds import resolve

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, MemoryKube, obj, world

FLAGS = {"framework": "vllm", "args": {"max-num-seqs": 8}, "env": [{"name": "A", "value": "1"}]}
HASH = engine_args_hash(EngineArgsSetSpec.model_validate(FLAGS))
JUDGE = {"type": "llm", "llm": {"endpoint": "http://j/v1", "model": "judge"}}


@pytest.fixture(autouse=True)
def models(monkeypatch: pytest.MonkeyPatch) -> None:
    async def probe(url: str, *, api_key: str | None) -> list[dict[str, Any]]:
        return [{"id": "Qwen/Qwen3-8B", "max_model_len": 8192}]

    monkeypatch.setattr(controller, "probe_models", probe)


async def served() -> tuple[Services, MemoryKube]:
    """A served Workload ``qwen`` naming the EngineArgsSet ``flags``, reconciled to Ready."""
    svc, kube = world()
    kube.put(obj("EngineArgsSet", "flags", FLAGS, {}))
    spec = {"framework": "vllm", "model": "Qwen/Qwen3-8B", "engineArgsSetRef": {"name": "flags"}}
    kube.put(obj("Workload", "qwen", spec, {}))
    for _ in range(2):  # made, then a replica available: /v1/models is read
        body = copy.deepcopy(kube.objects[("Workload", NS, "qwen")])
        await controller.WorkloadReconciler(svc, body).reconcile()
        kube.objects[("Deployment", NS, "qwen-engine")]["status"] = {"availableReplicas": 1}
    return svc, kube


async def test_a_ready_workload_holds_the_hash_its_engine_was_rendered_from() -> None:
    _, kube = await served()
    status = WorkloadStatus.model_validate(kube.objects[("Workload", NS, "qwen")]["status"])
    template = kube.objects[("Deployment", NS, "qwen-engine")]["spec"]["template"]
    assert status.phase == "Ready"
    assert status.engine_args_hash == template["metadata"]["annotations"][
        ANNOTATION_ENGINE_ARGS_HASH] == HASH  # fmt: skip


@pytest.mark.parametrize(
    "fields",
    [
        {"snapshotRef": {"name": "snap"}, "judge": JUDGE},
        {"lmEval": {"tasks": [{"name": "gsm8k"}]}},
    ],
    ids=["generate", "lmEval"],
)
async def test_a_run_records_the_set_and_hash_of_its_workload(fields: dict[str, Any]) -> None:
    svc, _ = await served()
    spec = EvaluationRunSpec.model_validate({"workloadRef": {"name": "qwen"}, **fields})
    facts = (await resolve(svc, obj("EvaluationRun", "r1", {}, {}), spec)).facts
    assert (facts.engine_args_set, facts.engine_args_hash) == ("flags", HASH)
    written = facts.model_dump(by_alias=True, exclude_unset=True)
    assert (written["engineArgsSet"], written["engineArgsHash"]) == ("flags", HASH)


async def test_a_run_of_an_endpoint_workload_records_no_set() -> None:
    svc, _ = world()  # ``cand``: a model served elsewhere
    spec = EvaluationRunSpec.model_validate(
        {"workloadRef": {"name": "cand"}, "snapshotRef": {"name": "snap"}, "judge": JUDGE}
    )
    facts = (await resolve(svc, obj("EvaluationRun", "r1", {}, {}), spec)).facts
    written = facts.model_dump(by_alias=True, exclude_unset=True)
    assert "engineArgsSet" not in written and "engineArgsHash" not in written


async def test_a_rejudge_records_its_source_runs_set_and_hash() -> None:
    source = obj(
        "EvaluationRun", "src", {},
        {"phase": "Succeeded", "resultsClaim": "src-results", "resultsPath": "/results/src",
         "workload": "qwen-flags-1a2b3c4d", "engineArgsSet": "flags", "engineArgsHash": HASH,
         "dataset": "mmlu-pro", "datasetVersion": "v1"},
    )  # fmt: skip
    svc, _ = world(source)
    spec = EvaluationRunSpec.model_validate(
        {"generationFrom": {"runRef": {"name": "src"}}, "judge": JUDGE}
    )
    facts = (await resolve(svc, obj("EvaluationRun", "again", {}, {}), spec)).facts
    assert (facts.workload, facts.engine_args_set, facts.engine_args_hash) == (
        "qwen-flags-1a2b3c4d", "flags", HASH,
    )  # fmt: skip
