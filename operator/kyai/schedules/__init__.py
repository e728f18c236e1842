"""EvaluationSchedule logic without Kubernetes I/O: times, names, history and regressions in.

The controller of the EvaluationSchedule kind reads the schedule and its runs, then asks:

1. :func:`parse` / :func:`due`: whether the cron schedule can be read, and which schedule time
   to make a run for now, as Kubernetes' CronJob decides it (missed times, the starting
   deadline, ``TooManyMissedTimes``); :func:`period_seconds` for the alert on two periods
   without a successful run;
2. :func:`run_name`: the run's predictable name (CronJob's ``<name>-<minutes>`` for scheduled
   runs);
3. :func:`pick_baseline` / :func:`compare_runs` / :func:`regression_message`: each finished
   run against its baseline with ``kyai compare``'s statistics, and the Regressed condition's
   line;
4. :func:`record` / :func:`to_delete`: the history kept in the status, and the finished runs
   beyond the history limits.
"""

from __future__ import annotations

from kyai.schedules._cron import (
    MACROS,
    TOO_MANY_MISSED,
    Due,
    ScheduleError,
    due,
    parse,
    period_seconds,
)
from kyai.schedules._history import record, run_name, to_delete
from kyai.schedules._regression import (
    BASELINE_KINDS,
    compare_runs,
    pick_baseline,
    regression_message,
)

__all__ = [
    "BASELINE_KINDS",
    "MACROS",
    "TOO_MANY_MISSED",
    "Due",
    "ScheduleError",
    "compare_runs",
    "due",
    "parse",
    "period_seconds",
    "pick_baseline",
    "record",
    "regression_message",
    "run_name",
    "to_delete",
]
