"""Kueue: the queue labels carried to Jobs and engine pods, and what Kueue's Workload says.

A queue name Kueue can never take (its ValidateQueueName: a lowercase RFC 1123 subdomain; a
label value: at most 63 characters) stalls the run, Workload, sweep (and Snapshot, in
test_snapshot_source) at once with nothing made, and is refused as the operator's default.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kyai.api import WorkloadSpec
from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.builders import evaluation as build
from kyai.builders import workload_deployment
from kyai.builders.queue import (
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    queue_label_problem,
    queue_labels,
)
from kyai.builders.snapshot import load_job_name, snapshot_load_job
from kyai.controllers import _conditions as c
from kyai.controllers import _kueue as kueue
from kyai.controllers._pods import may_be_stuck
from kyai.controllers.scheduling import resync_verdict
from kyai.controllers.snapshot import reconcile_snapshot
from kyai.controllers.workload import reconcile_workload
from kyai.settings import OperatorSettings, queue_name_problem
from kyai.sweeps import cell_run, derived_workload
from kyai.sweeps._cells import Cell, Variant

sys.path.insert(0, str(Path(__file__).parent))
import test_sweep_controller as sweeps_t
from test_worker_pods import (
    NS,
    RUN_NAME,
    SNAPSHOT,
    WORKLOAD,
    MemoryKube,
    condition,
    obj,
    run_object,
    step,
    world,
)
from test_worker_pods import stamp as ago

NOW = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
PENDING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
    "flavor default-flavor, 1 more needed"
)
EVICTED = (
    "Preempted to accommodate a workload (UID: 1a, JobUID: 2b) due to prioritization in the "
    "ClusterQueue"
)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner(kind: str = "EvaluationRun", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "r", "namespace": "ns", "uid": "u-1", "labels": labels},
        "spec": {},
    }


# -- labels ---------------------------------------------------------------------------------


def test_queue_labels_come_from_the_object_else_the_default() -> None:
    labelled = owner(**{QUEUE_NAME_LABEL: "team", PRIORITY_CLASS_LABEL: "high", "x": "y"})
    assert queue_labels(labelled, "fallback") == {QUEUE_NAME_LABEL: "team",
                                                  PRIORITY_CLASS_LABEL: "high"}  # fmt: skip
    assert queue_labels(owner(), "fallback") == {QUEUE_NAME_LABEL: "fallback"}
    assert queue_labels(owner(**{PRIORITY_CLASS_LABEL: "high"}), "d") == {
        QUEUE_NAME_LABEL: "d", PRIORITY_CLASS_LABEL: "high",
    }  # fmt: skip
    # No queue and no default: nothing (a priority alone means nothing to Kueue).
    assert queue_labels(owner(**{PRIORITY_CLASS_LABEL: "high"}), None) == {}
    assert queue_labels(owner(**{QUEUE_NAME_LABEL: ""}), "") == {}


def job_of(**kwargs: Any) -> dict[str, Any]:
    job = build.WorkerJob(name="r-generate", component="generate", args=["generate"])
    return build.worker_job(
        owner(), job, image="img", image_pull_policy="Never", results_claim="r-results",
        backoff_limit=0, active_deadline_seconds=None, **kwargs,
    )  # fmt: skip


def test_a_queued_worker_job_carries_the_labels_and_starts_suspended() -> None:
    queued = job_of(queue={QUEUE_NAME_LABEL: "team", PRIORITY_CLASS_LABEL: "low"}, suspend=True)
    assert queued["metadata"]["labels"][QUEUE_NAME_LABEL] == "team"
    assert queued["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "low"
    assert queued["spec"]["suspend"] is True
    plain = job_of()
    assert "suspend" not in plain["spec"]
    assert not any(key.startswith("kueue.x-k8s.io") for key in plain["metadata"]["labels"])


def test_the_snapshot_load_job_is_queued_the_same_way() -> None:
    snapshot = owner("Snapshot")
    job = snapshot_load_job(snapshot, image="i", image_pull_policy="Never", expect_sha256="0",
                            queue={QUEUE_NAME_LABEL: "team"}, suspend=True)  # fmt: skip
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == "team" and job["spec"]["suspend"]
    plain = snapshot_load_job(snapshot, image="i", image_pull_policy="Never", expect_sha256="0")
    assert "suspend" not in plain["spec"] and QUEUE_NAME_LABEL not in plain["metadata"]["labels"]


def test_the_engine_deployment_and_its_pods_carry_the_workloads_queue() -> None:
    spec = WorkloadSpec.model_validate(
        {"framework": "vllm", "model": "m", "resources": {"gpus": 1}}
    )
    body = owner("Workload", **{QUEUE_NAME_LABEL: "team", PRIORITY_CLASS_LABEL: "high"})
    made = workload_deployment("r", "ns", spec, None, OperatorSettings(), body)
    for labels in (made["metadata"]["labels"], made["spec"]["template"]["metadata"]["labels"]):
        assert labels[QUEUE_NAME_LABEL] == "team" and labels[PRIORITY_CLASS_LABEL] == "high"
    # The selector stays the Workload's own: a queue change rolls pods, never orphans them.
    assert QUEUE_NAME_LABEL not in made["spec"]["selector"]["matchLabels"]
    by_default = workload_deployment(
        "r", "ns", spec, None, OperatorSettings(default_queue_name="gpus"), owner("Workload")
    )
    assert by_default["spec"]["template"]["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpus"
    plain = workload_deployment("r", "ns", spec, None, OperatorSettings(), owner("Workload"))
    assert QUEUE_NAME_LABEL not in plain["spec"]["template"]["metadata"]["labels"]


def test_a_sweeps_queue_passes_to_its_runs_and_derived_workloads() -> None:
    sweep = owner("EvaluationSweep", **{QUEUE_NAME_LABEL: "team", PRIORITY_CLASS_LABEL: "low"})
    spec = EvaluationSweepSpec.model_validate(
        {"workloads": [{"name": "base"}], "snapshots": [{"name": "s"}]}
    )
    variant = Variant(workload="base", engine_args_set="fp8", name="base-fp8", hash="h")
    cell = Cell(workload="base", engine_args_set="fp8", snapshot="s", hash="c",
                candidate="base-fp8", variant=variant)  # fmt: skip
    run = cell_run(sweep, spec, cell)
    assert run["metadata"]["labels"][QUEUE_NAME_LABEL] == "team"
    assert run["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "low"
    base = owner("Workload", **{QUEUE_NAME_LABEL: "base-queue"})
    derived = derived_workload(sweep, variant, base)
    assert derived["metadata"]["labels"][QUEUE_NAME_LABEL] == "team"
    # A sweep without a queue: the derived Workload keeps its base's.
    derived = derived_workload(owner("EvaluationSweep"), variant, base)
    assert derived["metadata"]["labels"][QUEUE_NAME_LABEL] == "base-queue"


# -- what Kueue's Workload says -------------------------------------------------------------


def kueue_workload(*conditions: tuple[str, str, str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-r-generate-1a2b3", "creationTimestamp": stamp(300)},
        "status": {
            "conditions": [
                {"type": kind, "status": status, "reason": reason, "message": message,
                 "lastTransitionTime": stamp(120)}
                for kind, status, reason, message in conditions
            ]
        },
    }  # fmt: skip


def test_pending_quota_is_waiting_for_quota_with_kueues_message() -> None:
    wait = kueue.queue_wait(kueue_workload(("QuotaReserved", "False", "Pending", PENDING)))
    assert wait is not None and wait.reason == c.WAITING_FOR_QUOTA and wait.kueue == PENDING
    message = kueue.describe(wait, "the generation Job r-generate", "team", now=NOW)
    assert message == (
        f"the generation Job r-generate waits for Kueue to admit it in LocalQueue team: "
        f"{PENDING} (for 2 min)"
    )
    inadmissible = kueue_workload(
        ("QuotaReserved", "False", "Inadmissible", "LocalQueue team doesn't exist")
    )
    held = kueue.queue_wait(inadmissible)
    assert held is not None and held.kueue == "LocalQueue team doesn't exist"
    assert kueue.queue_wait(None) is not None  # Kueue has not made it yet: still waiting


def test_admitted_or_finished_is_no_wait() -> None:
    admitted = kueue_workload(
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
    )
    assert kueue.queue_wait(admitted) is None
    finished = kueue_workload(("Finished", "True", "Succeeded", "done"))
    assert kueue.queue_wait(finished) is None
    # Re-admitted after an eviction: Evicted turned False ("Previously: ...").
    again = kueue_workload(
        ("Evicted", "False", "QuotaReserved", f"Previously: {EVICTED}"),
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
    )
    assert kueue.queue_wait(again) is None


def test_an_evicted_workload_is_preempted_with_both_messages() -> None:
    evicted = kueue_workload(
        ("Evicted", "True", "Preempted", EVICTED),
        ("Preempted", "True", "InClusterQueue", EVICTED),
        ("Requeued", "True", "Preempted", EVICTED),
        ("QuotaReserved", "False", "Pending", PENDING),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
    )
    wait = kueue.queue_wait(evicted)
    assert wait is not None and wait.reason == c.PREEMPTED
    assert wait.kueue == f"{EVICTED}; now: {PENDING}"
    assert "was preempted by Kueue in LocalQueue team" in kueue.describe(wait, "x", "team")
    # Still admitted while its pods go: the eviction is what counts.
    going = kueue_workload(
        ("Evicted", "True", "Preempted", EVICTED),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
    )
    going_wait = kueue.queue_wait(going)
    assert going_wait is not None and going_wait.reason == c.PREEMPTED


def test_engine_pods_gated_or_evicted_by_kueue() -> None:
    gated = {"metadata": {}, "spec": {"schedulingGates": [{"name": kueue.ADMISSION_GATE}]}}
    assert kueue.gated(gated)
    assert not kueue.gated({"metadata": {}, "spec": {"schedulingGates": [{"name": "other"}]}})
    evicted = {"status": {"conditions": [
        {"type": "TerminationTarget", "status": "True", "reason": "StoppedByKueue",
         "message": EVICTED},
    ]}}  # fmt: skip
    assert kueue.evicted_message(evicted) == EVICTED
    assert kueue.evicted_message({"status": {}}) is None


# -- queue time is no start-up time -----------------------------------------------------------


def job(*, created_ago: float, started_ago: float | None = None, suspend: bool = False) -> Any:
    status: dict[str, Any] = {}
    if started_ago is not None:
        status["startTime"] = stamp(started_ago)
    return {
        "metadata": {"name": "r-generate", "creationTimestamp": stamp(created_ago)},
        "spec": {"suspend": suspend},
        "status": status,
    }


def test_a_suspended_job_is_never_stuck_and_grace_counts_from_its_start() -> None:
    assert not may_be_stuck(job(created_ago=900, suspend=True), grace=15, now=NOW)
    # Admitted 5 s ago after 15 minutes in the queue: within its grace.
    assert not may_be_stuck(job(created_ago=900, started_ago=5), grace=15, now=NOW)
    assert may_be_stuck(job(created_ago=900, started_ago=30), grace=15, now=NOW)
    assert may_be_stuck(job(created_ago=30), grace=15, now=NOW)  # never started: its age


def run_in(phase: str, reason: str = "Generating") -> dict[str, Any]:
    return {
        "metadata": {"name": "r", "namespace": "ns", "creationTimestamp": stamp(600)},
        "status": {
            "phase": phase, "generationJob": "r-generate",
            "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": "m",
                            "lastTransitionTime": stamp(60)}],
        },
    }  # fmt: skip


def test_the_resync_looks_at_runs_whose_job_kueue_holds() -> None:
    settings = OperatorSettings()
    suspended = {"r-generate": job(created_ago=600, suspend=True)}
    verdict = resync_verdict(run_in("Generating"), suspended, now=NOW, settings=settings)
    assert (verdict.reason, verdict.act) == (c.WAITING_FOR_QUOTA, True)
    # Admitted again, the run still says Preempted: looked at, to say Generating again.
    running = {"r-generate": job(created_ago=600, started_ago=2)}
    verdict = resync_verdict(run_in("Generating", c.PREEMPTED), running, now=NOW,
                             settings=settings)  # fmt: skip
    assert (verdict.reason, verdict.act) == (c.PREEMPTED, True)
    # A run that never waited: its running Job is left to its events.
    verdict = resync_verdict(run_in("Generating"), running, now=NOW, settings=settings)
    assert (verdict.reason, verdict.act) == ("JobRunning", False)


def test_waiting_for_quota_is_reconciling_not_stalled() -> None:
    reconciling, stalled = c.kstatus_changes("EvaluationRun", "Generating", c.WAITING_FOR_QUOTA,
                                             "waits", created=stamp(9999), at=stamp(0))  # fmt: skip
    assert reconciling.status is True and stalled.status is False


# -- Argo CD health -----------------------------------------------------------------------------

_LUA = Path(__file__).resolve().parents[2] / "system" / "argocd_health.py"


def test_argo_cd_reads_a_run_waiting_for_quota_as_progressing() -> None:
    pytest.importorskip("lupa", reason="lupa (the dev extra) runs the Lua health checks")
    spec = importlib.util.spec_from_file_location("argocd_health_kueue", _LUA)
    assert spec is not None and spec.loader is not None
    health = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health)
    message = f"the generation Job r-generate waits for Kueue to admit it: {PENDING}"
    run = {
        "apiVersion": "kyai.io/v1alpha1", "kind": "EvaluationRun",
        "metadata": {"name": "r", "namespace": "ns"},
        "status": {"phase": "Generating", "message": message, "conditions": [
            {"type": "Ready", "status": "False", "reason": "WaitingForQuota", "message": message},
            {"type": "Progressing", "status": "False", "reason": "WaitingForQuota",
             "message": message},
            {"type": "Reconciling", "status": "True", "reason": "WaitingForQuota",
             "message": message},
            {"type": "Stalled", "status": "False", "reason": "Generating", "message": ""},
        ]},
    }  # fmt: skip
    assert health.health(run) == {
        "status": "Progressing",
        "message": f"Generating (held): {message}",
    }
    workload = {
        "apiVersion": "kyai.io/v1alpha1", "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "status": {"phase": "Deploying", "message": message, "conditions": [
            {"type": "Ready", "status": "False", "reason": "WaitingForQuota", "message": message},
            {"type": "Reconciling", "status": "True", "reason": "WaitingForQuota",
             "message": message},
            {"type": "Stalled", "status": "False", "reason": "Deploying", "message": ""},
        ]},
    }  # fmt: skip
    assert health.health(workload)["status"] == "Progressing"


# -- a run generating against a served engine Kueue preempts ---------------------------------


class DeletingKube(MemoryKube):
    """The in-memory API, with a foreground DELETE: the object stays, marked, until removed."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        super().__init__(*objects)
        self.foreground: list[str] = []

    async def request(self, method: str, path: str, *, body: Any = None, **kw: Any) -> Any:
        if method != "DELETE":
            return await super().request(method, path, body=body, **kw)
        assert body == {"propagationPolicy": "Foreground"}, body
        name = path.rsplit("/", 1)[-1]
        self.foreground.append(name)
        self.objects[("Job", NS, name)]["metadata"]["deletionTimestamp"] = ago(0)
        return {}


