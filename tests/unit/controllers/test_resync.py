"""The operator at scale: one resync loop for all runs, reconcile slots by priority, the cache."""

from __future__ import annotations

import asyncio
import copy
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kyai.builders import evaluation as build
from kyai.builders import label_value
from kyai.constants import LABEL_RUN
from kyai.controllers._result import Result
from kyai.controllers._services import NEW, NORMAL, URGENT, Slots
from kyai.controllers.evaluationrun import reconcile_run
from kyai.controllers.scheduling import (
    JOBS_PER_LIST,
    RESYNC_POLICIES,
    Scheduler,
    needs_resync,
    resync_verdict,
)
from kyai.settings import OperatorSettings

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, RUN_NAME, run_object, stamp, step, world

NOW = datetime.now(UTC)


async def test_slots_serve_urgent_waiters_first_then_in_arrival_order() -> None:
    slots = Slots(1)
    await slots.acquire()
    order: list[str] = []

    async def wait(label: str, priority: int) -> None:
        await slots.acquire(priority)
        order.append(label)
        slots.release()

    tasks = [
        asyncio.create_task(wait(label, priority))
        for label, priority in (("new-1", NEW), ("normal", NORMAL), ("new-2", NEW), ("job", URGENT))
    ]
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(wait("cancelled", URGENT))
    await asyncio.sleep(0)
    cancelled.cancel()
    assert slots.locked()
    slots.release()
    await asyncio.gather(*tasks)
    assert order == ["job", "normal", "new-1", "new-2"]
    assert not slots.locked()  # the cancelled waiter did not keep the slot


async def test_slots_count_their_waiters_through_cancellations_and_hand_overs() -> None:
    slots = Slots(1)
    await slots.acquire()
    waiters = [asyncio.create_task(slots.acquire(NEW)) for _ in range(50)]
    await asyncio.sleep(0)
    for task in waiters[:49]:
        task.cancel()
    await asyncio.sleep(0)
    assert slots.locked()  # one waiter is left, and the slot is held
    slots.release()  # to the last waiter, past the 49 cancelled ones
    await waiters[49]
    assert slots.locked()  # the slot is held again, by the waiter
    handed = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # handed to it, then cancelled before it resumes: it passes the slot on
    handed.cancel()
    await asyncio.gather(handed, return_exceptions=True)
    assert not slots.locked()
    await slots.acquire()  # free at once
    assert slots.locked()


def _run(phase: str | None, *, created_ago: float = 60.0, **status: Any) -> dict[str, Any]:
    created = (NOW - timedelta(seconds=created_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": "r", "namespace": NS, "creationTimestamp": created},
        "status": {"phase": phase, "generationJob": "r-generate", "judgeJob": "r-judge", **status}
        if phase
        else {},
    }


def _job(*, ago: float, finished: str | None = None, ready: int = 0) -> dict[str, Any]:
    created = (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [{"type": finished, "status": "True"}] if finished else []
    return {
        "metadata": {"name": "r-generate", "creationTimestamp": created},
        "status": {"conditions": conditions, "ready": ready},
    }


def test_the_resync_looks_only_at_runs_that_need_it() -> None:
    young = {"r-generate": _job(ago=2)}
    # A running Job, started moments ago: nothing to do (no GET, no reconcile).
    assert not needs_resync(_run("Generating"), young, now=NOW)
    # Finished runs, runs being deleted: never.
    assert not needs_resync(_run("Succeeded"), {}, now=NOW)
    assert not needs_resync(_run("Failed"), {}, now=NOW)
    deleting = _run("Generating")
    deleting["metadata"]["deletionTimestamp"] = stamp()
    assert not needs_resync(deleting, {}, now=NOW)
    # The Job finished (its event lost), is missing, or its pod has not started in time.
    assert needs_resync(_run("Generating"), {"r-generate": _job(ago=2, finished="Complete")},
                        now=NOW)  # fmt: skip
    assert needs_resync(_run("Generating"), {"r-generate": _job(ago=2, finished="Failed")},
                        now=NOW)  # fmt: skip
    assert needs_resync(_run("Generating"), {}, now=NOW)
    assert needs_resync(_run("Judging"), young, now=NOW)  # the judge Job is missing
    assert needs_resync(_run("Generating"), {"r-generate": _job(ago=60)}, now=NOW)
    assert not needs_resync(_run("Generating"), {"r-generate": _job(ago=60, ready=1)}, now=NOW)
    # Waiting runs; a run its create event has not reached for a while; a refused call.
    assert needs_resync(_run("Pending"), {}, now=NOW)
    assert not needs_resync(_run(None, created_ago=1), {}, now=NOW)
    assert needs_resync(_run(None, created_ago=60), {}, now=NOW)
    refused = {"type": "Degraded", "status": "True", "reason": "Forbidden", "message": "403",
               "lastTransitionTime": stamp()}  # fmt: skip
    forbidden = _run("Generating", conditions=[refused])
    assert needs_resync(forbidden, young, now=NOW)


async def test_one_resync_pass_moves_on_a_run_whose_job_event_was_lost() -> None:
    svc, kube = world(namespaces=[NS])
    scheduler = Scheduler(svc)
    kube.put(run_object())
    assert (await step(svc, kube)).phase == "Generating"
    # The generation Job runs: the pass lists, and reconciles nothing.
    assert await scheduler.resync_once() == 0
    gen = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, gen)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }
    # Its completion was not seen (no event): the next pass moves the run on.
    assert await scheduler.resync_once() == 1
    status = kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]
    assert status["phase"] == "Judging"
    assert ("Job", NS, build.judge_job_name(RUN_NAME)) in kube.objects
    scheduler.close()


