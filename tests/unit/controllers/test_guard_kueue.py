"""Kueue behaviours users rely on that no other test held (issue 45, items 1-7).

What Kueue's Workload says of a Job read the way Kueue writes it (an eviction other than a
preemption, admission checks still pending, a wait of hours); a run's Jobs where Kueue is
not installed and under the operator's ``defaultQueueName``; a finished generation judged
while its engine is away; a Snapshot whose preempted load Job Kueue admits again.
"""

from __future__ import annotations

import copy
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from kyai.api import EvaluationRunStatus
from kyai.builders import evaluation as build
from kyai.builders.queue import QUEUE_NAME_LABEL
from kyai.builders.snapshot import load_job_name
from kyai.controllers import _conditions as c
from kyai.controllers import _kueue as kueue
from kyai.controllers._kube import KubeError
from kyai.controllers.snapshot import reconcile_snapshot

sys.path.insert(0, str(Path(__file__).parent))
from test_engine_away import SERVED, with_ready
from test_kueue import (
    EVICTED,
    NOW,
    PENDING,
    DeletingKube,
    KueueKube,
    kueue_workload,
    load_job,
    resolving_snapshot,
    stamp,
)
from test_worker_pods import (
    NS,
    RUN_NAME,
    SNAPSHOT,
    WORKLOAD,
    MemoryKube,
    condition,
    run_object,
    step,
    world,
)
from test_worker_pods import stamp as ago

#: Kueue's message when a Workload's pods were not all ready within waitForPodsReady.timeout
#: (its condition reason ``PodsReadyTimeout``); it writes the same words on QuotaReserved.
PODS_READY_TIMEOUT = "Exceeded the PodsReady timeout team-a/job-r-generate-1a2b3"


# -- 1. an eviction other than a preemption -----------------------------------------------------


def test_an_eviction_that_is_no_preemption_is_waiting_for_quota_with_kueues_reason() -> None:
    timed_out = kueue_workload(
        ("Evicted", "True", "PodsReadyTimeout", PODS_READY_TIMEOUT),
        ("Requeued", "True", "PodsReadyTimeout", PODS_READY_TIMEOUT),
        ("QuotaReserved", "False", "Pending", PODS_READY_TIMEOUT),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
    )
    wait = kueue.queue_wait(timed_out)
    assert wait is not None and wait.reason == c.WAITING_FOR_QUOTA
    assert wait.kueue == f"evicted by Kueue (PodsReadyTimeout): {PODS_READY_TIMEOUT}"
    assert wait.since == NOW - timedelta(seconds=120)
    assert kueue.describe(wait, "the generation Job r-generate", "team", now=NOW) == (
        "the generation Job r-generate waits for Kueue to admit it in LocalQueue team: "
        f"evicted by Kueue (PodsReadyTimeout): {PODS_READY_TIMEOUT} (for 2 min)"
    )
    # Then held by quota: both said, still no preemption.
    held = kueue_workload(
        ("Evicted", "True", "PodsReadyTimeout", PODS_READY_TIMEOUT),
        ("QuotaReserved", "False", "Pending", PENDING),
    )
    wait = kueue.queue_wait(held)
    assert wait is not None and wait.reason == c.WAITING_FOR_QUOTA
    assert wait.kueue == (
        f"evicted by Kueue (PodsReadyTimeout): {PODS_READY_TIMEOUT}; now: {PENDING}"
    )
    assert "preempted" not in kueue.describe(wait, "x", "team", now=NOW)


# -- 2. quota reserved, admission checks pending --------------------------------------------------


def test_reserved_quota_with_admission_checks_pending_still_waits() -> None:
    checking = kueue_workload(
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        ("Admitted", "False", "UnsatisfiedChecks", "The workload has not all checks ready"),
    )
    checking["status"]["admissionChecks"] = [
        {"name": "provisioning", "state": "Pending", "message": "Waiting for capacity",
         "lastTransitionTime": stamp(120)},
    ]  # fmt: skip
    wait = kueue.queue_wait(checking)
    assert wait is not None and wait.reason == c.WAITING_FOR_QUOTA
    assert wait.kueue == "quota reserved; waiting for Kueue's admission checks"
    assert wait.since == NOW - timedelta(seconds=120)  # since its quota was reserved
    assert kueue.describe(wait, "the judging Job r-judge", "team", now=NOW) == (
        "the judging Job r-judge waits for Kueue to admit it in LocalQueue team: quota "
        "reserved; waiting for Kueue's admission checks (for 2 min)"
    )