def engine_says(kube: MemoryKube, phase: str, reason: str, message: str) -> None:
    workload = kube.objects[("Workload", NS, "cand")]
    workload["status"] = {
        **workload["status"], "phase": phase,
        "conditions": [{"type": "Ready", "status": str(phase == "Ready"), "reason": reason,
                        "message": message, "lastTransitionTime": ago(1)}],
    }  # fmt: skip


async def test_a_run_stops_its_generation_while_kueue_holds_its_engine_then_goes_on() -> None:
    svc, _ = world()
    kube = DeletingKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT))
    svc.kube = kube  # type: ignore[assignment]
    kube.put(run_object())
    assert (await step(svc, kube)).phase == "Generating"
    name = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, name)]["status"] = {"active": 1, "startTime": ago(5)}
    # Kueue evicted the engine's pod: the Workload goes Deploying, Preempted.
    said = "the engine's pod cand-engine-x was preempted by Kueue in LocalQueue team: " + EVICTED
    engine_says(kube, "Deploying", c.PREEMPTED, said)
    status = await step(svc, kube)
    assert status.phase == "Generating"
    ready_status, reason, message = condition(status, "Ready")
    assert (ready_status, reason) == ("False", c.PREEMPTED)
    assert message.startswith(f"the Workload cand is not Ready: {said}; the generation Job ")
    assert "goes on from the answers it stored" in message
    assert condition(status, "Progressing")[0] == "False"  # waiting: the Workload wakes it
    assert condition(status, "Stalled")[0] == "False"
    assert kube.foreground == [name]  # its pods go before the Job does
    # Deleting, then gone, while the engine still waits for quota: nothing made, no second
    # DELETE; the run says the new reason.
    engine_says(kube, "Deploying", c.WAITING_FOR_QUOTA, "the engine's pod waits: " + PENDING)
    await step(svc, kube)
    assert kube.foreground == [name]
    del kube.objects[("Job", NS, name)]
    status = await step(svc, kube)
    assert await kube.get("Job", NS, name) is None
    assert condition(status, "Ready")[1] == c.WAITING_FOR_QUOTA and status.phase == "Generating"
    # Ready again: the Job is made again (it goes on from the stored rows), the run resumes.
    engine_says(kube, "Ready", "Ready", "serving")
    await step(svc, kube)
    assert await kube.get("Job", NS, name) is not None
    kube.objects[("Job", NS, name)]["status"] = {"active": 1, "startTime": ago(0)}
    status = await step(svc, kube)
    assert condition(status, "Ready")[1] == c.GENERATING and status.phase == "Generating"
    assert condition(status, "Progressing")[0] == "True"
    # A finished generation is not stopped by a later eviction: the run goes on to judging.
    kube.objects[("Job", NS, name)]["status"] = {
        "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    engine_says(kube, "Deploying", c.PREEMPTED, said)
    status = await step(svc, kube)
    assert status.phase == "Judging" and kube.foreground == [name]


# -- a Snapshot whose load Job waits for quota ------------------------------------------------


class KueueKube(MemoryKube):
    """The in-memory API with Kueue's: its discovery and one Kueue Workload per Job uid."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        super().__init__(*objects)
        self.kueue: dict[str, dict[str, Any]] = {}

    async def request(self, method: str, path: str, *, body: Any = None, **kw: Any) -> Any:
        if method == "GET" and path == kueue.KUEUE_API:
            return {"kind": "APIResourceList"}
        if method == "GET" and path.endswith("/workloads"):
            uid = kw["params"]["labelSelector"].split("=", 1)[1]
            return {"items": [self.kueue[uid]] if uid in self.kueue else []}
        return await super().request(method, path, body=body, **kw)


def resolving_snapshot() -> dict[str, Any]:
    """A large Snapshot queued in LocalQueue team, its load Job writing its 9 rows."""
    snapshot = obj(
        "Snapshot", "big",
        {"source": {"url": {"url": "https://x/rows.jsonl", "sha256": "ab" * 32}},
         "prompts": {"generation": "{instruction}", "judge": "{response}"}},
        {"phase": "Resolving", "message": "writing 9 rows", "claim": "big-rows", "rows": 9,
         "sha256": "ab" * 32, "conditions": [
             {"type": "Ready", "status": "Unknown", "reason": c.RESOLVING,
              "message": "writing 9 rows", "lastTransitionTime": ago(30)}]},
    )  # fmt: skip
    snapshot["metadata"]["labels"] = {QUEUE_NAME_LABEL: "team"}
    return snapshot


def load_job(*, suspend: bool, status: dict[str, Any]) -> dict[str, Any]:
    """That Snapshot's load Job (queued in team)."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": load_job_name("big"), "namespace": NS, "uid": "load-uid",
                     "labels": {QUEUE_NAME_LABEL: "team"}},
        "spec": {"suspend": suspend}, "status": status,
    }  # fmt: skip


