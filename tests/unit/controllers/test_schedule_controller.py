"""The EvaluationSchedule controller's decisions, one reconcile at a time, on an in-memory API.

Cron times (CronJob's rules, at a given ``now``), Forbid and Replace, suspend, the run-now
annotation acted on once, the history limits (runs deleted, entries kept), and each finished
run compared with its baseline: Regressed on the schedule and on the run.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kyai.api import EvaluationScheduleStatus
from kyai.constants import ANNOTATION_RUN_NOW, ANNOTATION_SCHEDULE_TRIGGER, LABEL_SCHEDULE
from kyai.controllers.evaluationschedule import reconcile_schedule, serving_hash
from kyai.schedules import run_name

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, MemoryKube, world

NAME = "nightly"
CREATED = datetime(2026, 12, 4, 23, 48, 30, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return CREATED + timedelta(minutes=minutes)


def rfc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_object(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationSchedule",
        "metadata": {
            "name": NAME, "namespace": NS, "uid": "uid-sched", "generation": 1,
            "creationTimestamp": rfc(CREATED), "annotations": {},
        },
        "spec": {
            "runTemplate": {"spec": {"workloadRef": {"name": "cand"},
                                     "snapshotRef": {"name": "snap"}}},
            **spec,
        },
    }  # fmt: skip


def run_object(
    name: str, phase: str, *, created: datetime, scores: list[float] | None = None,
    trigger: str = "schedule",
) -> dict[str, Any]:  # fmt: skip
    status: dict[str, Any] = {"phase": phase}
    if scores is not None:
        status.update(
            avgScore=sum(scores) / len(scores), scores=scores, questions=len(scores),
            comparisonKey="k" * 16, datasetSha256="ab" * 32, completedAt=rfc(created),
        )  # fmt: skip
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {
            "name": name, "namespace": NS, "creationTimestamp": rfc(created),
            "labels": {LABEL_SCHEDULE: NAME},
            "annotations": {ANNOTATION_SCHEDULE_TRIGGER: trigger},
            "ownerReferences": [{"kind": "EvaluationSchedule", "name": NAME,
                                 "uid": "uid-sched", "controller": True}],
        },
        "spec": {},
        "status": status,
    }  # fmt: skip


def runs(kube: MemoryKube) -> list[str]:
    return sorted(name for kind, _, name in kube.objects if kind == "EvaluationRun")


def status(kube: MemoryKube) -> EvaluationScheduleStatus:
    body = kube.objects[("EvaluationSchedule", NS, NAME)]
    return EvaluationScheduleStatus.model_validate(body.get("status") or {})


def condition(kube: MemoryKube, kind: str, name: str, type_: str) -> dict[str, Any]:
    conditions = (kube.objects[(kind, NS, name)].get("status") or {}).get("conditions") or []
    (found,) = [cond for cond in conditions if cond["type"] == type_]
    return dict(found)


async def test_a_cron_time_makes_one_run_named_for_it_and_is_not_made_twice() -> None:
    svc, kube = world(schedule_object(schedule="*/5 * * * *"))
    result = await reconcile_schedule(svc, NS, NAME, now=at(12))  # 23:48:30 + 12 min
    due = datetime(2026, 12, 5, 0, 0, tzinfo=UTC)  # the most recent of 23:50, 23:55, 00:00
    assert runs(kube) == [run_name(NAME, "schedule", due)]
    made = kube.objects[("EvaluationRun", NS, runs(kube)[0])]
    assert made["metadata"]["labels"][LABEL_SCHEDULE] == NAME
    assert made["metadata"]["ownerReferences"][0]["uid"] == "uid-sched"
    assert made["spec"]["workloadRef"] == {"name": "cand"}
    seen = status(kube)
    assert seen.last_schedule_time == rfc(due)
    assert seen.next_schedule_time == "2026-12-05T00:05:00Z"
    assert seen.period_seconds == 300
    assert seen.active == runs(kube)
    # Looked at again at the next cron time (00:05:00 is 4.5 min after 00:00:30).
    assert result.requeue_after is not None and 270 <= result.requeue_after <= 271
    # The same minute again: nothing new.
    await reconcile_schedule(svc, NS, NAME, now=at(12.2))
    assert len(runs(kube)) == 1


async def test_forbid_holds_a_due_run_while_one_is_unfinished_then_makes_it() -> None:
    busy = run_object("old", "Generating", created=at(-1))
    svc, kube = world(schedule_object(schedule="* * * * *"), busy)
    await reconcile_schedule(svc, NS, NAME, now=at(2))
    assert runs(kube) == ["old"]  # never two running
    assert status(kube).last_schedule_time is None
    kube.objects[("EvaluationRun", NS, "old")]["status"]["phase"] = "Failed"
    await reconcile_schedule(svc, NS, NAME, now=at(2.2))
    assert len(runs(kube)) == 2 and status(kube).last_schedule_time == rfc(at(1.5))


async def test_a_held_cron_time_past_its_starting_deadline_is_missed() -> None:
    busy = run_object("old", "Generating", created=at(-1))
    svc, kube = world(schedule_object(schedule="0 * * * *", startingDeadlineSeconds=60), busy)
    await reconcile_schedule(svc, NS, NAME, now=at(11.8))  # 00:00:18, within a minute of 00:00
    assert runs(kube) == ["old"]
    kube.objects[("EvaluationRun", NS, "old")]["status"]["phase"] = "Succeeded"
    await reconcile_schedule(svc, NS, NAME, now=at(14))  # 00:02:30: too late for 00:00
    assert runs(kube) == ["old"]


async def test_replace_deletes_the_unfinished_run_for_the_new_one() -> None:
    busy = run_object("old", "Judging", created=at(-1))
    svc, kube = world(schedule_object(schedule="* * * * *", concurrencyPolicy="Replace"), busy)
    await reconcile_schedule(svc, NS, NAME, now=at(2))
    assert ("EvaluationRun", "old") in kube.deleted
    assert runs(kube) == [run_name(NAME, "schedule", at(1.5))]


async def test_run_now_is_acted_on_once_even_while_suspended() -> None:
    body = schedule_object(schedule="* * * * *", suspend=True)
    body["metadata"]["annotations"][ANNOTATION_RUN_NOW] = "first"
    svc, kube = world(body)
    await reconcile_schedule(svc, NS, NAME, now=at(3))
    (made,) = runs(kube)
    assert made == run_name(NAME, "request", at(3))  # a request, not the suspended cron
    seen = status(kube)
    assert seen.handled_run_now == "first" and seen.phase == "Suspended"
    assert seen.last_schedule_time is None
    # The same value again (the annotation's removal not seen yet): no second run.
    kube.objects[("EvaluationRun", NS, made)]["status"] = {"phase": "Succeeded"}
    kube.objects[("EvaluationSchedule", NS, NAME)]["metadata"]["annotations"] = {
        ANNOTATION_RUN_NOW: "first"
    }
    await reconcile_schedule(svc, NS, NAME, now=at(4))
    assert runs(kube) == [made]
    kube.objects[("EvaluationSchedule", NS, NAME)]["metadata"]["annotations"] = {
        ANNOTATION_RUN_NOW: "second"
    }
    await reconcile_schedule(svc, NS, NAME, now=at(5))
    assert len(runs(kube)) == 2


async def test_an_unreadable_schedule_is_invalid_and_stalled_naming_the_field() -> None:
    svc, kube = world(schedule_object(schedule="61 * * * *"))
    await reconcile_schedule(svc, NS, NAME, now=at(1))
    seen = status(kube)
    assert seen.phase == "Invalid"
    assert "spec.schedule" in (seen.message or "")
    assert condition(kube, "EvaluationSchedule", NAME, "Stalled")["status"] == "True"
    assert runs(kube) == []


async def test_history_limits_delete_the_oldest_runs_and_the_history_keeps_them() -> None:
    finished = [
        run_object(f"r{index}", "Succeeded", created=at(index), scores=[1.0, 1.0, 0.0, 1.0])
        for index in range(3)
    ]
    failed = [run_object(f"f{index}", "Failed", created=at(index + 0.5)) for index in range(2)]
    svc, kube = world(schedule_object(successfulRunsHistoryLimit=1), *finished, *failed)
    await reconcile_schedule(svc, NS, NAME, now=at(10))
    assert sorted(name for _, name in kube.deleted) == ["f0", "r0", "r1"]
    seen = status(kube)
    assert [entry.run for entry in seen.history or []] == ["r0", "f0", "r1", "f1", "r2"]
    assert seen.runs == {"succeeded": 3, "failed": 2}


async def test_a_run_worse_than_the_margin_is_regressed_on_the_schedule_and_the_run() -> None:
    good = [1.0] * 30
    worse = [1.0] * 10 + [0.0] * 20
    svc, kube = world(
        schedule_object(regression={"margin": 0.05}),
        run_object("before", "Succeeded", created=at(1), scores=good),
    )
    await reconcile_schedule(svc, NS, NAME, now=at(2))
    assert status(kube).regressed is None  # nothing before it to compare with
    kube.put(run_object("after", "Succeeded", created=at(3), scores=worse, trigger="change"))
    await reconcile_schedule(svc, NS, NAME, now=at(4))
    seen = status(kube)
    assert seen.regressed is True and seen.regression is not None
    assert seen.regression.baseline == "before" and seen.regression.questions == 30
    assert seen.change == seen.regression.difference == -20 / 30
    regressed = condition(kube, "EvaluationSchedule", NAME, "Regressed")
    assert regressed["status"] == "True" and regressed["reason"] == "WorseThanMargin"
    assert "before" in regressed["message"] and "p = " in regressed["message"]
    assert condition(kube, "EvaluationRun", "after", "Regressed")["status"] == "True"
    # The next run as good as the baseline: not shown worse, the condition turns False.
    kube.put(run_object("again", "Succeeded", created=at(5), scores=worse))
    await reconcile_schedule(svc, NS, NAME, now=at(6))
    said = condition(kube, "EvaluationSchedule", NAME, "Regressed")
    assert said["status"] == "False" and said["reason"] == "NotShownWorse", said


def ready_workload(url: str, *, ready: bool = True, generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "cand", "namespace": NS, "generation": generation},
        "spec": {"framework": "vllm", "model": "m", "endpoint": {"url": url}},
        "status": {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": str(ready),
                    "reason": "Serving",
                    "message": "serving m",
                    "lastTransitionTime": rfc(CREATED),
                }
            ],
        },
    }


def test_the_serving_hash_follows_the_spec_once_the_workload_is_ready_on_it() -> None:
    first = serving_hash(ready_workload("http://a/v1"))
    assert first is not None
    assert serving_hash(ready_workload("http://a/v1")) == first
    assert serving_hash(ready_workload("http://b/v1")) not in (None, first)
    assert serving_hash(ready_workload("http://b/v1", ready=False)) is None
    assert serving_hash(ready_workload("http://b/v1", generation=2)) is None  # not caught up


async def test_a_change_of_the_workload_makes_one_run_once_it_is_ready_again() -> None:
    svc, kube = world(schedule_object(triggers={"onWorkloadChange": True}))
    kube.put(ready_workload("http://a/v1"))
    await reconcile_schedule(svc, NS, NAME, now=at(1))
    assert runs(kube) == [] and status(kube).serving_hash is not None  # noted, no run
    kube.put(ready_workload("http://b/v1", ready=False))
    await reconcile_schedule(svc, NS, NAME, now=at(2))
    assert runs(kube) == []  # not Ready on its new configuration yet
    kube.put(ready_workload("http://b/v1"))
    await reconcile_schedule(svc, NS, NAME, now=at(3))
    assert runs(kube) == [run_name(NAME, "change", at(3))]
    await reconcile_schedule(svc, NS, NAME, now=at(4))
    assert len(runs(kube)) == 1


async def test_a_change_while_suspended_waits_for_the_schedule_to_be_resumed() -> None:
    svc, kube = world(schedule_object(triggers={"onWorkloadChange": True}, suspend=True))
    kube.put(ready_workload("http://a/v1"))
    await reconcile_schedule(svc, NS, NAME, now=at(1))
    kube.put(ready_workload("http://b/v1"))
    await reconcile_schedule(svc, NS, NAME, now=at(2))
    assert runs(kube) == []
    kube.objects[("EvaluationSchedule", NS, NAME)]["spec"]["suspend"] = False
    await reconcile_schedule(svc, NS, NAME, now=at(3))
    assert runs(kube) == [run_name(NAME, "change", at(3))]


async def test_each_run_made_and_a_burst_of_missed_times_is_an_event() -> None:
    svc, kube = world(schedule_object(schedule="* * * * *"))
    await reconcile_schedule(svc, NS, NAME, now=at(200))  # 200 cron times missed
    await svc.events.aclose()
    said = {(e["type"], e["reason"]): e["message"] for e in kube.events}
    made = runs(kube)[0]
    assert said[("Normal", "RunCreated")] == f"made the run {made} (schedule)"
    assert said[("Warning", "TooManyMissedTimes")] == (
        "200 cron times were missed; only the most recent is made"
    )
    (entry,) = status(kube).history or []
    assert (entry.run, entry.phase, entry.created_at) == (made, "Pending", rfc(at(200)))


async def test_a_schedule_being_deleted_makes_nothing() -> None:
    body = schedule_object(schedule="* * * * *")
    body["metadata"]["deletionTimestamp"] = rfc(at(1))
    svc, kube = world(body)
    await reconcile_schedule(svc, NS, NAME, now=at(5))
    assert runs(kube) == [] and "status" not in kube.objects[("EvaluationSchedule", NS, NAME)]


async def test_a_request_or_change_run_moves_no_cron_time() -> None:
    body = schedule_object(schedule="0 * * * *")
    body["metadata"]["annotations"][ANNOTATION_RUN_NOW] = "now"
    svc, kube = world(body)
    await reconcile_schedule(svc, NS, NAME, now=at(5))  # 23:53:30: no cron time passed
    assert runs(kube) == [run_name(NAME, "request", at(5))]
    assert status(kube).last_schedule_time is None


async def test_a_cron_times_run_deleted_early_is_not_made_again() -> None:
    svc, kube = world(schedule_object(schedule="0 * * * *"))
    await reconcile_schedule(svc, NS, NAME, now=at(12))  # 00:00:30: 00:00 is due
    (made,) = runs(kube)
    await kube.delete("EvaluationRun", NS, made)  # deleted by someone before it finished
    await reconcile_schedule(svc, NS, NAME, now=at(13))
    assert runs(kube) == []  # 00:00 was made once; the next is 01:00


async def test_a_comparison_is_made_once_and_kept_in_the_history() -> None:
    svc, kube = world(
        schedule_object(regression={"margin": 0.05}),
        run_object("before", "Succeeded", created=at(1), scores=[1.0] * 30),
        run_object("after", "Succeeded", created=at(3), scores=[0.0] * 30),
    )
    for minute in (4, 5, 6):
        await reconcile_schedule(svc, NS, NAME, now=at(minute))
    await svc.events.aclose()
    regressions = [e for e in kube.events if e["reason"] == "Regressed"]
    assert len(regressions) == 1, regressions  # said once, not at every look
    entries = {entry.run: entry for entry in status(kube).history or []}
    assert entries["after"].regressed is True and entries["after"].baseline == "before"
    assert entries["after"].difference == -1.0
    assert entries["before"].regressed is None  # nothing before it


def test_a_workload_being_deleted_serves_nothing() -> None:
    going = ready_workload("http://a/v1")
    going["metadata"]["deletionTimestamp"] = rfc(CREATED)
    assert serving_hash(going) is None
