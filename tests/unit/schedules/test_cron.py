"""kyai.schedules' cron: the times Kubernetes' CronJob controller would make runs for."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from kyai.schedules import TOO_MANY_MISSED, ScheduleError, due, parse, period_seconds

T0 = datetime(2026, 12, 5, 0, 0, tzinfo=UTC)


def at(**delta: float) -> datetime:
    return T0 + timedelta(**delta)


def every_minute(now: datetime, *, last: datetime | None = None, deadline: int | None = None):
    return due("* * * * *", None, last=last, created=T0, now=now,
               starting_deadline_seconds=deadline)  # fmt: skip


# -- due ----------------------------------------------------------------------------------------


def test_nothing_is_due_before_the_first_minute() -> None:
    found = every_minute(at(seconds=59))
    assert found.run_at is None
    assert found.missed == 0 and not found.too_late and not found.too_many_missed
    assert found.next_at == at(minutes=1)


def test_an_every_minute_schedule_is_due_after_60_seconds() -> None:
    found = every_minute(at(seconds=60))
    assert found.run_at == at(minutes=1)
    assert found.missed == 1
    assert found.next_at == at(minutes=2)
    assert found.run_at.tzinfo is not None and found.run_at.utcoffset() == timedelta(0)


def test_the_last_schedule_time_is_not_made_again() -> None:
    assert every_minute(at(seconds=90), last=at(minutes=1)).run_at is None
    assert every_minute(at(minutes=2), last=at(minutes=1)).run_at == at(minutes=2)


def test_missed_times_are_counted_and_only_the_most_recent_is_made() -> None:
    found = every_minute(at(minutes=5, seconds=30))
    assert found.missed == 5
    assert found.run_at == at(minutes=5)
    assert found.next_at == at(minutes=6)


def test_last_replaces_the_creation_time_as_the_earliest() -> None:
    found = every_minute(at(minutes=10, seconds=1), last=at(minutes=7))
    assert (found.missed, found.run_at) == (3, at(minutes=10))


def test_a_time_older_than_the_starting_deadline_is_too_late() -> None:
    hourly = dict(last=None, created=T0, now=at(minutes=90))
    late = due("0 * * * *", None, **hourly, starting_deadline_seconds=600)
    assert late.too_late and late.run_at is None
    assert late.missed == 1 and late.next_at == at(hours=2)
    in_time = due("0 * * * *", None, **hourly, starting_deadline_seconds=3600)
    assert not in_time.too_late and in_time.run_at == at(hours=1)
    no_deadline = due("0 * * * *", None, **hourly, starting_deadline_seconds=None)
    assert not no_deadline.too_late and no_deadline.run_at == at(hours=1)


def test_the_deadline_window_is_open_at_its_start_as_cronjobs() -> None:
    # CronJob lists the times in (now - deadline, now]: one exactly deadline old is left out.
    edge = due("0 * * * *", None, last=None, created=T0, now=at(minutes=70),
               starting_deadline_seconds=600)  # fmt: skip
    assert edge.too_late and edge.run_at is None
    inside = due("0 * * * *", None, last=None, created=T0, now=at(minutes=69, seconds=59),
                 starting_deadline_seconds=600)  # fmt: skip
    assert not inside.too_late and inside.run_at == at(hours=1)


def test_more_than_100_missed_is_too_many_and_the_most_recent_is_still_made() -> None:
    exactly = every_minute(at(minutes=TOO_MANY_MISSED, seconds=30))
    assert exactly.missed == 100 and not exactly.too_many_missed
    over = every_minute(at(minutes=TOO_MANY_MISSED + 1, seconds=30))
    assert over.missed == 101 and over.too_many_missed
    assert over.run_at == at(minutes=101)
    many = every_minute(at(minutes=500))
    assert many.missed == 500 and many.too_many_missed and many.run_at == at(minutes=500)


def test_a_starting_deadline_bounds_the_window_too_many_is_counted_in() -> None:
    found = every_minute(at(minutes=500), deadline=600)
    assert found.missed == 500
    assert not found.too_many_missed
    assert found.run_at == at(minutes=500)


def test_a_year_of_missed_minutes_is_counted_without_walking_them() -> None:
    started = time.monotonic()
    found = every_minute(at(days=365))
    assert time.monotonic() - started < 2
    assert found.missed == 365 * 24 * 60
    assert found.too_many_missed and found.run_at == at(days=365)


@pytest.mark.parametrize(
    ("schedule", "now", "run_at", "missed"),
    [
        ("@hourly", at(hours=2, minutes=5), at(hours=2), 2),
        ("@daily", at(days=3, hours=1), at(days=3), 3),
        ("@midnight", at(days=1, seconds=1), at(days=1), 1),
        ("@weekly", at(days=7), datetime(2026, 12, 6, tzinfo=UTC), 1),  # Sunday
        ("@monthly", at(days=30), datetime(2027, 1, 1, tzinfo=UTC), 1),
        ("@yearly", at(days=100), datetime(2027, 1, 1, tzinfo=UTC), 1),
        ("@annually", at(days=100), datetime(2027, 1, 1, tzinfo=UTC), 1),
    ],
)
def test_macros(schedule: str, now: datetime, run_at: datetime, missed: int) -> None:
    found = due(schedule, None, last=None, created=at(minutes=10), now=now,
                starting_deadline_seconds=None)  # fmt: skip
    assert (found.run_at, found.missed) == (run_at, missed)


def test_a_time_zone_keeps_9_local_across_a_change_of_daylight_saving_time() -> None:
    lisbon = ZoneInfo("Europe/Lisbon")
    # Saturday 28 March 2026 09:00 is 09:00 UTC (WET); on Sunday the clocks go to WEST (+1).
    last = datetime(2026, 3, 28, 9, 0, tzinfo=UTC)
    now = datetime(2026, 3, 29, 8, 30, tzinfo=UTC)
    found = due("0 9 * * *", "Europe/Lisbon", last=last, created=last - timedelta(days=9),
                now=now, starting_deadline_seconds=None)  # fmt: skip
    assert found.run_at == datetime(2026, 3, 29, 8, 0, tzinfo=UTC)
    assert found.run_at.astimezone(lisbon).hour == 9
    assert found.next_at == datetime(2026, 3, 30, 8, 0, tzinfo=UTC)
    assert found.next_at.astimezone(lisbon).hour == 9
    utc = due("0 9 * * *", None, last=last, created=last, now=now,
              starting_deadline_seconds=None)  # fmt: skip
    assert utc.run_at is None and utc.next_at == datetime(2026, 3, 29, 9, 0, tzinfo=UTC)


def test_times_come_back_in_utc_whatever_zone_they_came_in() -> None:
    lisbon_now = datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Lisbon"))
    found = due("0 * * * *", None, last=None, created=lisbon_now - timedelta(hours=2),
                now=lisbon_now, starting_deadline_seconds=None)  # fmt: skip
    assert found.run_at == datetime(2026, 7, 1, 11, 0, tzinfo=UTC)
    assert found.run_at.tzinfo is UTC and found.next_at.tzinfo is UTC


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="now must be a timezone-aware"):
        due("* * * * *", None, last=None, created=T0, now=datetime(2026, 12, 5, 1),
            starting_deadline_seconds=None)  # fmt: skip


# -- parse --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "time_zone", "field", "words"),
    [
        ("* * *", None, "spec.schedule '* * *'", "3 field(s)"),
        ("* * * * * *", None, "spec.schedule '* * * * * *'", "6 field(s)"),
        ("61 * * * *", None, "spec.schedule '61 * * * *'", "out of range"),
        ("TZ=UTC * * * * *", None, "spec.schedule 'TZ=UTC * * * * *'", "spec.timeZone"),
        ("CRON_TZ=Europe/Lisbon 0 9 * * *", None, "spec.schedule 'CRON_TZ=", "TZ or CRON_TZ"),
        ("@every 5m", None, "spec.schedule '@every 5m'", "not a macro"),
        ("@reboot", None, "spec.schedule '@reboot'", "not a macro"),
        ("0 0 L * *", None, "spec.schedule '0 0 L * *'", "day of month field 'L'"),
        ("0 0 * * 5#2", None, "spec.schedule '0 0 * * 5#2'", "day of week field"),
        ("H * * * *", None, "spec.schedule 'H * * * *'", "minute field 'H'"),
        ("0 0 * foo *", None, "spec.schedule '0 0 * foo *'", "month field 'foo'"),
        ("0 0 * * 7", None, "spec.schedule '0 0 * * 7'", "0-6"),
        ("0 0 31 2 *", None, "spec.schedule '0 0 31 2 *'", "never fires"),
        ("* * * * *", "Mars/Olympus", "spec.timeZone 'Mars/Olympus'", "unknown time zone"),
        ("* * * * *", "America", "spec.timeZone 'America'", "unknown time zone"),
        ("* * * * *", "../etc/passwd", "spec.timeZone '../etc/passwd'", "unknown time zone"),
        ("* * * * *", "Local", "spec.timeZone 'Local'", "explicit IANA time zone"),
        ("* * * * *", "", "spec.timeZone ''", "time zone name"),
    ],
)
def test_refused_schedules_name_the_field_and_the_value(
    schedule: str, time_zone: str | None, field: str, words: str
) -> None:
    with pytest.raises(ScheduleError) as raised:
        parse(schedule, time_zone)
    assert str(raised.value).startswith(field)
    assert words in str(raised.value)
    with pytest.raises(ScheduleError):
        due(schedule, time_zone, last=None, created=T0, now=at(hours=1),
            starting_deadline_seconds=None)  # fmt: skip


@pytest.mark.parametrize(
    "schedule",
    ["* * * * *", "*/5 * * * *", "0 9 * * 1-5", "0 0 * jan-mar MON", "5/15 1,2 ? * sun",
     "0 0 29 2 *", "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly",
     "@annually", "  0   9 * * *  "],
)  # fmt: skip
def test_cronjob_schedules_are_read(schedule: str) -> None:
    parse(schedule, None)
    parse(schedule, "Europe/Lisbon")


# -- period_seconds -----------------------------------------------------------------------------


def test_period_seconds() -> None:
    assert period_seconds("*/5 * * * *", None, at=T0) == 300
    assert period_seconds("@hourly", None, at=T0) == 3600
    assert period_seconds("0 9 * * *", None, at=T0) == 86400
    # Lisbon's 09:00 on 28 March (WET) to 09:00 on 29 March (WEST): 23 hours.
    spring = datetime(2026, 3, 28, 8, tzinfo=UTC)
    assert period_seconds("0 9 * * *", "Europe/Lisbon", at=spring) == 23 * 3600
    with pytest.raises(ScheduleError, match=r"^spec\.schedule '61 \* \* \* \*'"):
        period_seconds("61 * * * *", None, at=T0)