async def test_a_snapshot_whose_load_job_waits_for_quota_says_so() -> None:
    snapshot = resolving_snapshot()
    job_name = load_job_name("big")
    load = load_job(suspend=True, status={})
    kube = KueueKube(snapshot, load)
    kube.kueue["load-uid"] = kueue_workload(("QuotaReserved", "False", "Pending", PENDING))
    svc, _ = world()
    svc.kube = kube  # type: ignore[assignment]

    async def look() -> tuple[float | None, dict[str, Any]]:
        body = await kube.get("Snapshot", NS, "big")
        assert body is not None
        again = await reconcile_snapshot(svc, body)
        found = await kube.get("Snapshot", NS, "big")
        assert found is not None
        return again, found["status"]

    again, status = await look()
    (ready_condition,) = [cond for cond in status["conditions"] if cond["type"] == "Ready"]
    assert (ready_condition["status"], ready_condition["reason"]) == ("False", c.WAITING_FOR_QUOTA)
    assert ready_condition["message"].startswith(
        f"the load Job {job_name} waits for Kueue to admit it in LocalQueue team: {PENDING}"
    )
    assert status["phase"] == "Resolving" and again is not None and again > 0  # looked at again
    # Admitted: the Job runs, the Snapshot says Resolving again (and needs no look).
    kube.objects[("Job", NS, job_name)]["spec"]["suspend"] = False
    again, status = await look()
    (ready_condition,) = [cond for cond in status["conditions"] if cond["type"] == "Ready"]
    assert ready_condition["reason"] == c.RESOLVING and status["phase"] == "Resolving"
    assert again is None
    # Loaded: Ready.
    kube.objects[("Job", NS, job_name)]["status"] = {
        "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    _, status = await look()
    assert status["phase"] == "Ready"


# -- queue names Kueue can never take ------------------------------------------------------------

#: Kueue's ValidateQueueName: validation.IsDNS1123Subdomain; a label value: at most 63.
GOOD_QUEUES = ["team", "team-a", "team.a", "a", "0", "gpu-1.team-b", "q" * 63]
BAD_QUEUES = {
    "Team_Q": "upper-case letters, the character '_'",
    "team_q": "the character '_'",
    "TEAM": "upper-case letters",
    "-team": "a part (between dots) that is empty or starts or ends with '-'",
    "team-": "a part (between dots) that is empty or starts or ends with '-'",
    "a..b": "a part (between dots) that is empty or starts or ends with '-'",
    "a.-b": "a part (between dots) that is empty or starts or ends with '-'",
    "tëam q": "the characters ' ' 'ë'",
    "q" * 64: "64 characters",
}


def test_kueues_rule_for_a_queue_name_and_what_breaks_it() -> None:
    for good in GOOD_QUEUES:
        assert queue_name_problem(good) is None, good
    for bad, broken in BAD_QUEUES.items():
        problem = queue_name_problem(bad)
        assert problem is not None, bad
        assert problem.startswith("a queue name is a LocalQueue's name, which Kueue requires to "
                                  "be a lowercase RFC 1123 subdomain"), problem  # fmt: skip
        assert problem.endswith(f"; {bad!r} has {broken}"), problem


def test_the_operators_default_queue_is_checked_at_start_up() -> None:
    for good in [*GOOD_QUEUES, ""]:
        assert OperatorSettings(default_queue_name=good).default_queue_name == good
    with pytest.raises(ValidationError) as refused:
        OperatorSettings.from_env({"KYAI_DEFAULT_QUEUE_NAME": "Team_Q"})
    text = str(refused.value)
    assert "KYAI_DEFAULT_QUEUE_NAME (the chart's defaultQueueName) is 'Team_Q'" in text
    assert "lowercase RFC 1123 subdomain" in text and "upper-case letters" in text


def test_a_queue_label_kueue_cannot_take_is_named_with_the_rule() -> None:
    assert queue_label_problem(owner()) is None
    assert queue_label_problem(owner(**{QUEUE_NAME_LABEL: ""})) is None  # empty: no queue
    assert queue_label_problem(owner(**{QUEUE_NAME_LABEL: "team.a"})) is None
    said = queue_label_problem(owner("Workload", **{QUEUE_NAME_LABEL: "Team_Q"}))
    assert said == (
        f"the label {QUEUE_NAME_LABEL} is 'Team_Q', which no Kueue LocalQueue can be named: "
        f"{queue_name_problem('Team_Q')}; no engine is deployed for it until the label names a "
        "LocalQueue (or is removed)"
    )


def test_no_workload_yet_blames_what_can_cause_it_not_the_namespace_alone() -> None:
    held = kueue.queue_wait(None)
    assert held is not None and held.reason == c.WAITING_FOR_QUOTA
    assert "is Kueue managing this namespace" not in held.kueue
    assert "WorkloadPriorityClass" in held.kueue and "integrations.frameworks" in held.kueue


async def test_a_run_with_a_queue_kueue_cannot_take_is_stalled_and_makes_nothing() -> None:
    run = run_object()
    run["metadata"]["labels"] = {QUEUE_NAME_LABEL: "Team_Q"}
    svc, _ = world()
    kube = KueueKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT), run)
    svc.kube = kube  # type: ignore[assignment]
    status = await step(svc, kube)
    assert status.phase == "Pending"
    ready, stalled = condition(status, "Ready"), condition(status, "Stalled")
    assert ready[:2] == ("False", c.INVALID_QUEUE_NAME)
    assert stalled[:2] == ("True", c.INVALID_QUEUE_NAME)
    assert ready[2].startswith(f"the label {QUEUE_NAME_LABEL} is 'Team_Q', which no Kueue")
    assert ready[2].endswith("the run does not start until the label names a LocalQueue "
                             "(or is removed)")  # fmt: skip
    assert {kind for kind, _, _ in kube.objects} == {"Workload", "Snapshot", "EvaluationRun"}
    # Relabelled: it starts (its Jobs carry the queue).
    kube.objects[("EvaluationRun", NS, RUN_NAME)]["metadata"]["labels"] = {
        QUEUE_NAME_LABEL: "team-q"
    }
    status = await step(svc, kube)
    assert status.phase == "Generating" and condition(status, "Stalled")[0] == "False"
    (job,) = [o for (kind, _, _), o in kube.objects.items() if kind == "Job"]
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == "team-q"
    assert job["spec"]["suspend"] is True  # for Kueue to start


