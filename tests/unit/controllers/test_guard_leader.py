"""Leader election: a hung renew is cut after a retry period; the deadline counts from the send.

Issue 45, items 12 and 13. client-go retries a renew every retry period until the renew
deadline, never waiting on one request for all of it; and the deadline counts from when the
last successful renew was *sent* (``renewTime`` is written then), so a slow answer does not
stretch it past what the Lease promises to others. Against a Lease held in memory; the real
API server and two processes are in tests/system/test_leader_election.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NoReturn

import pytest

from kyai.controllers import leader
from kyai.controllers._kube import KubeError
from kyai.controllers.leader import LeaseConfig, LeaseElector

ME = "me"


class Lost(Exception):
    """Raised instead of ``os._exit`` when the elector gives up the Lease."""


def lose(message: str) -> NoReturn:
    raise Lost(message)


class MemoryLeases:
    """The Lease API in memory: ``hang`` requests never answer, each answer takes ``delay``."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.calls: list[str] = []
        self.hang = 0
        self.delay = delay
        self.on_answer: Any = None

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        self.calls.append(method)
        if self.hang:
            self.hang -= 1
            await asyncio.Event().wait()  # a connection the server no longer answers on
        if self.on_answer is not None:
            self.on_answer()
        if self.delay:
            await asyncio.sleep(self.delay)
        if method == "GET":
            if self.lease is None:
                raise KubeError("GET lease: HTTP 404", status=404)
            return self.lease
        self.version += 1
        self.lease = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": str(self.version)},
        }
        return self.lease


def elector(client: MemoryLeases, **timings: float) -> LeaseElector:
    config = LeaseConfig(namespace="ops", name="kyai-operator", identity=ME, **timings)
    return LeaseElector(client, config, on_lost=lose)  # type: ignore[arg-type]


async def test_a_hung_renew_is_cut_after_a_retry_period_and_tried_again() -> None:
    client = MemoryLeases()
    one = elector(client, lease_seconds=5.0, renew_deadline_seconds=4.0, retry_seconds=1.0)
    assert await one.try_acquire_or_renew()
    first = one.renewed_at
    assert first is not None
    client.hang = 1  # the next renew's GET never answers
    calls = len(client.calls)
    keeping = asyncio.create_task(one.keep())
    try:
        # retry 1 s, a hung try cut after 1 s, retry 1 s, renewed: ~3 s, inside the 4 s deadline.
        # Waiting the hung request out (to the deadline) would lose the Lease at 4 s instead.
        deadline = time.monotonic() + 3.8
        while one.renewed_at == first and time.monotonic() < deadline:
            if keeping.done():
                keeping.result()  # Lost: the renew deadline passed while waiting
            await asyncio.sleep(0.05)
        assert one.renewed_at is not None and one.renewed_at > first, client.calls
        assert client.calls[calls:calls + 3] == ["GET", "GET", "PUT"]  # fmt: skip
        assert one.renewed_at - first < 3.6  # tried again one retry period after the cut
    finally:
        keeping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await keeping


async def test_one_hung_try_is_abandoned_after_a_retry_period_not_the_renew_deadline() -> None:
    client = MemoryLeases()
    one = elector(client, lease_seconds=5.0, renew_deadline_seconds=4.0, retry_seconds=1.0)
    assert await one.try_acquire_or_renew()
    client.hang = 1
    started = time.monotonic()
    assert await one._attempt() is False
    assert 0.9 < time.monotonic() - started < 2.0


async def test_the_renew_deadline_counts_from_when_the_renew_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(leader, "clock", lambda: now[0])

    def slow() -> None:  # every answer comes 3 s after its request (the clock moves on)
        now[0] += 3.0

    client = MemoryLeases()
    client.on_answer = slow
    one = elector(client, lease_seconds=15.0, renew_deadline_seconds=10.0, retry_seconds=2.0)
    assert await one.try_acquire_or_renew()  # sent at 1000, answered (GET 404, POST) at 1006
    assert now[0] == 1006.0 and one.renewed_at == 1000.0
    now[0] = 1009.0
    one.check()  # 9 s after the send: within the deadline
    now[0] = 1010.5  # 10.5 s after the send, only 4.5 s after the answer: past it
    assert one.expired()
    with pytest.raises(Lost, match=r"last renewed 10.5 s ago, beyond the renew deadline of 10 s"):
        one.check()


async def test_a_renew_is_counted_from_its_send_not_its_slow_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [2000.0]
    monkeypatch.setattr(leader, "clock", lambda: now[0])
    client = MemoryLeases()
    one = elector(client, lease_seconds=15.0, renew_deadline_seconds=10.0, retry_seconds=2.0)
    assert await one.try_acquire_or_renew()
    now[0] = 2008.0

    def slow() -> None:
        now[0] += 4.0

    client.on_answer = slow
    assert await one.try_acquire_or_renew()  # a renew sent at 2008: GET and PUT take 8 s
    assert now[0] == 2016.0 and one.renewed_at == 2008.0
    now[0] = 2018.5
    assert one.expired()
