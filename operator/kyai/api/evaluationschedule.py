"""EvaluationSchedule: an EvaluationRun made again on a schedule and when the engine changes.

A schedule holds an EvaluationRun template (``spec.runTemplate``: the runs' ``metadata`` and
``spec``, as a CronJob's ``jobTemplate``) and says when to make a run of it: on a cron
``schedule`` (CronJob's syntax and rules: ``timeZone``, ``startingDeadlineSeconds``,
``concurrencyPolicy``, ``suspend``, the history limits), when the Workload's effective serving
configuration changes and it is Ready again (``triggers.onWorkloadChange``), and on request
(the annotation ``kyai.io/run-now``). Each finished run is compared with the schedule's
baseline (``spec.regression``); the status keeps a compact history that outlives the runs.
The decisions are pure functions in :mod:`kyai.schedules`; these are the models the CRD is
generated from (:func:`evaluation_schedule_crd`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from kyai.api._base import KyaiModel, LocalObjectReference, StatusBase
from kyai.api._crd import PrinterColumn, crd
from kyai.api.evaluationrun import EvaluationRunSpec

#: status.history holds at most this many entries (the newest).
MAX_HISTORY = 50
#: status.active names at most this many runs (Forbid and Replace keep one; a burst of
#: run-now requests may briefly make more).
MAX_ACTIVE = 10

ConcurrencyPolicy = Literal["Forbid", "Replace"]
BaselineKind = Literal["previous", "pinned", "best"]
Trigger = Literal["schedule", "change", "request"]
SchedulePhase = Literal["Active", "Suspended", "Invalid"]


class RunTemplateMetadata(KyaiModel):
    """Labels and annotations every run gets (the schedule adds its own)."""

    labels: dict[str, str] | None = None
    """Labels of each run."""
    annotations: dict[str, str] | None = None
    """Annotations of each run."""


class RunTemplate(KyaiModel):
    """The runs the schedule makes: their metadata and an EvaluationRun spec."""

    metadata: RunTemplateMetadata | None = None
    """Labels and annotations of each run."""
    spec: EvaluationRunSpec
    """The EvaluationRun spec of each run (its Workload, Snapshot, judge or grader,
    thresholds), as written."""


class Triggers(KyaiModel):
    """What else than the schedule makes a run."""

    on_workload_change: bool = False
    """A new run when the Workload's effective serving configuration changes (its spec, its
    EngineArgsSet's args and env, the image) and it is Ready again: an Argo CD sync of a new
    engine is evaluated on its own."""


class Regression(KyaiModel):
    """How each finished run is compared with a baseline."""

    baseline: BaselineKind = "previous"
    """previous: the last Succeeded run of the same comparison key; pinned: runRef; best:
    the Succeeded run of the same key with the highest score in the history."""
    run_ref: LocalObjectReference | None = None
    """The pinned baseline run (baseline pinned)."""
    margin: float = Field(default=0.0, ge=0, le=1)
    """A difference shown worse than -margin (a fraction of the score scale, as
    thresholds.nonInferiority.margin) is a regression."""
    alpha: float = Field(default=0.05, gt=0, lt=1)
    """The level of the paired test and interval (95 % intervals at 0.05)."""

    @model_validator(mode="after")
    def _pinned(self) -> Regression:
        if (self.baseline == "pinned") != (self.run_ref is not None):
            raise ValueError(
                "spec.regression.runRef is required with baseline pinned, and only then"
            )
        return self


class EvaluationScheduleSpec(KyaiModel):
    """When to evaluate, what, and against which baseline."""

    run_template: RunTemplate
    """The runs the schedule makes."""
    schedule: str | None = Field(default=None, min_length=1, max_length=253)
    """A cron expression as CronJob reads it (5 fields, or @hourly, @daily, ...); none: only
    changes and requests make runs."""
    time_zone: str | None = Field(default=None, min_length=1, max_length=64)
    """The IANA time zone of the schedule (default: the operator's, UTC)."""
    starting_deadline_seconds: int | None = Field(default=None, ge=0)
    """A scheduled run more than this many seconds late is skipped (counted as missed)."""
    concurrency_policy: ConcurrencyPolicy = "Forbid"
    """Forbid: a due run waits while one is unfinished (a cron time that waits longer than
    startingDeadlineSeconds is missed, as CronJob's); Replace: the unfinished run is deleted
    for the new one. (No Allow: two evaluations at once would share the GPUs they measure.)"""
    suspend: bool = False
    """No new run while true (the runs already made go on)."""
    successful_runs_history_limit: int = Field(default=3, ge=0, le=100)
    """Succeeded runs kept (older ones are deleted, their history entries stay)."""
    failed_runs_history_limit: int = Field(default=1, ge=0, le=100)
    """Failed runs kept."""
    triggers: Triggers = Field(default_factory=Triggers)
    """Runs on a change of the Workload."""
    regression: Regression = Field(default_factory=Regression)
    """How each finished run is compared with the baseline."""


class HistoryEntry(KyaiModel):
    """One run of the schedule, kept after the run is deleted."""

    run: str
    """The run's name."""
    trigger: Trigger
    """Why it was made: schedule, change or request."""
    created_at: str | None = None
    """When it was made."""
    finished_at: str | None = None
    """When it finished."""
    phase: str | None = None
    """Succeeded or Failed (unfinished: its phase when last seen)."""
    score: float | None = None
    """Its avgScore."""
    low: float | None = None
    """Low end of the score's interval."""
    high: float | None = None
    """High end of the score's interval."""
    comparison_key: str | None = None
    """Its comparison key."""
    baseline: str | None = None
    """The run it was compared with."""
    difference: float | None = None
    """Its score minus the baseline's (paired mean difference)."""
    regressed: bool | None = None
    """Shown worse than the margin (None: not compared)."""


class RegressionResult(KyaiModel):
    """The last finished run compared with its baseline."""

    run: str
    """The run compared."""
    baseline: str | None = None
    """The baseline run (None: none of the same comparison key)."""
    questions: int | None = None
    """Questions paired."""
    difference: float | None = None
    """Mean difference (run minus baseline), as a fraction of the score scale."""
    low: float | None = None
    """Low end of the difference's interval."""
    high: float | None = None
    """High end of the difference's interval."""
    p_value: float | None = None
    """The paired test's p-value (exact McNemar for 0/1 scores, else the paired t-test)."""
    margin: float = 0.0
    """The margin."""
    regressed: bool | None = None
    """True: the interval's high end is below -margin; False: not shown worse; None: not
    comparable (another key, too few questions) or not estimable."""
    reason: str | None = None
    """Why no verdict was drawn, when none was."""


class EvaluationScheduleStatus(StatusBase):
    """The schedule's runs, its regression verdict and its history."""

    phase: SchedulePhase | None = None
    """Active, Suspended, or Invalid (a schedule or time zone that cannot be read)."""
    active: list[str] | None = Field(default=None, max_length=MAX_ACTIVE)
    """The schedule's unfinished runs."""
    last_schedule_time: str | None = None
    """The last cron time a run was made for (CronJob's lastScheduleTime)."""
    last_successful_time: str | None = None
    """When a run of the schedule last succeeded."""
    next_schedule_time: str | None = None
    """The next cron time."""
    period_seconds: float | None = None
    """Seconds between two cron times (the "no successful run for two periods" alert)."""
    last_run: str | None = None
    """The newest run."""
    last_score: float | None = None
    """The newest finished run's avgScore."""
    change: float | None = None
    """Its difference from the baseline."""
    regressed: bool | None = None
    """Whether it regressed (the Regressed condition's status)."""
    regression: RegressionResult | None = None
    """The newest finished run compared with its baseline."""
    serving_hash: str | None = None
    """The Workload's effective serving configuration last evaluated (onWorkloadChange)."""
    handled_run_now: str | None = None
    """The value of the kyai.io/run-now annotation last acted on."""
    runs: dict[str, int] | None = None
    """Runs made and finished, by outcome (succeeded, failed), since the schedule was made."""
    history: list[HistoryEntry] | None = Field(default=None, max_length=MAX_HISTORY)
    """The newest runs, newest last (kept after the runs are deleted)."""


def evaluation_schedule_columns() -> list[PrinterColumn]:
    """``kubectl get evaluationschedules`` columns."""
    return [
        PrinterColumn("Schedule", "string", ".spec.schedule", "The cron schedule."),
        PrinterColumn("Suspend", "boolean", ".spec.suspend", "Whether new runs are held."),
        PrinterColumn("Last-Score", "number", ".status.lastScore", "The newest run's score."),
        PrinterColumn("Change", "number", ".status.change", "Its difference from the baseline."),
        PrinterColumn("Regressed", "string", ".status.conditions[?(@.type==\"Regressed\")].status",
                      "Whether the newest finished run is shown worse than the margin."),
        PrinterColumn("Last-Run", "string", ".status.lastRun", "The newest run."),
        PrinterColumn("Next", "string", ".status.nextScheduleTime", "The next cron time."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation."),
    ]  # fmt: skip


def evaluation_schedule_crd() -> dict[str, Any]:
    """The EvaluationSchedule CRD (one entry of :func:`kyai.api.custom_resource_definitions`)."""
    return crd(
        "EvaluationSchedule",
        EvaluationScheduleSpec,
        EvaluationScheduleStatus,
        description="Continuous evaluation: an EvaluationRun made again on a cron schedule, "
        "when the Workload's serving configuration changes, and on request, each compared "
        "with a baseline; a history that outlives the runs.",
        columns=evaluation_schedule_columns(),
    )
