"""Cron schedules as Kubernetes' CronJob reads them, evaluated with croniter.

The rules are those of the CronJob API and controller (kubernetes ``pkg/apis/batch/validation``
and ``pkg/controller/cronjob/utils.go``, the v2 controller of Kubernetes 1.21 and later):

- :func:`parse`: five fields (minute, hour, day of month, month, day of week) or one of the
  macros @yearly @annually @monthly @weekly @daily @midnight @hourly, as robfig/cron's
  ``ParseStandard`` takes them; ``TZ=`` or ``CRON_TZ=`` inside the schedule is refused
  ("cannot use TZ or CRON_TZ in schedule, use timeZone field instead"); the time zone is an
  explicit IANA name (not ``Local``), read by :mod:`zoneinfo`.
- :func:`due`: ``mostRecentScheduleTime`` and ``syncCronJob``: the earliest time is the last
  schedule time, else the creation time; with ``startingDeadlineSeconds`` no time older than
  ``now - deadline`` is made; of the schedule times in ``(earliest, now]`` only the most recent
  is made. More than 100 of them in that window is CronJob's ``TooManyMissedTimes``: current
  controllers record a Warning event and still make the most recent (before the v2 controller
  they logged an error and made nothing); :attr:`Due.too_many_missed` says so and
  :attr:`Due.run_at` is still set.

Where this departs from CronJob, and why:

- croniter, not robfig/cron, computes the times. robfig's extensions are refused (``@every``;
  croniter's own are refused too: ``L``, ``W``, ``#``, ``H``, ``R``, a sixth or seventh field);
  ``?`` is taken in the day fields only (croniter's rule; robfig takes it anywhere). Across a
  change of daylight saving time the times are croniter's: a time the clocks skip is made when
  they land (01:30 on a spring-forward night at 02:00 summer time), a time they repeat is made
  twice.
- Missed times are counted one by one up to 101; beyond that the count is CronJob's estimate
  from the first two times (``(now - t1) / (t2 - t1) + 1``), enough to say "more than 100".
- A schedule that matches no date (``0 0 31 2 *``) is refused by :func:`parse`; CronJob takes
  the object and then reports ``InvalidSchedule`` on every sync.
- No time zone means UTC (the operator's), where CronJob takes kube-controller-manager's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

__all__ = [
    "MACROS",
    "TOO_MANY_MISSED",
    "Due",
    "ScheduleError",
    "due",
    "parse",
    "period_seconds",
]

#: The macros CronJob's documentation lists (robfig/cron's descriptors but ``@every``).
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

#: More missed schedule times than this in the window is CronJob's ``TooManyMissedTimes``.
TOO_MANY_MISSED = 100

_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
_MONTHS = frozenset("jan feb mar apr may jun jul aug sep oct nov dec".split())
_DAYS = frozenset("sun mon tue wed thu fri sat".split())
#: One item of a field's list: ``*`` / ``?`` or a value or a range, then an optional step.
_ITEM = re.compile(r"(?:[*?]|(?P<low>\d+)(?:-(?P<high>\d+))?)(?:/\d+)?")
_NAMED_ITEM = re.compile(
    r"(?:[*?]|(?P<low>\d+|[A-Za-z]{3})(?:-(?P<high>\d+|[A-Za-z]{3}))?)(?:/\d+)?"
)
#: A part of a time zone name, as the CronJob API validates it (the IANA naming rules).
_TIME_ZONE_PART = re.compile(r"[A-Za-z.\-_0-9+]{1,14}")


class ScheduleError(ValueError):
    """A schedule or time zone that cannot be read; the message names the field and value."""


@dataclass(frozen=True)
class Due:
    """What the schedule asks for at one moment (every time UTC-aware)."""

    #: The schedule time to make a run for now (the most recent one since ``last``); None:
    #: none is due.
    run_at: datetime | None
    #: The first schedule time after ``now``.
    next_at: datetime
    #: Schedule times passed since ``last`` (or the creation), up to the most recent.
    missed: int
    #: The most recent time is more than ``startingDeadlineSeconds`` old: no run is made
    #: (CronJob's missed starting deadline).
    too_late: bool
    #: More than 100 times in the window CronJob looks at (CronJob's ``TooManyMissedTimes``,
    #: a warning: the most recent is still made).
    too_many_missed: bool


def _schedule_error(schedule: str, why: str) -> ScheduleError:
    return ScheduleError(f"spec.schedule '{schedule}': {why}")


def _zone(time_zone: str | None) -> tzinfo:
    """The time zone the schedule is evaluated in (UTC when none is named)."""
    if time_zone is None:
        return UTC
    if not time_zone:
        raise ScheduleError("spec.timeZone '': a time zone name, or no spec.timeZone at all")
    for part in time_zone.split("/"):
        if part in (".", "..") or part.startswith("-") or not _TIME_ZONE_PART.fullmatch(part):
            raise ScheduleError(f"spec.timeZone '{time_zone}': unknown time zone")
    if time_zone.lower() == "local":
        raise ScheduleError(
            f"spec.timeZone '{time_zone}': name an explicit IANA time zone "
            "(https://www.iana.org/time-zones), as CronJob requires"
        )
    try:
        return ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(
            f"spec.timeZone '{time_zone}': unknown time zone (not in the IANA database)"
        ) from None


def _check_fields(schedule: str) -> None:
    """Refuse what CronJob's parser would not read (before croniter reads the rest)."""
    if "TZ" in schedule:
        raise _schedule_error(
            schedule, "cannot use TZ or CRON_TZ in the schedule; name the zone in spec.timeZone"
        )
    fields = schedule.split()
    if fields and fields[0].startswith("@"):
        if len(fields) != 1 or fields[0] not in MACROS:
            raise _schedule_error(
                schedule, f"{fields[0]} is not a macro CronJob reads ({', '.join(MACROS)})"
            )
        return
    if len(fields) != len(_FIELDS):
        raise _schedule_error(
            schedule,
            f"{len(fields)} field(s); CronJob reads exactly 5 (minute, hour, day of month, "
            f"month, day of week) or one of {', '.join(MACROS)}",
        )
    for index, text in enumerate(fields):
        _check_field(schedule, index, text)


