"""Guards of the chat client (issue 14, survivors of ``make mutation`` in evaluation/_client):
``Retry-After`` as an HTTP date, the reason a failed request records, and which statuses and
fields make a context overflow."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from aiohttp import web

from kyai.evaluation import (
    ChatClient,
    ChatError,
    EndpointUnreachableError,
    RetryPolicy,
    parse_overflow,
)

MESSAGES = [{"role": "user", "content": "hi"}]
PATIENT = RetryPolicy(max_retries=1, backoff_base_s=0.001, backoff_max_s=120.0)


def completion() -> dict[str, object]:
    return {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }


async def slept_after(
    monkeypatch: pytest.MonkeyPatch, retry_after: str, policy: RetryPolicy = PATIENT
) -> float:
    """How long the client waits after a 503 carrying ``Retry-After: retry_after``."""
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("asyncio.sleep", fake_sleep)
    answers = [
        httpx.Response(503, headers={"Retry-After": retry_after}, json={}),
        httpx.Response(200, json=completion()),
    ]
    transport = httpx.MockTransport(lambda request: answers.pop(0))
    async with ChatClient("http://llm.test", retry=policy, transport=transport) as client:
        await client.chat("m", MESSAGES, max_tokens=5)
    assert len(slept) == 1
    return slept[0]


async def test_retry_after_as_an_http_date_in_the_future(monkeypatch: pytest.MonkeyPatch) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    waited = await slept_after(monkeypatch, format_datetime(when, usegmt=True))
    assert 27.0 <= waited <= 30.0


async def test_retry_after_as_a_date_without_zone_is_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    naive = format_datetime(when.replace(tzinfo=None))  # "... -0000": no zone given
    waited = await slept_after(monkeypatch, naive)
    assert 27.0 <= waited <= 30.0


async def test_retry_after_in_the_past_means_now(monkeypatch: pytest.MonkeyPatch) -> None:
    when = datetime.now(UTC) - timedelta(hours=1)
    assert await slept_after(monkeypatch, format_datetime(when, usegmt=True)) == 0.0


async def test_unreadable_retry_after_falls_back_to_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = RetryPolicy(max_retries=1, backoff_base_s=4.0, backoff_max_s=120.0)
    waited = await slept_after(monkeypatch, "soon", policy)
    assert 2.0 <= waited <= 4.0  # the first retry's jittered backoff


async def failure(response: httpx.Response) -> ChatError:
    transport = httpx.MockTransport(lambda request: response)
    async with ChatClient("http://llm.test", retry=PATIENT, transport=transport) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=5)
    return info.value


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(404, json={"error": {"message": "no such model"}}), "no such model"),
        (httpx.Response(404, json={"message": "flat message"}), "flat message"),
        (httpx.Response(404, json={"error": {"message": ""}}), '{"error":{"message":""}}'),
        (httpx.Response(404, text="  upstream is down \n"), "upstream is down"),
        (httpx.Response(404, text=""), "(empty body)"),
        (httpx.Response(404, text="x" * 600), "x" * 500),
    ],
)
async def test_the_reason_of_a_failed_request(response: httpx.Response, message: str) -> None:
    error = await failure(response)
    assert error.status == 404 and error.kind == "http_error"
    assert error.message == f"HTTP 404: {message}"


OVERFLOW = "This model's maximum context length is 2048 tokens. (2100 in the messages)"


@pytest.mark.parametrize("status", [400, 413, 422])
def test_overflow_statuses(status: int) -> None:
    body = {"error": {"message": OVERFLOW}}
    overflow = parse_overflow(status, body, json.dumps(body))
    assert overflow is not None and overflow.window == 2048


@pytest.mark.parametrize("status", [401, 404, 414, 423, 500])
def test_other_statuses_are_never_overflow(status: int) -> None:
    body = {"error": {"message": OVERFLOW}}
    assert parse_overflow(status, body, json.dumps(body)) is None


@pytest.mark.parametrize("field", ["type", "code"])
def test_overflow_named_only_by_type_or_code(field: str) -> None:
    body = {"error": {"message": "Bad request: 4096 tokens allowed", field: "context_length"}}
    assert parse_overflow(400, body, json.dumps(body)) is not None
    plain = {"error": {"message": "Bad request: 4096 tokens allowed", field: "other"}}
    assert parse_overflow(400, plain, json.dumps(plain)) is None


def test_overflow_message_from_the_text_when_the_body_is_not_json() -> None:
    text = "This model's maximum context length is 1024 tokens."
    overflow = parse_overflow(400, None, text)
    assert overflow is not None and overflow.window == 1024


def test_a_prompt_known_only_as_a_lower_bound() -> None:
    message = (
        "This model's maximum context length is 4096 tokens. However, your request has at "
        "least 5000 input tokens."
    )
    overflow = parse_overflow(400, {"error": {"message": message}}, message)
    assert overflow is not None
    assert overflow.prompt_tokens == 5000 and overflow.prompt_is_lower_bound is True
    exact = parse_overflow(400, {"error": {"message": OVERFLOW}}, OVERFLOW)
    assert exact is not None and exact.prompt_tokens == 2100
    assert exact.prompt_is_lower_bound is False


# --- Second pass (make mutation, evaluation-client): shrinking after a context overflow -------
# The server's numbers decide the next budget; our own estimate (3 characters a token plus a
# 32-token margin: 1,032 tokens for the 3,000 characters below) fills in only what the server
# does not say; every budget sent is an integer; a shrink that cannot help fails the row.

LONG = [{"role": "user", "content": "x" * 3000}]
FAST = RetryPolicy(max_retries=1, backoff_base_s=0.001, backoff_max_s=0.01)


def overflow(message: str, **error: object) -> httpx.Response:
    return httpx.Response(400, json={"error": {"message": message, **error}})


async def budgets_sent(
    refuse: dict[str, object] | None,
    fits: int,
    *,
    messages: list[dict[str, str]] = LONG,
    max_tokens: int | None = 4000,
) -> tuple[list[object], int | None, ChatError | None]:
    """The ``max_tokens`` of each request while the server refuses budgets above ``fits``
    with ``refuse`` (a message, or a message and llama.cpp's fields); then the result's
    budget, or the error."""
    sent: list[object] = []
    assert refuse is not None
    message = str(refuse.pop("message"))

    def handler(request: httpx.Request) -> httpx.Response:
        budget = json.loads(request.content).get("max_tokens")
        sent.append(budget)
        if budget is None or budget > fits:
            return overflow(message, **refuse)
        return httpx.Response(200, json=completion())

    transport = httpx.MockTransport(handler)
    async with ChatClient("http://llm.test", retry=FAST, transport=transport) as client:
        try:
            result = await client.chat("m", messages, max_tokens=max_tokens)
        except ChatError as exc:
            return sent, None, exc
    return sent, result.max_tokens, None


async def test_an_exact_prompt_size_from_the_server_beats_our_estimate() -> None:
    refuse = {"message": "maximum context length is 4096 tokens. (500 in the messages, ...)"}
    sent, budget, _ = await budgets_sent(refuse, fits=3596)
    assert sent == [4000, 3596] and budget == 3596


@pytest.mark.parametrize(
    ("lower_bound", "next_budget"),
    [(600, 4096 - 1032), (2000, 4096 - 2000)],  # the larger of the bound and our estimate
)
async def test_a_prompt_known_only_from_below_is_topped_up_by_our_estimate(
    lower_bound: int, next_budget: int
) -> None:
    refuse = {
        "message": "This model's maximum context length is 4096 tokens. However, your request "
        f"has at least {lower_bound} input tokens."
    }
    sent, budget, _ = await budgets_sent(refuse, fits=next_budget)
    assert sent == [4000, next_budget] and budget == next_budget


async def test_a_window_without_a_prompt_size_uses_our_estimate() -> None:
    refuse = {"message": "This model's maximum context length is 4096 tokens."}
    sent, budget, _ = await budgets_sent(refuse, fits=3064)
    assert sent == [4000, 3064] and budget == 3064


async def test_numbers_that_do_not_explain_the_refusal_halve_the_budget() -> None:
    # The server says 1,000 + 3,096 fit in 4,096, then refuses 3,096 all the same.
    refuse = {"message": "maximum context length is 4096 tokens. (1000 in the messages, ...)"}
    sent, budget, _ = await budgets_sent(refuse, fits=1600)
    assert sent == [4000, 3096, 1548] and budget == 1548
    assert all(type(b) is int for b in sent)


async def test_halving_sends_whole_numbers() -> None:
    sent, _, _ = await budgets_sent({"message": "context length exceeded"}, fits=900)
    assert sent == [4000, 2000, 1000, 500]
    assert all(type(b) is int for b in sent)


async def test_a_single_token_left_is_still_a_budget() -> None:
    refuse = {"message": "overflow", "type": "exceed_context_size_error"}
    refuse |= {"n_prompt_tokens": 1000, "n_ctx": 1001}
    sent, budget, _ = await budgets_sent(refuse, fits=1, max_tokens=5)
    assert sent == [5, 1] and budget == 1


async def test_shrinking_gives_up_after_eight_smaller_budgets() -> None:
    sent, _, error = await budgets_sent(
        {"message": "context length exceeded"}, fits=0, max_tokens=1_000_000
    )
    assert len(sent) == 9  # the first request and eight smaller budgets
    assert error is not None
    assert (error.kind, error.status, error.attempts, error.max_tokens) == (
        "context_overflow",
        400,
        9,
        sent[-1],
    )
    assert error.message == (
        "The request still overflowed after 8 smaller budgets. Server said: context length exceeded"
    )


async def test_without_a_budget_an_overflow_fails_the_row_at_once() -> None:
    sent, _, error = await budgets_sent(
        {"message": "context length exceeded"}, fits=0, max_tokens=None
    )
    assert sent == [None]
    assert error is not None
    assert (error.kind, error.status, error.attempts, error.max_tokens) == (
        "context_overflow",
        400,
        1,
        None,
    )
    assert error.message == (
        "The prompt alone does not fit the context window. Server said: context length exceeded"
    )


async def test_a_prompt_as_long_as_the_window_fails_the_row_at_once() -> None:
    refuse = {"message": "overflow", "type": "exceed_context_size_error"}
    refuse |= {"n_prompt_tokens": 4096, "n_ctx": 4096}
    sent, _, error = await budgets_sent(refuse, fits=0, max_tokens=100)
    assert sent == [100]
    assert error is not None
    assert (error.status, error.attempts, error.max_tokens) == (400, 1, 100)
    assert error.message.startswith(
        "The prompt alone (4096 tokens) does not fit the 4096-token window."
    )


# --- Second pass (make mutation, evaluation-client): what a request carries and how a failed
# transport is named; the settings of ChatClient.http (used beside chat, e.g. embeddings).


async def test_a_request_with_a_body_says_it_is_json_and_a_get_has_no_body_type() -> None:
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.headers.get("content-type")))
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        return httpx.Response(200, json=completion())

    async with ChatClient("http://llm.test", transport=httpx.MockTransport(handler)) as client:
        await client.chat("m", MESSAGES, max_tokens=5)
        await client.list_models()
    assert seen == [("POST", "application/json"), ("GET", None)]


@pytest.mark.parametrize(
    ("failure", "kind", "message"),
    [
        (httpx.ConnectTimeout("slow"), "timeout", "timed out (ConnectTimeout)"),
        (httpx.ReadError("reset by peer"), "connection_error", "ReadError: reset by peer"),
        # An exception without a text still says what happened.
        (httpx.ConnectError(""), "connection_error", "ConnectError: connection failed"),
    ],
)
async def test_a_transport_failure_is_named(failure: Exception, kind: str, message: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise failure

    transport = httpx.MockTransport(handler)
    async with ChatClient("http://llm.test", retry=FAST, transport=transport) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=5)
    assert info.value.kind == kind
    assert info.value.message == f"{message} (gave up after 2 attempts)"


async def test_a_json_answer_cut_short_is_asked_again() -> None:
    # Declared JSON but not parseable (and not starting with a brace): a proxy cut it short.
    answers = [
        httpx.Response(200, headers={"Content-Type": "application/json"}, content=b"nul"),
        httpx.Response(200, json=completion()),
    ]
    transport = httpx.MockTransport(lambda request: answers.pop(0))
    async with ChatClient("http://llm.test", retry=FAST, transport=transport) as client:
        result = await client.chat("m", MESSAGES, max_tokens=5)
    assert result.attempts == 2


def test_a_chat_error_keeps_its_fields() -> None:
    error = ChatError("http_error", "HTTP 500: boom", status=500, max_tokens=7)
    assert str(error) == "HTTP 500: boom"
    assert (error.kind, error.status, error.attempts, error.max_tokens) == (
        "http_error",
        500,
        1,
        7,
    )


@pytest.fixture
async def slow_server(unused_tcp_port: int) -> AsyncIterator[tuple[str, list[int]]]:
    """Answers every request after 1.5 s; records how many requests were open at once."""
    open_now: list[int] = [0]
    peaks: list[int] = []

    async def slow(request: web.Request) -> web.Response:
        open_now[0] += 1
        peaks.append(open_now[0])
        try:
            await asyncio.sleep(1.5)
        finally:
            open_now[0] -= 1
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    yield f"http://127.0.0.1:{unused_tcp_port}/v1", peaks
    await runner.cleanup()


async def test_the_http_client_times_out_after_the_clients_timeout(
    slow_server: tuple[str, list[int]],
) -> None:
    url, _ = slow_server
    async with ChatClient(url, timeout_s=0.3) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.http.get("/models")


async def test_the_http_client_opens_at_most_max_connections(
    slow_server: tuple[str, list[int]],
) -> None:
    url, peaks = slow_server
    async with ChatClient(url, max_connections=2, timeout_s=30) as client:
        replies = await asyncio.gather(*(client.http.get("/models") for _ in range(4)))
    assert [reply.status_code for reply in replies] == [200] * 4
    assert max(peaks) == 2


def test_an_overflow_is_read_from_the_parsed_body_whatever_the_text() -> None:
    body = {"error": {"message": "This model's maximum context length is 4096 tokens."}}
    overflow = parse_overflow(400, body, "")
    assert overflow is not None and overflow.window == 4096


# --- The default transport (aiohttp) against a real server on loopback -----------------------


class LoopbackServer:
    """Answers chat completions after ``delay`` seconds; ``/moved/...`` redirects. Records the
    Content-Type of each request and how many requests were open at once."""

    def __init__(self, port: int, delay: float = 0.0) -> None:
        self.url = f"http://127.0.0.1:{port}/v1"
        self.port = port
        self.delay = delay
        self.content_types: list[str | None] = []
        self.peaks: list[int] = []
        self.open_now = 0

    async def answer(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/moved/"):
            raise web.HTTPTemporaryRedirect(location="/v1/chat/completions")
        self.content_types.append(request.headers.get("Content-Type"))
        self.open_now += 1
        self.peaks.append(self.open_now)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.open_now -= 1
        return web.json_response(completion())


@pytest.fixture
async def loopback(unused_tcp_port: int) -> AsyncIterator[LoopbackServer]:
    server = LoopbackServer(unused_tcp_port)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    yield server
    await runner.cleanup()


async def test_the_default_transport_sends_json_with_its_content_type(
    loopback: LoopbackServer,
) -> None:
    async with ChatClient(loopback.url, api_key="sk-test") as client:
        result = await client.chat("m", MESSAGES, max_tokens=5)
    assert result.content == "ok"
    assert loopback.content_types == ["application/json"]


async def test_the_default_transport_times_out_after_the_clients_timeout(
    loopback: LoopbackServer,
) -> None:
    loopback.delay = 1.5
    async with ChatClient(loopback.url, timeout_s=0.3, retry=FAST) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=5)
    assert info.value.kind == "timeout"
    assert info.value.message == "timed out (TimeoutError) (gave up after 2 attempts)"


async def test_the_default_transport_opens_at_most_max_connections(
    loopback: LoopbackServer,
) -> None:
    loopback.delay = 0.5
    async with ChatClient(loopback.url, max_connections=2, timeout_s=30) as client:
        results = await asyncio.gather(
            *(client.chat("m", MESSAGES, max_tokens=5) for _ in range(4))
        )
    assert [result.content for result in results] == ["ok"] * 4
    assert max(loopback.peaks) == 2


async def test_the_default_transport_does_not_follow_redirects(
    loopback: LoopbackServer,
) -> None:
    moved = f"http://127.0.0.1:{loopback.port}/moved/v1"
    async with ChatClient(moved, retry=FAST) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=5)
    assert (info.value.kind, info.value.status) == ("http_error", 307)
    assert loopback.content_types == []


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.mark.parametrize("variable", ["http_proxy", "HTTP_PROXY"])
async def test_a_proxy_variable_in_either_case_routes_requests_through_the_proxy(
    variable: str, loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv(variable, f"http://127.0.0.1:{loopback.port}")
    # llm.invalid cannot resolve: only the proxy (the loopback server) can answer.
    async with ChatClient("http://llm.invalid/v1", retry=FAST) as client:
        result = await client.chat("m", MESSAGES, max_tokens=5)
    assert result.content == "ok"
    assert loopback.content_types == ["application/json"]


async def test_an_unreachable_server_is_retried_then_named() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("")

    policy = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.01)
    transport = httpx.MockTransport(handler)
    async with ChatClient("http://llm.test", retry=policy, transport=transport) as client:
        with pytest.raises(EndpointUnreachableError) as info:
            await client.list_models()
    assert str(info.value) == (
        "Cannot reach http://llm.test/v1/models after 4 attempts: ConnectError: connection failed."
    )


def test_the_backoff_jitter_spans_the_upper_half_of_the_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = RetryPolicy(max_retries=5, backoff_base_s=1.0, backoff_max_s=60.0)
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    assert [policy.delay(retry, None) for retry in (1, 2, 3)] == [1.0, 2.0, 4.0]
    monkeypatch.setattr(random, "uniform", lambda low, high: low)
    assert [policy.delay(retry, None) for retry in (1, 2, 3)] == [0.5, 1.0, 2.0]
