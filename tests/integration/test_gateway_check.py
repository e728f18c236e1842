"""The gateway's check of the default judge on its admin port, over real loopback HTTP.

``GET /upstream/v1/models`` on the metrics port answers what a judge worker gets from the
proxy's ``GET /v1/models`` (the operator checks the judge with it before a run generates
anything), with no token, and shares its answers: one upstream request at a time, each answer
reused for a few seconds. Uses the stand-in API server and the fixtures of test_gateway.py,
and an LLM double that counts its model-list requests (the double records chat requests only).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kyai.evaluation import ChatClient
from kyai.evaluation._client import ModelsAnswer
from kyai.gateway import (
    UPSTREAM_CHECK_BASE,
    UPSTREAM_CHECK_CACHE_SECONDS,
    UPSTREAM_CHECK_PATH,
    _proxy,
)
from kyai_testing import LLMDouble, ModelSpec
from kyai_testing.siblings import sibling

_gateway_tests = sibling(__file__, "test_gateway")
# The fixtures of test_gateway.py, by name (pytest finds fixtures among a module's names).
cluster = _gateway_tests.cluster
judge = _gateway_tests.judge
key_file = _gateway_tests.key_file
start_gateway = _gateway_tests.start_gateway
http = _gateway_tests.http
metrics_text = _gateway_tests.metrics_text
sample = _gateway_tests.sample
KEY = _gateway_tests.KEY
MODEL = _gateway_tests.MODEL

CHECKS = "kyai_judge_gateway_upstream_checks_total"


class ModelListDouble(LLMDouble):
    """The LLM double, recording its ``GET /v1/models`` requests, which it can delay or fail.

    ``failure``: ``(status, body)`` answered instead of the list, the body's ``echo`` field
    set to the request's ``Authorization`` (as a careless upstream would put it in an error).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_lists: list[dict[str, str]] = []
        self.model_list_delay_s = 0.0
        self.failure: tuple[int, dict[str, Any]] | None = None

    async def _list_models(self, request: web.Request) -> web.Response:
        self.model_lists.append(dict(request.headers))
        await asyncio.sleep(self.model_list_delay_s)
        if self.failure is not None:
            status, body = self.failure
            body = {**body, "echo": request.headers.get("Authorization", "")}
            return web.json_response(body, status=status)
        return await super()._list_models(request)


@pytest.fixture
async def lists() -> AsyncIterator[ModelListDouble]:
    double = ModelListDouble(
        models=[ModelSpec(MODEL), ModelSpec("other-model")], api_key=KEY, latency_s=0.0
    )
    async with double:
        yield double


async def _gateway(start_gateway: Any, lists: ModelListDouble, **settings: Any) -> Any:
    return await start_gateway(**{"upstream_url": lists.url, **settings})


def _check_url(gateway: Any) -> str:
    return f"http://127.0.0.1:{gateway.metrics_port}{UPSTREAM_CHECK_PATH}"