async def test_a_workload_with_a_queue_kueue_cannot_take_deploys_nothing() -> None:
    served = obj("Workload", "engine", {"framework": "vllm", "model": "org/m"}, {})
    served["metadata"]["labels"] = {QUEUE_NAME_LABEL: "GPU_Queue"}
    svc, kube = world(served)
    await reconcile_workload(svc, NS, "engine")
    found = kube.objects[("Workload", NS, "engine")]["status"]
    said = {cond["type"]: (cond["status"], cond["reason"]) for cond in found["conditions"]}
    assert found["phase"] == "Pending"
    assert said["Ready"] == ("False", c.INVALID_QUEUE_NAME)
    assert said["Stalled"] == ("True", c.INVALID_QUEUE_NAME)
    assert "'GPU_Queue'" in found["message"] and "no engine is deployed" in found["message"]
    assert not [key for key in kube.objects if key[0] in ("Deployment", "Service")]


async def test_a_sweep_with_a_queue_kueue_cannot_take_makes_no_run_or_workload() -> None:
    kube = sweeps_t.MemoryKube()
    for item in (sweeps_t.served("qwen"), sweeps_t.engine_args("a"), sweeps_t.snapshot("s1")):
        kube.put(item)
    sweep = sweeps_t.sweep_object(workloads=[{"name": "qwen"}], engineArgsSets=[{"name": "a"}])
    sweep["metadata"]["labels"] = {QUEUE_NAME_LABEL: "Team_Q"}
    kube.put(sweep)
    outcome = await sweeps_t.reconcile(kube)
    assert outcome.created_runs == [] and outcome.created_workloads == []
    assert sweeps_t.condition(kube, c.READY) == ("False", c.INVALID_QUEUE_NAME)
    assert sweeps_t.condition(kube, c.STALLED) == ("True", c.INVALID_QUEUE_NAME)
    assert "no run or Workload is made for it" in (sweeps_t.status(kube).message or "")
