"""A schedule's runs: their names, the history kept in its status, the runs to delete.

- :func:`run_name`: predictable names, so that a restarted operator finds the run it made
  instead of making another: ``<schedule>-<minutes since the epoch>`` for a scheduled run (as
  CronJob names its Jobs: ``getJobName``, ``getTimeHashInMinutes``), ``<schedule>-c-<UTC
  yyyymmddhhmmss>`` for a run made on a change of the Workload and ``<schedule>-r-...`` for one
  made on request; cut to 63 characters with a short hash of the whole name when longer.
- :func:`record`: the compact history (newest last, at most ``MAX_HISTORY`` entries) that
  outlives the runs.
- :func:`to_delete`: CronJob's ``cleanupFinishedJobs``: the oldest finished runs beyond
  ``successfulRunsHistoryLimit`` (Succeeded) and ``failedRunsHistoryLimit`` (Failed);
  unfinished runs are never deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from kyai._clock import parse_time
from kyai.api import HistoryEntry
from kyai.api.evaluationschedule import MAX_HISTORY
from kyai.builders import LABEL_NAME_MAX, child_name

__all__ = ["record", "run_name", "to_delete"]

#: The letter a run's name carries for the trigger that made it (scheduled runs: none).
_TRIGGER_LETTERS = {"change": "c", "request": "r"}


def run_name(schedule: str, trigger: str, at: datetime) -> str:
    """The name of the run ``schedule`` makes for ``trigger`` at ``at`` (UTC-aware).

    schedule: ``<schedule>-<minutes since the epoch of at>`` (CronJob's Job names); change and
    request: ``<schedule>-<c|r>-<at as UTC yyyymmddhhmmss>``. Always a DNS-1123 subdomain of
    at most 63 characters: a longer one keeps the suffix and the head of the schedule's name,
    with 8 hex digits of the whole name's sha256 between them. The same inputs give the same
    name.
    """
    if at.tzinfo is None:
        raise ValueError(f"at must be a timezone-aware datetime (UTC), got {at!r}")
    at = at.astimezone(UTC)
    if trigger == "schedule":
        suffix = f"-{int(at.timestamp()) // 60}"
    elif trigger in _TRIGGER_LETTERS:
        suffix = f"-{_TRIGGER_LETTERS[trigger]}-{at:%Y%m%d%H%M%S}"
    else:
        raise ValueError(f"unknown trigger {trigger!r} (schedule, change or request)")
    return child_name(schedule, suffix, limit=LABEL_NAME_MAX)


def record(
    history: Sequence[HistoryEntry], entry: HistoryEntry, *, limit: int = MAX_HISTORY
) -> list[HistoryEntry]:
    """The history with ``entry`` added, or updated in place when it names a run it holds.

    An update takes the fields ``entry`` sets (given to its constructor or assigned) and keeps
    the others. Newest last; at most ``limit`` entries (the oldest are dropped). ``history``
    itself is left as it is.
    """
    updated = list(history)
    for position, earlier in enumerate(updated):
        if earlier.run == entry.run:
            changes = {name: getattr(entry, name) for name in entry.model_fields_set}
            updated[position] = earlier.model_copy(update=changes)
            break
    else:
        updated.append(entry)
    return updated[-limit:] if limit > 0 else []


def _age(run: tuple[str, str, str]) -> tuple[bool, datetime, str]:
    """Oldest first; a run without a readable creation time counts as the newest."""
    created = parse_time(run[2])
    return created is None, created or datetime.max.replace(tzinfo=UTC), run[0]


def to_delete(
    runs: Sequence[tuple[str, str, str]], *, successful_limit: int, failed_limit: int
) -> list[str]:
    """The runs to delete, oldest first: finished runs beyond each history limit.

    ``runs``: ``(name, phase, creation time RFC 3339)`` of the schedule's runs. As CronJob's
    ``cleanupFinishedJobs``: the oldest Succeeded runs beyond ``successful_limit``, the oldest
    Failed runs beyond ``failed_limit`` (ties in time: by name); unfinished runs never.
    """
    doomed: list[tuple[str, str, str]] = []
    for phase, limit in (("Succeeded", successful_limit), ("Failed", failed_limit)):
        finished = sorted((run for run in runs if run[1] == phase), key=_age)
        doomed += finished[: max(0, len(finished) - max(0, limit))]
    return [run[0] for run in sorted(doomed, key=_age)]