# -- 3. a wait of hours -------------------------------------------------------------------------


def test_a_queue_wait_over_an_hour_reads_in_hours_and_minutes() -> None:
    def after(minutes: float) -> str:
        return kueue.waited(NOW - timedelta(minutes=minutes), now=NOW)

    assert after(59.9) == "for 59 min"
    assert after(60) == "for 1 h 0 min"
    assert after(65) == "for 1 h 5 min"
    assert after(125.5) == "for 2 h 5 min"
    wait = kueue.QueueWait(c.WAITING_FOR_QUOTA, PENDING, NOW - timedelta(minutes=65))
    assert kueue.describe(wait, "x", None, now=NOW).endswith(f"{PENDING} (for 1 h 5 min)")


# -- 4. and 5. a run's Jobs: no Kueue, and the operator's defaultQueueName ----------------------


class NoKueueKube(MemoryKube):
    """The in-memory API of a cluster without Kueue: its API group is not served (404)."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        super().__init__(*objects)
        self.asked_kueue = 0

    async def request(self, method: str, path: str, *, body: Any = None, **kw: Any) -> Any:
        if path.startswith(kueue.KUEUE_API):
            self.asked_kueue += 1
            raise KubeError("the server could not find the requested resource", status=404)
        return await super().request(method, path, body=body, **kw)


def labelled_run(queue: str | None) -> dict[str, Any]:
    run = run_object()
    if queue is not None:
        run["metadata"]["labels"] = {QUEUE_NAME_LABEL: queue}
    return run


async def step_with(kube: MemoryKube, default_queue: str | None) -> EvaluationRunStatus:
    """Reconcile the run once on ``kube``, the operator's ``defaultQueueName`` as given."""
    settings: dict[str, Any] = {"default_queue_name": default_queue} if default_queue else {}
    svc, _ = world(**settings)
    svc.kube = kube  # type: ignore[assignment]
    return await step(svc, kube)


async def generation_job(kube: MemoryKube, default_queue: str | None) -> dict[str, Any]:
    """Step the run once on ``kube``; its generation Job (the run is Generating)."""
    status = await step_with(kube, default_queue)
    assert status.phase == "Generating", status
    job = await kube.get("Job", NS, build.generation_job_name(RUN_NAME))
    assert job is not None
    return job


async def test_without_kueue_a_queued_run_still_runs_its_jobs_are_not_suspended() -> None:
    for label, default in (("team", None), (None, "gpus"), ("team", "gpus")):
        kube = NoKueueKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT), labelled_run(label))
        job = await generation_job(kube, default)
        assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == (label or default)
        assert not job["spec"].get("suspend"), (label, default)
        assert kube.asked_kueue  # asked, and told it is not there
        # Its pods start: the run generates, nothing says it waits for a queue.
        kube.objects[("Job", NS, job["metadata"]["name"])]["status"] = {
            "active": 1, "startTime": ago(1),
        }  # fmt: skip
        ready = condition(await step_with(kube, default), "Ready")
        assert ready[1] not in c.QUEUED, ready


async def test_the_default_queue_queues_the_jobs_of_runs_that_name_none_only() -> None:
    unnamed = KueueKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT), labelled_run(None))
    job = await generation_job(unnamed, "gpus")
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpus"
    assert job["spec"]["suspend"] is True  # for Kueue to start
    named = KueueKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT), labelled_run("team"))
    job = await generation_job(named, "gpus")
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == "team"
    assert job["spec"]["suspend"] is True
    # No default: a run's own queue, else none at all.
    named = KueueKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT), labelled_run("team"))
    job = await generation_job(named, None)
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == "team"
    assert job["spec"]["suspend"] is True
    plain = KueueKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT), labelled_run(None))
    job = await generation_job(plain, None)
    assert QUEUE_NAME_LABEL not in job["metadata"]["labels"]
    assert not job["spec"].get("suspend")