async def test_a_resync_reads_the_cache_and_lists_only_the_jobs_of_runs_in_a_jobs_phase() -> None:
    svc, kube = world(namespaces=[NS])
    scheduler = Scheduler(svc)
    listed: list[tuple[str, str | None]] = []
    pages = kube.pages

    def counted(kind: str, namespace: str | None, **kwargs: Any) -> Any:
        listed.append((kind, kwargs.get("label_selector")))
        return pages(kind, namespace, **kwargs)

    kube.pages = counted  # type: ignore[method-assign]
    for index in range(5):  # finished runs, with their (finished) Jobs
        done = run_object()
        done["metadata"]["name"] = f"done-{index}"
        done["status"] = {"phase": "Succeeded", "generationJob": f"done-{index}-generate"}
        kube.put(done)
        svc.remember(done)  # as their watch event would: a finished run is not kept
        job = {"kind": "Job", "metadata": {"name": f"done-{index}-generate", "namespace": NS,
                                           "labels": {LABEL_RUN: f"done-{index}"}}}  # fmt: skip
        kube.put(job)
    assert await scheduler.resync_once() == 0
    assert listed == []  # no LIST of the runs (the cache), none of Jobs (no run in a Job phase)
    kube.put(run_object())
    assert (await step(svc, kube)).phase == "Generating"
    gen = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, gen)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }
    listed.clear()
    # Its Job, listed by its run's label value alone, moves it on; the finished runs are
    # not looked at.
    assert await scheduler.resync_once() == 1
    assert listed == [("Job", f"{LABEL_RUN} in ({label_value(RUN_NAME)})")]
    assert kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]["phase"] == "Judging"
    scheduler.close()


async def test_the_resync_lists_many_runs_jobs_in_chunks_and_skips_runs_it_never_saw() -> None:
    svc, kube = world(namespaces=[NS])
    scheduler = Scheduler(svc)
    selectors: list[str] = []
    pages = kube.pages

    def counted(kind: str, namespace: str | None, **kwargs: Any) -> Any:
        selectors.append(kwargs["label_selector"])
        return pages(kind, namespace, **kwargs)

    kube.pages = counted  # type: ignore[method-assign]
    names = [f"r{index:03d}" for index in range(JOBS_PER_LIST + 1)]
    for name in names:
        running = run_object()
        running["metadata"]["name"] = name
        running["metadata"]["resourceVersion"] = "1"
        running["status"] = {"phase": "Generating", "generationJob": f"{name}-generate"}
        svc.remember(running)
    unseen = run_object()  # in the API server only: no watch event delivered it yet
    unseen["metadata"]["name"] = "unseen"
    unseen["status"] = {"phase": "Generating", "generationJob": "unseen-generate"}
    kube.put(unseen)
    assert scheduler._unfinished_runs() and all(
        run["metadata"]["name"] != "unseen" for run in scheduler._unfinished_runs()
    )
    await scheduler._current_jobs(scheduler._unfinished_runs())
    assert selectors == [
        f"{LABEL_RUN} in ({','.join(names[:JOBS_PER_LIST])})",
        f"{LABEL_RUN} in ({names[-1]})",
    ]
    scheduler.close()


async def test_a_job_event_moves_the_run_on_without_reading_the_job_again() -> None:
    svc, kube = world()
    kube.put(run_object())
    await reconcile_run(svc, NS, RUN_NAME)
    gen = build.generation_job_name(RUN_NAME)
    done = copy.deepcopy(kube.objects[("Job", NS, gen)])
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    # The stored Job still runs: only the Job the event delivered says it is complete.
    await reconcile_run(svc, NS, RUN_NAME, job=done, priority=URGENT)
    assert kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]["phase"] == "Judging"


