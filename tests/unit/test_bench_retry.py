"""The operator bench's client retries as client-go does (bench/opbench/retry.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from opbench import retry
from opbench.retry import MAX_RETRIES, RETRIES, RetryingTransport, retry_after


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(retry.asyncio, "sleep", sleep)
    RETRIES.clear()
    return slept


def client(answers: list[Callable[[httpx.Request], httpx.Response]]) -> httpx.AsyncClient:
    calls = iter(answers)
    transport = RetryingTransport(httpx.MockTransport(lambda request: next(calls)(request)))
    return httpx.AsyncClient(transport=transport, base_url="http://api")


def answer(status: int, **headers: str) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, headers=headers, json={})


def reset(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadError("Connection reset by peer", request=request)


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("Connection refused", request=request)


async def test_a_429_is_sent_again_after_its_retry_after(no_sleep: list[float]) -> None:
    async with client([answer(429, **{"Retry-After": "2"}), answer(201)]) as http:
        response = await http.post("/x", json={"a": 1})
    assert response.status_code == 201
    assert no_sleep == [2.0] and RETRIES == {"429": 1}


async def test_a_5xx_is_retried_only_with_retry_after() -> None:
    async with client([answer(503, **{"Retry-After": "1"}), answer(500), answer(200)]) as http:
        assert (await http.get("/x")).status_code == 500
    assert RETRIES == {"5xx": 1}


async def test_a_reset_is_retried_for_get_not_for_post() -> None:
    async with client([reset, answer(200)]) as http:
        assert (await http.get("/x")).status_code == 200
    async with client([reset, answer(201)]) as http:
        with pytest.raises(httpx.ReadError):
            await http.post("/x", json={})
    assert RETRIES == {"reset-get": 1}


async def test_a_refused_connect_is_retried_for_any_verb() -> None:
    async with client([refused, refused, answer(201)]) as http:
        assert (await http.post("/x", json={})).status_code == 201
    assert RETRIES == {"connect": 2}


async def test_retries_stop_after_client_gos_ten() -> None:
    async with client([answer(429)] * (MAX_RETRIES + 1)) as http:
        assert (await http.get("/x")).status_code == 429
    assert RETRIES == {"429": MAX_RETRIES}


def test_retry_after_reads_the_header_within_bounds() -> None:
    assert retry_after(httpx.Response(429)) == 1.0
    assert retry_after(httpx.Response(429, headers={"Retry-After": "600"})) == 10.0
    assert retry_after(httpx.Response(502)) is None
    assert retry_after(httpx.Response(200, headers={"Retry-After": "3"})) is None