# -- 6. a finished generation is judged while the engine is away --------------------------------


async def test_a_finished_generation_is_judged_while_its_engine_is_away() -> None:
    svc, _ = world()
    kube = DeletingKube(copy.deepcopy(SERVED), copy.deepcopy(SNAPSHOT))
    svc.kube = kube  # type: ignore[assignment]
    kube.put(run_object())
    assert (await step(svc, kube)).phase == "Generating"
    generation = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, generation)]["status"] = {
        "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    # Kueue evicted the engine's pod as the generation finished.
    said = "the engine's pod cand-engine-x was preempted by Kueue in LocalQueue team: " + EVICTED
    kube.put(with_ready(SERVED, False, c.PREEMPTED, said))
    status = await step(svc, kube)
    judge = build.judge_job_name(RUN_NAME)
    assert status.phase == "Judging"
    assert await kube.get("Job", NS, judge) is not None  # the judge does not need the engine
    assert condition(status, "Ready")[1] == c.JUDGING
    # Its pods run while the engine is still away: nothing is stopped, the run judges on.
    kube.objects[("Job", NS, judge)]["status"] = {"active": 1, "startTime": ago(1)}
    status = await step(svc, kube)
    assert status.phase == "Judging" and condition(status, "Ready")[1] == c.JUDGING
    assert condition(status, "Progressing")[0] == "True"
    assert kube.foreground == [] and await kube.get("Job", NS, judge) is not None


# -- 7. a Snapshot whose load Job is preempted, then admitted again ------------------------------


async def test_a_snapshot_whose_load_job_was_preempted_resolves_again_once_readmitted() -> None:
    snapshot = resolving_snapshot()
    job_name = load_job_name("big")
    load = load_job(suspend=False, status={"active": 1, "startTime": ago(60)})
    kube = KueueKube(snapshot, load)
    svc, _ = world()
    svc.kube = kube  # type: ignore[assignment]

    async def look() -> tuple[float | None, dict[str, Any]]:
        body = await kube.get("Snapshot", NS, "big")
        assert body is not None
        again = await reconcile_snapshot(svc, body)
        found = await kube.get("Snapshot", NS, "big")
        assert found is not None
        return again, found["status"]

    def ready(status: dict[str, Any]) -> dict[str, Any]:
        (found,) = [cond for cond in status["conditions"] if cond["type"] == "Ready"]
        return dict(found)

    # Kueue preempts the running load Job: it suspends it, its Workload says Evicted.
    kube.objects[("Job", NS, job_name)]["spec"]["suspend"] = True
    kube.objects[("Job", NS, job_name)]["status"] = {}
    kube.kueue["load-uid"] = kueue_workload(
        ("Evicted", "True", "Preempted", EVICTED),
        ("Preempted", "True", "InClusterQueue", EVICTED),
        ("QuotaReserved", "False", "Pending", PENDING),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
    )
    again, status = await look()
    assert (ready(status)["status"], ready(status)["reason"]) == ("False", c.PREEMPTED)
    assert ready(status)["message"].startswith(
        f"the load Job {job_name} was preempted by Kueue in LocalQueue team: {EVICTED}"
    )
    assert status["phase"] == "Resolving" and again is not None and again > 0
    # Admitted again: Kueue unsuspends the Job; the Snapshot says Resolving again.
    kube.kueue["load-uid"] = kueue_workload(
        ("Evicted", "False", "QuotaReserved", f"Previously: {EVICTED}"),
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
    )
    kube.objects[("Job", NS, job_name)]["spec"]["suspend"] = False
    kube.objects[("Job", NS, job_name)]["status"] = {"active": 1, "startTime": ago(0)}
    again, status = await look()
    assert ready(status)["reason"] == c.RESOLVING and ready(status)["status"] == "Unknown"
    assert status["phase"] == "Resolving"
    assert status["message"] == "writing 9 rows to the PersistentVolumeClaim big-rows"
    assert again is None