def test_the_cache_keeps_the_newest_copy_and_drops_finished_runs() -> None:
    svc, _ = world()
    run = run_object()
    run["metadata"].update(namespace=NS, resourceVersion="5")
    svc.remember(run)
    older = copy.deepcopy(run)
    older["metadata"]["resourceVersion"] = "4"
    older["status"] = {"phase": "Pending"}
    svc.remember(older)  # a late watch event: not kept over the newer write
    assert svc.seen[("EvaluationRun", NS, RUN_NAME)]["metadata"]["resourceVersion"] == "5"
    finished = copy.deepcopy(run)
    finished["metadata"]["resourceVersion"] = "6"
    finished["status"] = {"phase": "Succeeded"}
    svc.remember(finished)
    assert ("EvaluationRun", NS, RUN_NAME) not in svc.seen
    secret = {"kind": "Secret", "metadata": {"name": "s", "namespace": NS}}
    svc.remember(secret)  # not a cached kind
    assert ("Secret", NS, "s") not in svc.seen


async def test_a_new_job_is_looked_at_again_unless_its_run_has_finished() -> None:
    svc, kube = world()
    kube.put(run_object())
    await reconcile_run(svc, NS, RUN_NAME)
    gen = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, gen)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }
    scheduler = Scheduler(svc)
    cached = svc.seen.pop(("EvaluationRun", NS, RUN_NAME))
    scheduler.requeue(NS, RUN_NAME, Result(0.01))  # as if finished meanwhile: not looked at
    await asyncio.sleep(0.1)
    assert kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]["phase"] == "Generating"
    svc.seen[("EvaluationRun", NS, RUN_NAME)] = cached
    scheduler.requeue(NS, RUN_NAME, Result(5.0))
    scheduler.requeue(NS, RUN_NAME, Result(0.01))  # the earlier of two asks wins
    scheduler.requeue(NS, RUN_NAME, Result(None))  # no ask: nothing changes
    await asyncio.sleep(0.1)
    assert kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]["phase"] == "Judging"
    scheduler.close()


def test_the_resync_policies_decide_top_to_bottom_with_the_timers_of_the_settings() -> None:
    assert [policy.__name__ for policy in RESYNC_POLICIES] == [
        "finished_or_deleted", "not_looked_at_yet", "waiting", "api_refused",
        "worker_not_starting", "queued", "job_missing", "job_done", "job_may_be_stuck",
        "job_running",
    ]  # fmt: skip
    defaults, quick = OperatorSettings(), OperatorSettings(job_start_grace_seconds=1)
    running = {"r-generate": _job(ago=2)}
    assert resync_verdict(_run("Generating"), running, now=NOW, settings=defaults).reason == (
        "JobRunning"
    )
    # A shortened start grace: the 2-second-old Job's pods are looked at already.
    verdict = resync_verdict(_run("Generating"), running, now=NOW, settings=quick)
    assert (verdict.reason, verdict.act) == ("JobNotReady", True)
    # The first policy that decides wins: a run being deleted, whatever its Job says.
    deleting = _run("Generating")
    deleting["metadata"]["deletionTimestamp"] = stamp()
    done = {"r-generate": _job(ago=2, finished="Complete")}
    verdict = resync_verdict(deleting, done, now=NOW, settings=defaults)
    assert (verdict.reason, verdict.act) == ("Finished", False)
    # A lost create event: looked at after run_first_look_seconds.
    young = _run(None, created_ago=3)
    assert not needs_resync(young, {}, now=NOW)
    assert needs_resync(young, {}, now=NOW, settings=OperatorSettings(run_first_look_seconds=2))


async def test_the_resync_lists_the_runs_from_the_api_server_only_every_relist_interval() -> None:
    svc, kube = world(namespaces=[NS], run_resync_seconds=0.02, run_relist_seconds=0.1)
    scheduler = Scheduler(svc)
    kinds: list[str] = []
    times: list[float] = []
    pages = kube.pages
    loop = asyncio.get_running_loop()

    def counted(kind: str, namespace: str | None, **kwargs: Any) -> Any:
        kinds.append(kind)
        times.append(loop.time())
        return pages(kind, namespace, **kwargs)

    kube.pages = counted  # type: ignore[method-assign]
    started = loop.time()
    lost = run_object()  # its watch events never reached the operator: only a LIST finds it
    lost["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    kube.put(lost)
    forever = asyncio.create_task(scheduler.resync_forever())
    try:
        for _ in range(200):
            await asyncio.sleep(0.01)
            if kube.objects[("EvaluationRun", NS, RUN_NAME)].get("status", {}).get("phase"):
                break
        first_relist = times[kinds.index("EvaluationRun")] - started
        await asyncio.sleep(0.25)
    finally:
        forever.cancel()
        await asyncio.gather(forever, return_exceptions=True)
        scheduler.close()
    # Found by the first relist (0.1 s in, not by the cache-only ticks before it), then started.
    assert kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]["phase"] == "Generating"
    assert first_relist >= 0.1
    # Relists stay about 0.1 s apart while the cache-only ticks go on every 0.02 s.
    assert 2 <= kinds.count("EvaluationRun") <= 5
