"""The gateway's failures and its own time, exactly (issue 36's mutation pass).

What the gateway sends the judge, its own time on plain and streamed answers, a judge that is
too slow, unreachable, redirecting or refusing the key, and an unreadable key: the caller's
answer and the gateway's log line, word for word. Uses the stand-in API server, the LLM double
and the fixtures of test_gateway.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kyai_testing.siblings import sibling

_gateway_tests = sibling(__file__, "test_gateway")
# The fixtures of test_gateway.py, by name (pytest finds fixtures among a module's names).
cluster = _gateway_tests.cluster
judge = _gateway_tests.judge
key_file = _gateway_tests.key_file
start_gateway = _gateway_tests.start_gateway
http = _gateway_tests.http
chat_body = _gateway_tests.chat_body
metrics_text = _gateway_tests.metrics_text
post = _gateway_tests.post
KEY = _gateway_tests.KEY
OVERHEAD = "kyai_judge_gateway_overhead_seconds"


async def _caller(start_gateway: Any, cluster: Any, **settings: Any) -> tuple[Any, str]:
    gateway = await start_gateway(**settings)
    cluster.add_pod("team-a", "judge-pod", account="w")
    return gateway, cluster.issue("team-a", "w", "judge-pod")


def _histogram(text: str, name: str) -> tuple[float, float]:
    """``(count, sum)`` of an unlabelled histogram of the exposition."""
    values = {}
    for line in text.splitlines():
        for part in ("_count", "_sum"):
            if line.startswith(f"{name}{part} "):
                values[part] = float(line.rsplit(" ", 1)[1])
    return values.get("_count", 0.0), values.get("_sum", 0.0)


async def test_a_streamed_answer_counts_the_gateways_own_time_once(
    start_gateway: Any, cluster: Any, http: aiohttp.ClientSession
) -> None:
    gateway = await start_gateway()
    cluster.add_pod("team-a", "judge-pod", account="w")
    token = cluster.issue("team-a", "w", "judge-pod")
    name = OVERHEAD
    before = _histogram(await metrics_text(http, gateway), name)
    url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
    started = time.perf_counter()
    async with http.post(
        url, json=chat_body(stream=True), headers={"Authorization": f"Bearer {token}"}
    ) as reply:
        assert reply.status == 200
        await reply.read()
    # The gateway notes its time once the stream's end is written: wait for it (a safety
    # net against a hang only).
    deadline = time.monotonic() + 30
    while (count := _histogram(await metrics_text(http, gateway), name)[0]) == before[0]:
        assert time.monotonic() < deadline, "the streamed answer's overhead was never noted"
        await asyncio.sleep(0.05)
    wall = time.perf_counter() - started
    count, total = _histogram(await metrics_text(http, gateway), name)
    assert count == before[0] + 1
    # The gateway's own share of the request: never negative, never more than its whole time.
    assert 0.0 <= total - before[1] <= wall


async def test_a_plain_answer_counts_the_gateways_own_time_and_sends_json_with_the_key(
    start_gateway: Any, cluster: Any, judge: Any, http: aiohttp.ClientSession
) -> None:
    gateway, token = await _caller(start_gateway, cluster)
    started = time.perf_counter()
    status, _, _ = await post(http, gateway, token)
    wall = time.perf_counter() - started
    assert status == 200
    count, total = _histogram(await metrics_text(http, gateway), OVERHEAD)
    assert count == 1 and 0.0 <= total <= wall
    (record,) = judge.requests
    headers = {name.lower(): value for name, value in record.headers.items()}
    assert headers["content-type"] == "application/json"
    assert headers["authorization"] == f"Bearer {KEY}"


async def test_a_judge_slower_than_the_timeout_is_a_504(
    start_gateway: Any, cluster: Any, judge: Any, http: aiohttp.ClientSession
) -> None:
    judge.latency_s = 5.0
    gateway, token = await _caller(start_gateway, cluster, upstream_timeout_seconds=0.2)
    status, body, _ = await post(http, gateway, token)
    assert status == 504
    assert body["error"]["code"] == "UpstreamTimeout"
    assert body["error"]["message"] == "the default judge did not answer within 0.2 s"


async def test_a_redirecting_judge_is_not_followed(
    start_gateway: Any, cluster: Any, judge: Any, http: aiohttp.ClientSession
) -> None:
    """The platform's key goes to the judge's URL only, never where a redirect points."""

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"{judge.url}/chat/completions")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        gateway, token = await _caller(
            start_gateway, cluster, upstream_url=f"http://127.0.0.1:{port}/v1"
        )
        async with http.post(
            f"http://127.0.0.1:{gateway.port}/v1/chat/completions",
            json=chat_body(),
            headers={"Authorization": f"Bearer {token}"},
            allow_redirects=False,
        ) as reply:
            status = reply.status
    finally:
        await runner.cleanup()
    assert status == 307
    assert judge.requests == []


async def test_an_unreachable_judge_is_named_in_the_answer_and_the_log(
    start_gateway: Any, cluster: Any, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    gateway, token = await _caller(
        start_gateway, cluster, upstream_url=f"http://127.0.0.1:{closed}/v1"
    )
    with caplog.at_level(logging.WARNING, logger="kyai.gateway"):
        status, body, _ = await post(http, gateway, token)
    assert (status, body["error"]["code"]) == (502, "UpstreamUnreachable")
    assert body["error"]["message"] == (
        "the gateway cannot reach the default judge (ClientConnectorError)"
    )
    (line,) = [r.getMessage() for r in caplog.records if "cannot be reached" in r.getMessage()]
    assert line.startswith("the default judge cannot be reached: Cannot connect to host")


async def test_an_unreadable_key_is_a_503_and_logged(
    start_gateway: Any, cluster: Any, key_file: Path, http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    gateway, token = await _caller(start_gateway, cluster)
    key_file.unlink()
    await asyncio.sleep(1.05)  # the file is looked at once a second
    with caplog.at_level(logging.ERROR, logger="kyai.gateway"):
        status, body, _ = await post(http, gateway, token)
    assert (status, body["error"]["code"]) == (503, "KeyUnavailable")
    assert body["error"]["message"] == "the gateway cannot read the default judge's API key"
    assert any(str(key_file) in r.getMessage() for r in caplog.records if r.levelname == "ERROR")


async def test_the_judge_refusing_the_key_is_logged_word_for_word(
    start_gateway: Any, cluster: Any, judge: Any, http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    judge.api_key = "sk-the-judge-now-wants-another-key"
    gateway, token = await _caller(start_gateway, cluster)
    with caplog.at_level(logging.ERROR, logger="kyai.gateway"):
        status, body, _ = await post(http, gateway, token)
    assert status == 502
    assert body["error"]["message"] == (
        "the default judge refused the platform's API key (HTTP 401); the platform team must "
        "fix defaultJudge.apiKeySecret"
    )
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "the default judge refused the platform's API key (HTTP 401) on a request of namespace "
        "team-a: fix defaultJudge.apiKeySecret"
    ]
