"""What a Pending run waits for wakes it once ready: a finished source run its re-judges, a
Workload or Snapshot turning Ready the runs naming it (not the 20 s resync)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.controllers.runkind import Reference
from kyai.controllers.scheduling import Scheduler

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, world


def _run(name: str, phase: str | None, source: str | None, namespace: str = NS) -> dict[str, Any]:
    spec: dict[str, Any] = {"judge": {"type": "llm"}}
    if source is not None:
        spec["generationFrom"] = {"runRef": {"name": source}}
    return {
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": phase} if phase else {},
    }


@pytest.fixture
def reconciled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    async def record(self: Scheduler, namespace: str, name: str, **_: Any) -> None:
        calls.append((namespace, name))

    monkeypatch.setattr(Scheduler, "reconcile", record)
    return calls


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
async def test_a_finished_run_wakes_only_the_pending_runs_that_rejudge_it(
    phase: str, reconciled: list[tuple[str, str]]
) -> None:
    svc, _ = world()
    for run in (
        _run("rejudge-b", "Pending", "source"),
        _run("rejudge-a", "Pending", "source"),
        _run("judging", "Judging", "source"),  # already going on
        _run("other", "Pending", "another-run"),
        _run("fresh", "Pending", None),
        _run("elsewhere", "Pending", "source", namespace="team-b"),
    ):
        svc.remember(run)
    await Scheduler(svc).reference_changed("EvaluationRun", NS, "source", {"phase": phase})
    assert reconciled == [(NS, "rejudge-a"), (NS, "rejudge-b")]


@pytest.mark.parametrize("status", [{"phase": "Generating"}, {"phase": "Judging"}, {}, None])
async def test_a_run_still_going_wakes_nobody(
    status: dict[str, Any] | None, reconciled: list[tuple[str, str]]
) -> None:
    svc, _ = world()
    svc.remember(_run("rejudge", "Pending", "source"))
    await Scheduler(svc).reference_changed("EvaluationRun", NS, "source", status)
    assert reconciled == []


def _generating(name: str, phase: str, judge_workload: str | None = None) -> dict[str, Any]:
    judge: dict[str, Any] = {"type": "llm"}
    if judge_workload is not None:
        judge["workloadRef"] = {"name": judge_workload}
    return {
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "1"},
        "spec": {"workloadRef": {"name": "cand"}, "snapshotRef": {"name": "snap"}, "judge": judge},
        "status": {"phase": phase},
    }


async def test_a_workload_turning_ready_wakes_the_pending_runs_naming_it_once(
    reconciled: list[tuple[str, str]],
) -> None:
    svc, _ = world()
    for run in (
        _generating("waits", "Pending"),
        _generating("going", "Generating"),
        _generating("judged-by", "Pending", judge_workload="big-judge"),
        _run("rejudge", "Pending", "source"),
    ):
        svc.remember(run)
    scheduler = Scheduler(svc)
    await scheduler.reference_changed("Workload", NS, "cand", {"phase": "Deploying"})
    assert reconciled == []
    await scheduler.reference_changed("Workload", NS, "cand", {"phase": "Ready"})
    assert reconciled == [(NS, "judged-by"), (NS, "waits")]
    await scheduler.reference_changed("Workload", NS, "cand", {"phase": "Ready"})
    assert len(reconciled) == 2  # Ready before: its waiting runs were looked at then
    # The judge's Workload is a reference too; a Snapshot wakes the runs naming it.
    await scheduler.reference_changed("Workload", NS, "big-judge", {"phase": "Ready"})
    assert reconciled[2:] == [(NS, "judged-by")]
    await scheduler.reference_changed("Snapshot", NS, "snap", {"phase": "Ready"})
    assert reconciled[3:] == [(NS, "judged-by"), (NS, "waits")]


async def test_the_index_of_waiting_runs_follows_their_specs_phases_and_deletions(
    reconciled: list[tuple[str, str]],
) -> None:
    svc, _ = world()
    scheduler = Scheduler(svc)  # indexes the runs remembered from now on
    for index in range(200):  # runs waiting for other Workloads are not looked at
        run = _generating(f"other-{index:03}", "Pending")
        run["spec"]["workloadRef"] = {"name": f"cand-{index}"}
        svc.remember(run)
    moved = _generating("moved", "Pending")
    moved["metadata"].update(uid="u-moved", generation=1)
    svc.remember(moved)
    for name in ("started", "deleted"):
        svc.remember(_generating(name, "Pending"))
    svc.remember(_generating("started", "Generating"))  # no longer waiting
    svc.forget("EvaluationRun", NS, "deleted")
    changed = _generating("moved", "Pending")  # its spec now names another Workload
    changed["metadata"].update(uid="u-moved", generation=2, resourceVersion="2")
    changed["spec"]["workloadRef"] = {"name": "cand-7"}
    svc.remember(changed)
    await scheduler.reference_changed("Workload", NS, "cand", {"phase": "Ready"})
    assert reconciled == []
    await scheduler.reference_changed("Workload", NS, "cand-7", {"phase": "Ready"})
    assert reconciled == [(NS, "moved"), (NS, "other-007")]
    # Only what each run waits for now is indexed: nothing for "cand" any more.
    assert svc.waiting_on(NS, Reference("Workload", "cand")) == set()
    assert svc.waiting_on(NS, Reference("Workload", "cand-7")) == {
        ("EvaluationRun", NS, "moved"),
        ("EvaluationRun", NS, "other-007"),
    }