async def _check(
    http: aiohttp.ClientSession, gateway: Any, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    async with http.get(_check_url(gateway), headers=headers or {}) as reply:
        return reply.status, await reply.read(), dict(reply.headers)


async def _answers(gateway: Any, cluster: Any) -> tuple[ModelsAnswer, ModelsAnswer]:
    """What ``models_answer()`` makes of the check, and of the proxy's answer to a worker."""
    base = f"http://127.0.0.1:{gateway.metrics_port}{UPSTREAM_CHECK_BASE}"
    async with ChatClient(base) as client:
        checked = await client.models_answer()
    cluster.add_pod("team-a", "judge-pod", account="w")
    token = cluster.issue("team-a", "w", "judge-pod")
    async with ChatClient(f"http://127.0.0.1:{gateway.port}/v1", api_key=token) as client:
        proxied = await client.models_answer()
    return checked, proxied


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# -- the answer ------------------------------------------------------------------------------


async def test_the_check_answers_the_judges_filtered_list_with_the_key_and_no_token(
    start_gateway: Any, cluster: Any, lists: ModelListDouble, http: aiohttp.ClientSession
) -> None:
    gateway = await _gateway(start_gateway, lists)
    # No Authorization needed; one sent is neither read nor passed on.
    status, raw, headers = await _check(http, gateway, {"Authorization": "Bearer not-a-jwt"})
    assert status == 200, raw
    assert headers["Content-Type"].startswith("application/json")
    body = json.loads(raw)
    assert [card["id"] for card in body["data"]] == [MODEL]
    (sent,) = lists.model_lists
    assert sent["Authorization"] == f"Bearer {KEY}"
    assert KEY.encode() not in raw
    assert cluster.reviews == []  # no token was looked at

    checked, proxied = await _answers(gateway, cluster)
    assert checked.status == proxied.status == 200
    assert [card["id"] for card in checked.cards or []] == [MODEL]
    assert [card["id"] for card in proxied.cards or []] == [MODEL]
    text = await metrics_text(http, gateway)
    assert sample(text, CHECKS, code="200") == 2
    # The check is no caller of the proxy: only the worker's request is among the proxy's.
    requests = [
        line for line in text.splitlines() if line.startswith("kyai_judge_gateway_requests_total{")
    ]
    assert requests == ['kyai_judge_gateway_requests_total{code="200",namespace="team-a"} 1.0']


async def test_only_get_is_served_and_the_proxy_port_has_no_check(
    start_gateway: Any, lists: ModelListDouble, http: aiohttp.ClientSession
) -> None:
    gateway = await _gateway(start_gateway, lists)
    async with http.head(_check_url(gateway)) as reply:
        assert reply.status == 405
    async with http.post(_check_url(gateway)) as reply:
        assert reply.status == 405
    async with http.get(f"http://127.0.0.1:{gateway.port}{UPSTREAM_CHECK_PATH}") as reply:
        assert reply.status == 404
    assert lists.model_lists == []


# -- the same errors as the proxy, read the same by the client --------------------------------


async def test_an_unreachable_judge_is_a_502_the_client_reads_as_the_proxys(
    start_gateway: Any, cluster: Any, http: aiohttp.ClientSession
) -> None:
    gateway = await start_gateway(upstream_url=f"http://127.0.0.1:{_closed_port()}/v1")
    status, raw, _ = await _check(http, gateway)
    assert status == 502
    assert json.loads(raw)["error"] == {
        "message": "the gateway cannot reach the default judge (ClientConnectorError)",
        "type": "api_error",
        "code": "UpstreamUnreachable",
    }
    checked, proxied = await _answers(gateway, cluster)
    assert checked == proxied
    assert checked.status == 502 and checked.cards is None and checked.retryable
    assert not checked.gateway_refused and not checked.key_refused


@pytest.mark.parametrize("refusal", [401, 403])
async def test_the_judge_refusing_the_key_is_the_refused_key_answer(
    start_gateway: Any,
    cluster: Any,
    lists: ModelListDouble,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    refusal: int,
) -> None:
    lists.api_key = "sk-the-judge-now-wants-another-key"
    lists.unauthorized_status = refusal
    gateway = await _gateway(start_gateway, lists)
    with caplog.at_level(logging.DEBUG, logger="kyai"):
        status, raw, _ = await _check(http, gateway)
        checked, proxied = await _answers(gateway, cluster)
    assert status == 502
    assert json.loads(raw)["error"]["code"] == "UpstreamRefusedKey"
    assert KEY.encode() not in raw
    assert checked == proxied
    assert checked.gateway_refused and checked.key_refused and checked.status == 502
    assert f"refused the platform's API key (HTTP {refusal})" in checked.detail
    logged = [r.getMessage() for r in caplog.records if "refused the platform" in r.getMessage()]
    assert logged[0] == (
        f"the default judge refused the platform's API key (HTTP {refusal}) on the admin "
        f"port's check ({UPSTREAM_CHECK_PATH}): fix defaultJudge.apiKeySecret"
    )
    assert all(KEY not in record.getMessage() for record in caplog.records)
    text = await metrics_text(http, gateway)
    # The check's two answers were one upstream request; the proxy's request was another.
    assert len(lists.model_lists) == 2
    assert sample(text, "kyai_judge_gateway_upstream_refusals_total", code=str(refusal)) == 2
    assert sample(text, CHECKS, code="502") == 2


@pytest.mark.parametrize("status", [404, 500])
async def test_another_status_of_the_judge_is_passed_on_without_the_key(
    start_gateway: Any,
    cluster: Any,
    lists: ModelListDouble,
    http: aiohttp.ClientSession,
    status: int,
) -> None:
    lists.failure = (status, {"object": "error", "message": "no list today", "code": status})
    gateway = await _gateway(start_gateway, lists)
    answered, raw, _ = await _check(http, gateway)
    assert answered == status
    body = json.loads(raw)
    assert body["message"] == "no list today"
    # The judge echoed the key it was sent: the caller gets it redacted.
    assert body["echo"] == "Bearer [REDACTED]"
    assert KEY.encode() not in raw
    assert base64.b64encode(KEY.encode()).decode()[:12].encode() not in raw
    checked, proxied = await _answers(gateway, cluster)
    assert checked == proxied
    assert checked.status == status and checked.detail == f"HTTP {status}: no list today"
    assert checked.cards == ([] if status == 404 else None)


async def test_a_slow_judge_is_a_504_and_an_unreadable_key_a_503(
    start_gateway: Any,
    cluster: Any,
    lists: ModelListDouble,
    key_file: Path,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_proxy, "UPSTREAM_CHECK_CACHE_SECONDS", 0.0)
    lists.model_list_delay_s = 2.0
    gateway = await _gateway(
        start_gateway, lists, upstream_timeout_seconds=0.2, file_check_seconds=0
    )
    status, raw, _ = await _check(http, gateway)
    assert (status, json.loads(raw)["error"]["code"]) == (504, "UpstreamTimeout")
    checked, proxied = await _answers(gateway, cluster)
    assert checked == proxied and checked.status == 504 and checked.retryable

    key_file.unlink()
    asked = len(lists.model_lists)
    status, raw, _ = await _check(http, gateway)
    assert (status, json.loads(raw)["error"]) == (
        503,
        {
            "message": "the gateway cannot read the default judge's API key",
            "type": "api_error",
            "code": "KeyUnavailable",
        },
    )
    checked, proxied = await _answers(gateway, cluster)
    assert checked == proxied and checked.status == 503
    assert len(lists.model_lists) == asked  # no request went out without the key


# -- shared answers --------------------------------------------------------------------------


async def test_concurrent_and_recent_checks_share_one_upstream_request(
    start_gateway: Any,
    lists: ModelListDouble,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert UPSTREAM_CHECK_CACHE_SECONDS == 5.0
    cache_s = 1.0  # shorter than the product's, for the test's time
    monkeypatch.setattr(_proxy, "UPSTREAM_CHECK_CACHE_SECONDS", cache_s)
    lists.model_list_delay_s = 0.3
    gateway = await _gateway(start_gateway, lists)

    first, second = await asyncio.gather(_check(http, gateway), _check(http, gateway))
    third = await _check(http, gateway)  # well within the cache time
    assert len(lists.model_lists) == 1
    assert first[0] == second[0] == third[0] == 200
    assert first[1] == second[1] == third[1]

    await asyncio.sleep(cache_s + 0.1)
    fourth, fifth = await asyncio.gather(_check(http, gateway), _check(http, gateway))
    assert fourth[0] == fifth[0] == 200
    assert len(lists.model_lists) == 2
    assert sample(await metrics_text(http, gateway), CHECKS, code="200") == 5


async def test_an_error_answer_is_shared_too(
    start_gateway: Any, lists: ModelListDouble, http: aiohttp.ClientSession
) -> None:
    """A caller cannot make the gateway ask a failing judge again and again."""
    lists.failure = (500, {"object": "error", "message": "down", "code": 500})
    gateway = await _gateway(start_gateway, lists)
    answers = await asyncio.gather(*(_check(http, gateway) for _ in range(10)))
    assert {status for status, _, _ in answers} == {500}
    assert len(lists.model_lists) == 1
