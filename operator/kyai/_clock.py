"""The one clock of status timestamps: RFC 3339, UTC, with a ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def now(*, timespec: str = "seconds") -> str:
    """The current UTC time, e.g. ``2026-01-31T12:00:00Z`` (``timespec`` as isoformat's)."""
    return datetime.now(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
