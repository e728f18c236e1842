"""A run's watch events arriving after the operator's own writes moved it on are stale.

The operator bench's late-10000 (bench/out/bench-operator-20261203-114337.json) went
Generating -> Judging -> Succeeded -> Generating -> Judging -> Succeeded: after a burst of
10,000 runs the operator's run watch was tens of seconds behind, the resync started the run
(no create event yet, older than ``run_first_look_seconds``) and Job events finished it; the
create event then arrived, the cache (which drops a finished run) took it as the newest
copy, and the run was reconciled again from that copy: its status written back to
Generating, its Complete Jobs adopted, Judging, Succeeded.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from kyai.builders import evaluation as build
from kyai.controllers.scheduling import Scheduler

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, RUN_NAME, SNAPSHOT, WORKLOAD, MemoryKube, run_object, world

KEY = ("EvaluationRun", NS, RUN_NAME)


class CountingKube(MemoryKube):
    """The in-memory API, counting status writes and creates, bumping resourceVersions."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        super().__init__(*objects)
        self.writes: list[str] = []

    async def patch(self, kind: str, namespace: str, name: str, body: Any, **kw: Any) -> Any:
        patched = await super().patch(kind, namespace, name, body, **kw)
        if isinstance(body, dict):  # a merge patch (the JSON patches bump it themselves)
            meta = self.objects[(kind, namespace, name)]["metadata"]
            meta["resourceVersion"] = patched["metadata"]["resourceVersion"] = str(
                int(meta["resourceVersion"]) + 1
            )
            if kind == "EvaluationRun":
                self.writes.append(str((body.get("status") or {}).get("phase")))
        return patched

    async def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        made, created = await super().create(obj)
        if created:
            self.writes.append(f"create {obj['kind']} {obj['metadata']['name']}")
        return made, created


def complete(kube: MemoryKube, job: str) -> dict[str, Any]:
    """Mark a Job Complete; the Job as its watch event delivers it."""
    kube.objects[("Job", NS, job)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }
    return copy.deepcopy(kube.objects[("Job", NS, job)])


async def finished_before_its_events(kube: CountingKube) -> tuple[Scheduler, list[dict[str, Any]]]:
    """The run taken to Succeeded by the resync and Job events; its own events not yet seen.

    Returns the scheduler and the run's watch events as the lagging watch will deliver them.
    """
    svc, _ = world()
    svc.kube = kube  # type: ignore[assignment]
    scheduler = Scheduler(svc)
    kube.put(run_object())
    run = kube.objects[KEY]
    events = [copy.deepcopy(run)]  # ADDED: no status yet
    assert await scheduler.resync_once(relist=True) == 0  # created moments ago: its create event's
    run["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"  # that event is late
    assert await scheduler.resync_once(relist=True) == 1
    assert run["status"]["phase"] == "Generating"
    events.append(copy.deepcopy(run))
    await scheduler.job_finished(complete(kube, build.generation_job_name(RUN_NAME)), RUN_NAME)
    assert run["status"]["phase"] == "Judging"
    events.append(copy.deepcopy(run))
    run["status"].update(avgScore=0.8, questions=5, errorCount=0, comparisonKey="k")
    await scheduler.job_finished(complete(kube, build.judge_job_name(RUN_NAME)), RUN_NAME)
    assert run["status"]["phase"] == "Succeeded", run["status"].get("message")
    events.append(copy.deepcopy(run))
    return scheduler, events


async def test_a_late_create_event_of_a_finished_run_starts_nothing() -> None:
    kube = CountingKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT))
    scheduler, events = await finished_before_its_events(kube)
    assert [w for w in kube.writes if not w.startswith("create")] == [
        "Generating",
        "Judging",
        "Succeeded",
    ]
    before = list(kube.writes)
    final = copy.deepcopy(kube.objects[KEY])
    # The watch, behind the operator's writes, now delivers the run's events in order.
    await scheduler.run_event("ADDED", events[0])
    await scheduler.run_event("MODIFIED", events[1])
    await scheduler.run_event("MODIFIED", events[2])
    assert kube.writes[len(before) :] == []  # no status written back, no Job created
    assert kube.objects[KEY]["status"] == final["status"]
    assert KEY not in scheduler.svc.seen and KEY not in scheduler.svc.pending
    await scheduler.run_event("MODIFIED", events[3])  # the Succeeded write's own event
    assert kube.writes == before and KEY not in scheduler.svc.seen
    scheduler.close()


async def test_a_run_recreated_under_the_same_name_is_a_new_run() -> None:
    kube = CountingKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT))
    scheduler, _ = await finished_before_its_events(kube)
    before = list(kube.writes)
    await scheduler.run_event("DELETED", kube.objects.pop(KEY))
    assert KEY not in scheduler.svc.finished
    again = run_object()
    again["metadata"]["uid"] = "uid-again"
    kube.put(again)
    del kube.objects[("Job", NS, build.generation_job_name(RUN_NAME))]
    await scheduler.run_event("ADDED", copy.deepcopy(again))
    assert kube.objects[KEY]["status"]["phase"] == "Generating"
    assert "Generating" in kube.writes[len(before) :]
    scheduler.close()


def test_the_cache_refuses_unfinished_copies_of_a_finished_run_only() -> None:
    svc, _ = world()
    run = run_object()
    run["metadata"].update(uid="u1", resourceVersion="7")
    run["status"] = {"phase": "Succeeded"}
    assert svc.remember(run)
    assert KEY not in svc.seen and svc.finished[KEY] == "u1"
    stale = copy.deepcopy(run)
    stale["metadata"]["resourceVersion"] = "3"
    stale["status"] = {"phase": "Generating"}
    assert not svc.remember(stale)
    assert KEY not in svc.seen
    other = copy.deepcopy(stale)  # another run of that name (re-created): not stale
    other["metadata"].update(uid="u2", resourceVersion="9")
    assert svc.remember(other)
    assert svc.seen[KEY]["metadata"]["uid"] == "u2"
    older = copy.deepcopy(other)
    older["metadata"]["resourceVersion"] = "8"
    assert not svc.remember(older)  # older than the copy kept
    svc.forget(*KEY)
    assert KEY not in svc.finished and KEY not in svc.seen
