"""kyai.schedules' history: run names, the status history, the runs beyond the limits."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kyai.api import HistoryEntry
from kyai.api.evaluationschedule import MAX_HISTORY
from kyai.schedules import record, run_name, to_delete

AT = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def valid(name: str) -> bool:
    return len(name) <= 63 and SUBDOMAIN.fullmatch(name) is not None


# -- run_name -----------------------------------------------------------------------------------


def test_scheduled_runs_are_named_as_cronjobs_jobs() -> None:
    minutes = int(AT.timestamp()) // 60
    assert run_name("nightly", "schedule", AT) == f"nightly-{minutes}"
    assert run_name("nightly", "schedule", AT + timedelta(seconds=59)) == f"nightly-{minutes}"
    assert run_name("nightly", "schedule", AT + timedelta(minutes=1)) == f"nightly-{minutes + 1}"


def test_change_and_request_runs_carry_the_utc_time() -> None:
    assert run_name("nightly", "change", AT) == "nightly-c-20261205010000"
    assert run_name("nightly", "request", AT) == "nightly-r-20261205010000"
    lisbon_summer = AT.astimezone(timezone(timedelta(hours=1)))
    assert run_name("nightly", "request", lisbon_summer) == "nightly-r-20261205010000"


@pytest.mark.parametrize("trigger", ["schedule", "change", "request"])
@pytest.mark.parametrize(
    "schedule",
    ["s", "nightly", "a" * 63, "a" * 253, "eval.example-" * 19 + "x", "x-" * 30 + "y.z"],
)
def test_names_are_valid_deterministic_and_keep_the_suffix(schedule: str, trigger: str) -> None:
    name = run_name(schedule, trigger, AT)
    assert valid(name), name
    assert name == run_name(schedule, trigger, AT)
    suffix = {"schedule": str(int(AT.timestamp()) // 60), "change": "c-20261205010000",
              "request": "r-20261205010000"}[trigger]  # fmt: skip
    assert name.endswith(f"-{suffix}")


def test_long_names_sharing_a_prefix_stay_distinct() -> None:
    one, two = run_name("a" * 70 + "1", "schedule", AT), run_name("a" * 70 + "2", "schedule", AT)
    assert one != two and len(one) == len(two) == 63
    assert one.startswith("a" * 20)


def test_the_trigger_and_the_time_zone_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown trigger 'cron'"):
        run_name("nightly", "cron", AT)
    with pytest.raises(ValueError, match="timezone-aware"):
        run_name("nightly", "schedule", datetime(2026, 12, 5, 1))


# -- record -------------------------------------------------------------------------------------


def entry(run: str, **fields: object) -> HistoryEntry:
    return HistoryEntry.model_validate({"run": run, "trigger": "schedule", **fields})


def test_a_new_run_is_added_newest_last() -> None:
    history = [entry("r1"), entry("r2")]
    updated = record(history, entry("r3", phase="Pending"))
    assert [e.run for e in updated] == ["r1", "r2", "r3"]
    assert [e.run for e in history] == ["r1", "r2"]  # the input is left as it is


def test_a_known_run_is_updated_in_place_keeping_what_the_update_leaves_out() -> None:
    history = [entry("r1"), entry("r2", createdAt="2026-12-05T01:00:00Z", phase="Pending"),
               entry("r3")]  # fmt: skip
    finished = HistoryEntry(run="r2", trigger="schedule", phase="Succeeded", score=0.8)
    finished.regressed = False
    updated = record(history, finished)
    assert [e.run for e in updated] == ["r1", "r2", "r3"]
    assert updated[1].phase == "Succeeded" and updated[1].score == 0.8
    assert updated[1].regressed is False
    assert updated[1].created_at == "2026-12-05T01:00:00Z"
    assert history[1].phase == "Pending"
    cleared = record(updated, HistoryEntry(run="r2", trigger="schedule", score=None))
    assert cleared[1].score is None and cleared[1].phase == "Succeeded"


def test_the_oldest_are_dropped_beyond_the_limit() -> None:
    history = [entry(f"r{i}") for i in range(MAX_HISTORY)]
    updated = record(history, entry("new"))
    assert len(updated) == MAX_HISTORY
    assert updated[0].run == "r1" and updated[-1].run == "new"
    assert [e.run for e in record(history[:5], entry("new"), limit=3)] == ["r3", "r4", "new"]
    updated_oldest = record(history[:3], entry("r1", phase="Failed"), limit=2)
    assert [e.run for e in updated_oldest] == ["r1", "r2"]
    assert record(history[:3], entry("new"), limit=0) == []


# -- to_delete ----------------------------------------------------------------------------------


def stamp(minute: int) -> str:
    return f"2026-12-05T01:{minute:02d}:00Z"


RUNS = [
    ("s5", "Succeeded", stamp(50)),
    ("f1", "Failed", stamp(5)),
    ("s1", "Succeeded", stamp(10)),
    ("p1", "Pending", stamp(1)),
    ("s3", "Succeeded", stamp(30)),
    ("g1", "Generating", stamp(2)),
    ("f2", "Failed", stamp(25)),
    ("s2", "Succeeded", stamp(20)),
    ("f3", "Failed", stamp(45)),
    ("s4", "Succeeded", stamp(40)),
]


def test_finished_runs_beyond_each_limit_are_deleted_oldest_first() -> None:
    assert to_delete(RUNS, successful_limit=3, failed_limit=1) == ["f1", "s1", "s2", "f2"]


def test_each_limit_counts_its_own_phase() -> None:
    assert to_delete(RUNS, successful_limit=5, failed_limit=1) == ["f1", "f2"]
    assert to_delete(RUNS, successful_limit=2, failed_limit=3) == ["s1", "s2", "s3"]
    assert to_delete(RUNS, successful_limit=100, failed_limit=100) == []


def test_a_limit_of_zero_deletes_every_finished_run_and_never_an_unfinished_one() -> None:
    doomed = to_delete(RUNS, successful_limit=0, failed_limit=0)
    assert doomed == ["f1", "s1", "s2", "f2", "s3", "s4", "f3", "s5"]
    assert "p1" not in doomed and "g1" not in doomed


def test_a_run_without_a_creation_time_counts_as_the_newest_and_ties_go_by_name() -> None:
    runs = [("b", "Succeeded", stamp(1)), ("a", "Succeeded", stamp(1)), ("z", "Succeeded", "")]
    assert to_delete(runs, successful_limit=1, failed_limit=1) == ["a", "b"]
