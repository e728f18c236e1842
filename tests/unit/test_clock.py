"""The one clock of status timestamps: written with a ``Z``, read back by one parser."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kyai._clock import now, parse_time


def test_now_reads_back_as_the_same_instant() -> None:
    written = now(timespec="microseconds")
    assert written.endswith("Z")
    parsed = parse_time(written)
    assert parsed is not None and parsed.tzinfo is not None
    assert abs(datetime.now(UTC) - parsed) < timedelta(seconds=5)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.250Z", datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)),
        ("2026-01-02T05:04:05+02:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),  # no zone: UTC
    ],
)
def test_api_timestamps_parse_to_aware_datetimes(value: str, expected: datetime) -> None:
    parsed = parse_time(value)
    assert parsed == expected and parsed is not None and parsed.utcoffset() is not None
    if value.endswith("+02:00"):
        assert parsed.tzinfo == timezone(timedelta(hours=2))


@pytest.mark.parametrize("value", [None, "", "yesterday", "2026-13-01T00:00:00Z", 1767322245])
def test_what_is_not_a_timestamp_is_none(value: object) -> None:
    assert parse_time(value) is None
