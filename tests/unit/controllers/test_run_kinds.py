"""Every failure mode of a run, over every kind of run (the engine's, not a kind's own).

A missing API-key Secret is named while the run waits; a worker pod that cannot start is
reported, then fails the run at the deadline; a failed Job's cause is in the run's
condition; a reference deleted mid-run never hangs the run. Against the in-memory API of
test_worker_pods (no API server); each kind of the registry is a parameter.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EvaluationRunStatus
from kyai.builders import evaluation as build
from kyai.builders.lmeval import lmeval_job_name
from kyai.constants import IN_USE_FINALIZER
from kyai.controllers import _conditions as c
from kyai.controllers._inuse import release_if_unused
from kyai.controllers._result import Result
from kyai.controllers.evaluationrun import RunEngine
from kyai.controllers.kinds import RUN_KINDS

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import (
    JUDGE_KEY,
    NS,
    RUN_NAME,
    SNAPSHOT,
    WORKLOAD,
    MemoryKube,
    condition,
    obj,
    pod,
    stamp,
    terminated,
    waiting,
    world,
)

JUDGE = {"type": "llm", "llm": {"endpoint": "http://j/v1", "model": "judge",
                                "apiKeySecretRef": {"name": "judge-key"}}}  # fmt: skip
CANDIDATE_KEY = {
    "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cand-key", "namespace": NS},
    "data": {"api-key": "a2V5"},
}  # fmt: skip
KEYED_WORKLOAD = obj(
    "Workload", "cand",
    {"framework": "vllm", "model": "m",
     "endpoint": {"url": "http://c/v1", "apiKeySecretRef": {"name": "cand-key"}}},
    {"phase": "Ready", "endpoint": "http://c/v1", "servedModelName": "m"},
)  # fmt: skip
SOURCE = obj(
    "EvaluationRun", "src", {"workloadRef": {"name": "cand"}, "snapshotRef": {"name": "snap"}},
    {"phase": "Succeeded", "resultsClaim": "src-results", "resultsPath": "/results/src",
     "workload": "cand", "snapshot": "snap", "model": "m", "dataset": "mmlu-pro",
     "datasetVersion": "v1"},
)  # fmt: skip
JUDGED = {"avgScore": 0.5, "questions": 3, "errorCount": 0, "comparisonKey": "k"}
LM_EVAL = {"metrics": {"gsm8k/exact_match,strict-match": 0.5}}


@dataclass(frozen=True)
class Case:
    """One kind of run: its world, its spec, its first Job, and what it reads and holds."""

    objects: tuple[dict[str, Any], ...]
    spec: dict[str, Any]
    job: Callable[[str], str]
    component: str
    phase: str
    failed_reason: str
    secret: str
    result: dict[str, Any]
    held: tuple[str, str] | None = None
    gone_mid_run: tuple[str, str] = ("Snapshot", "snap")
    steps: int = 1


CASES = {
    "generate": Case(
        objects=(WORKLOAD, SNAPSHOT, JUDGE_KEY),
        spec={"workloadRef": {"name": "cand"}, "snapshotRef": {"name": "snap"}, "judge": JUDGE},
        job=build.generation_job_name, component="generate", phase="Generating",
        failed_reason=c.GENERATION_FAILED, secret="judge-key", result=JUDGED,
        held=("Snapshot", "snap"), steps=2,
    ),
    "rejudge": Case(
        objects=(SOURCE, JUDGE_KEY),
        spec={"generationFrom": {"runRef": {"name": "src"}}, "judge": JUDGE},
        job=build.judge_job_name, component="judge", phase="Judging",
        failed_reason=c.JUDGING_FAILED, secret="judge-key", result=JUDGED,
        gone_mid_run=("EvaluationRun", "src"),
    ),
    "lmEval": Case(
        objects=(KEYED_WORKLOAD, CANDIDATE_KEY),
        spec={"workloadRef": {"name": "cand"}, "lmEval": {"tasks": [{"name": "gsm8k"}]}},
        job=lmeval_job_name, component="lmeval", phase="Generating",
        failed_reason=c.GENERATION_FAILED, secret="cand-key", result=LM_EVAL,
        held=("Workload", "cand"), gone_mid_run=("Workload", "cand"),
    ),
}  # fmt: skip


def test_every_registered_kind_is_tested() -> None:
    assert set(CASES) == set(RUN_KINDS)


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    return CASES[request.param]


def start(case: Case, **settings: Any) -> tuple[Any, MemoryKube]:
    svc, kube = world(**settings)
    kube.objects.clear()
    for item in case.objects:
        kube.put(copy.deepcopy(item))
    kube.put(obj("EvaluationRun", RUN_NAME, copy.deepcopy(case.spec), {}))
    return svc, kube


async def step(svc: Any, kube: MemoryKube) -> tuple[EvaluationRunStatus, Result]:
    run = await kube.get("EvaluationRun", NS, RUN_NAME)
    assert run is not None
    result = await RunEngine(svc, run).reconcile()
    fresh = await kube.get("EvaluationRun", NS, RUN_NAME)
    assert fresh is not None
    return EvaluationRunStatus.model_validate(fresh["status"]), result


def finish(kube: MemoryKube, job: str, *, failed: bool = False) -> None:
    kind = "Failed" if failed else "Complete"
    kube.objects[("Job", NS, job)]["status"] = {
        "conditions": [{"type": kind, "status": "True", "message": "BackoffLimitExceeded"}]
    }


async def test_the_first_job_is_made_and_looked_at_after_the_start_grace(case: Case) -> None:
    svc, kube = start(case, job_start_grace_seconds=4)
    status, result = await step(svc, kube)
    assert status.phase == case.phase, status.message
    assert ("Job", NS, case.job(RUN_NAME)) in kube.objects
    assert status.plan is not None and status.plan.kind == RUN_KINDS[status.plan.kind].name
    assert result.requeue_after is not None and 4 < result.requeue_after <= 5


async def test_a_missing_api_key_secret_is_named_while_the_run_waits(case: Case) -> None:
    svc, kube = start(case)
    await kube.delete("Secret", NS, case.secret)
    status, _ = await step(svc, kube)
    assert status.phase == "Pending"
    _, reason, message = condition(status, c.READY)
    assert reason == c.SECRET_NOT_FOUND and case.secret in message, message
    assert ("Job", NS, case.job(RUN_NAME)) not in kube.objects
    secret = next(o for o in case.objects if o["metadata"]["name"] == case.secret)
    kube.put(copy.deepcopy(secret))
    status, _ = await step(svc, kube)
    assert status.phase == case.phase


async def test_a_pod_that_cannot_start_is_reported_then_fails_the_run(case: Case) -> None:
    svc, kube = start(case, worker_start_timeout_seconds=120, job_start_grace_seconds=15)
    await step(svc, kube)
    job = case.job(RUN_NAME)
    kube.objects[("Job", NS, job)]["metadata"]["creationTimestamp"] = stamp(20)
    stuck = waiting("ImagePullBackOff", 'Back-off pulling image "k:1"')
    kube.put(pod(job, case.component, stuck, age=30))
    status, result = await step(svc, kube)
    assert status.phase == case.phase
    _, reason, message = condition(status, c.PROGRESSING)
    assert reason == c.WORKER_NOT_STARTING and "ImagePullBackOff" in message, message
    # Looked at again when the deadline comes (120 s after the pod was made).
    assert result.requeue_after is not None and 85 <= result.requeue_after <= 92
    kube.put(pod(job, case.component, stuck, age=121))
    status, _ = await step(svc, kube)
    assert status.phase == "Failed"
    _, reason, message = condition(status, c.READY)
    assert reason == c.WORKER_NOT_STARTING and "120 s" in message and job in message
    assert ("Job", job) in kube.deleted


async def test_a_failed_job_says_its_cause(case: Case) -> None:
    svc, kube = start(case)
    await step(svc, kube)
    job = case.job(RUN_NAME)
    finish(kube, job, failed=True)
    said = f"kyai {case.component}: error: Cannot reach http://c/v1/models"
    kube.put(pod(job, case.component, terminated(said)))
    status, _ = await step(svc, kube)
    assert status.phase == "Failed"
    _, reason, message = condition(status, c.READY)
    assert reason == case.failed_reason
    assert said in message and job in message and "exited with code 3" in message


async def test_a_reference_deleted_mid_run_never_hangs(case: Case) -> None:
    svc, kube = start(case)
    status, _ = await step(svc, kube)
    kind, name = case.gone_mid_run
    if case.held is not None:
        held = kube.objects[(kind, NS, name)]
        assert IN_USE_FINALIZER in held["metadata"]["finalizers"]
        held["metadata"]["deletionTimestamp"] = stamp()
        assert not await release_if_unused(svc, kind, NS, name)  # held while it runs
    else:
        await kube.delete(kind, NS, name)  # a re-judge holds nothing: its source may go
    # The workers report their result; each Job finishes in turn.
    kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"].update(copy.deepcopy(case.result))
    for _ in range(case.steps):
        assert status.phase in ("Generating", "Judging"), status.message
        finish(kube, status.current_job() or "")
        status, _ = await step(svc, kube)
    assert status.phase == "Succeeded", status.message
    if case.held is not None:  # released once the run is done: the deletion goes on
        assert IN_USE_FINALIZER not in kube.objects[(kind, NS, name)]["metadata"]["finalizers"]
