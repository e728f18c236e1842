"""The one clock of status timestamps: RFC 3339, UTC, with a ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp of the API (``2026-01-02T03:04:05Z``), aware; None if not one.

    A timestamp without a zone is taken as UTC.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def now(*, timespec: str = "seconds") -> str:
    """The current UTC time, e.g. ``2026-01-31T12:00:00Z`` (``timespec`` as isoformat's)."""
    return datetime.now(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
