"""The operator bench's watch client resumes where it was (bench/opbench/observe.py)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from opbench import observe
from opbench.observe import watch
from opbench.retry import RETRIES


class Stop(Exception):
    """Ends the test's watch (it never ends by itself)."""


def line(kind: str, version: str, name: str = "r") -> bytes:
    obj = {"metadata": {"name": name, "resourceVersion": version}}
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


async def broken(*lines: bytes) -> AsyncIterator[bytes]:
    """A stream that delivers ``lines`` and then breaks, as a reset connection does."""
    for chunk in lines:
        yield chunk
    raise httpx.ReadError("connection reset by peer")


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    async def sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr(observe.asyncio, "sleep", sleep)
    RETRIES.clear()


@pytest.mark.parametrize(
    ("first", "resumes_at"),
    [
        ((line("ADDED", "11"), line("MODIFIED", "12")), "12"),  # after the last event
        ((line("ADDED", "11"), line("BOOKMARK", "15", "")), "15"),  # from a bookmark
        ((), "10"),  # nothing seen: where it was
    ],
)
async def test_a_broken_stream_resumes_after_what_it_delivered(
    first: tuple[bytes, ...], resumes_at: str
) -> None:
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params["resourceVersion"])
        if len(asked) == 1:
            return httpx.Response(200, content=broken(*first))
        if len(asked) == 2:
            return httpx.Response(200, content=broken(line("MODIFIED", "16")))
        raise Stop

    seen: list[tuple[str, str]] = []

    def on_event(kind: str, obj: dict[str, Any], _: float) -> None:
        seen.append((kind, obj["metadata"]["resourceVersion"]))

    async with httpx.AsyncClient(
        transport=httpx.MockTransport(answer), base_url="http://api"
    ) as http:
        with pytest.raises(Stop):
            await watch(http, "/runs", "10", on_event)
    assert asked == ["10", resumes_at, "16"]
    delivered = [version for kind, version in seen]
    assert delivered == sorted(set(delivered))  # nothing twice
    assert RETRIES["watch-reconnect"] == 2