def _check_field(schedule: str, index: int, text: str) -> None:
    names = _MONTHS if index == 3 else _DAYS if index == 4 else frozenset()
    for item in text.split(","):
        found = (_NAMED_ITEM if names else _ITEM).fullmatch(item)
        bounds = [] if found is None else [b for b in (found["low"], found["high"]) if b]
        if found is None or any(not b.isdigit() and b.lower() not in names for b in bounds):
            raise _schedule_error(
                schedule,
                f"the {_FIELDS[index]} field '{text}' is not CronJob's syntax (numbers"
                f"{', names' if names else ''}, *, ?, ranges a-b, steps /n, lists a,b; "
                "not L, W, #, H or R)",
            )
        if index == 4 and any(b.isdigit() and int(b) > 6 for b in bounds):
            raise _schedule_error(
                schedule, f"day of week '{item}': CronJob reads 0-6 (Sunday is 0) or sun-sat"
            )


def _cron(schedule: str, zone: tzinfo, start: datetime) -> croniter[datetime]:
    """A croniter from ``start`` (UTC-aware), evaluated in ``zone``."""
    return croniter(schedule, start.astimezone(zone), ret_type=datetime)


def _checked(schedule: str, time_zone: str | None) -> tzinfo:
    """The schedule's zone, once the schedule and zone are known to be readable."""
    zone = _zone(time_zone)
    _check_fields(schedule)
    try:
        _cron(schedule, zone, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterError as exc:
        if "failed to find next date" in str(exc):
            raise _schedule_error(schedule, "no date matches it, so it never fires") from None
        raise _schedule_error(schedule, str(exc)) from None
    return zone


def parse(schedule: str, time_zone: str | None) -> None:
    """Raise :class:`ScheduleError` when the schedule or time zone cannot be read.

    CronJob's rules: 5 fields or one of the macros @yearly @annually @monthly @weekly @daily
    @midnight @hourly; ``TZ=`` / ``CRON_TZ=`` inside ``spec.schedule`` is refused as Kubernetes
    refuses it (use ``spec.timeZone``); the time zone an IANA name :mod:`zoneinfo` knows.
    """
    _checked(schedule, time_zone)


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name} must be a timezone-aware datetime (UTC), got {value!r}")
    return value.astimezone(UTC)


