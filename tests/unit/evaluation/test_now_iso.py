"""The records' timestamps: formatted once per millisecond, always the current time."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from kyai.evaluation._generate import now_iso

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def reference() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_a_stamp_is_the_current_utc_millisecond() -> None:
    for _ in range(50):
        before = reference()
        stamp = now_iso()
        after = reference()
        assert STAMP.fullmatch(stamp)
        assert before <= stamp <= after


def test_stamps_follow_the_clock_across_milliseconds_and_seconds() -> None:
    stamps = []
    deadline = time.monotonic() + 1.2  # crosses at least one second boundary
    while time.monotonic() < deadline:
        stamps.append(now_iso())
        time.sleep(0.0007)
    assert stamps == sorted(stamps)
    assert len(set(stamps)) > 20
    assert len({stamp[:19] for stamp in stamps}) >= 2
    for stamp in stamps:
        moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
        assert abs(moment.replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds() < 5