def _next(schedule: str, zone: tzinfo, after: datetime) -> datetime:
    """The first schedule time after ``after``, UTC."""
    found: datetime = _cron(schedule, zone, after).get_next(datetime)
    return found.astimezone(UTC).replace(fold=0)


def _previous(schedule: str, zone: tzinfo, before: datetime) -> datetime:
    """The last schedule time before ``before``, UTC."""
    found: datetime = _cron(schedule, zone, before).get_prev(datetime)
    return found.astimezone(UTC).replace(fold=0)


def _count(schedule: str, zone: tzinfo, after: datetime, now: datetime) -> int:
    """Schedule times in ``(after, now]``: exact up to 101, then CronJob's estimate."""
    cron = _cron(schedule, zone, after)
    times: list[datetime] = []
    while len(times) <= TOO_MANY_MISSED:
        found: datetime = cron.get_next(datetime)
        if found.astimezone(UTC) > now:
            return len(times)
        times.append(found.astimezone(UTC))
    interval = max(1, round((times[1] - times[0]).total_seconds()))
    estimate = int((now - times[0]).total_seconds()) // interval + 1
    return max(len(times), estimate)


def due(
    schedule: str,
    time_zone: str | None,
    *,
    last: datetime | None,
    created: datetime,
    now: datetime,
    starting_deadline_seconds: int | None,
) -> Due:
    """What CronJob's controller decides at ``now`` (``mostRecentScheduleTime``).

    ``earliest = last or created``; with a starting deadline the window starts at
    ``max(earliest, now - deadline)``; of the schedule times in ``(earliest, now]`` the most
    recent is due unless it is not inside the window (``too_late``: no run, as CronJob, whose
    window leaves it out). ``missed`` counts the times in ``(earliest, now]``;
    ``too_many_missed`` is more than 100 in the window (a warning; the run is still due). All
    datetimes UTC-aware in and out; the schedule is evaluated in ``time_zone`` (daylight
    saving time as croniter handles it). Raises :class:`ScheduleError` as :func:`parse`.
    """
    zone = _checked(schedule, time_zone)
    now = _utc(now, "now")
    earliest = _utc(last, "last") if last is not None else _utc(created, "created")
    next_at = _next(schedule, zone, now)
    most_recent = _previous(schedule, zone, next_at)
    if most_recent <= earliest:
        return Due(None, next_at, missed=0, too_late=False, too_many_missed=False)
    missed = _count(schedule, zone, earliest, now)
    window = earliest
    if starting_deadline_seconds is not None:
        window = max(earliest, now - timedelta(seconds=starting_deadline_seconds))
    if most_recent <= window:
        return Due(None, next_at, missed=missed, too_late=True, too_many_missed=False)
    in_window = missed if window == earliest else _count(schedule, zone, window, now)
    return Due(
        most_recent,
        next_at,
        missed=missed,
        too_late=False,
        too_many_missed=in_window > TOO_MANY_MISSED,
    )


def period_seconds(schedule: str, time_zone: str | None, *, at: datetime) -> float:
    """Seconds between the next two schedule times after ``at``.

    The alert "no successful run for two schedule periods" takes it. Raises
    :class:`ScheduleError` as :func:`parse`.
    """
    zone = _checked(schedule, time_zone)
    first = _next(schedule, zone, _utc(at, "at"))
    return (_next(schedule, zone, first) - first).total_seconds()
