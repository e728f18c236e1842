"""The chat client against httpx.MockTransport: retries, backoff, shrinking, errors."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from kyai.evaluation import ChatClient, ChatError, RetryPolicy, parse_overflow
from kyai.evaluation._client import normalise_base_url

FAST = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.01)
MESSAGES = [{"role": "user", "content": "hi"}]


def completion(content: str = "hello", **message: object) -> dict[str, object]:
    return {
        "id": "cmpl-1",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def client_for(handler: Callable[[httpx.Request], httpx.Response], **kwargs: object) -> ChatClient:
    return ChatClient(
        "http://llm.test",
        retry=FAST,
        transport=httpx.MockTransport(handler),
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://h:8000", "http://h:8000/v1"),
        ("http://h:8000/", "http://h:8000/v1"),
        ("http://h:8000/v1", "http://h:8000/v1"),
        ("http://h:8000/v1/chat/completions", "http://h:8000/v1"),
    ],
)
def test_base_url(url: str, base: str) -> None:
    assert normalise_base_url(url) == base


async def test_success_keeps_fields_and_sends_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=completion("Answer: C", reasoning_content="hmm"))

    async with client_for(handler, api_key="sk-secret") as client:
        result = await client.chat("m", MESSAGES, max_tokens=100)
    assert result.content == "Answer: C"
    assert result.reasoning_content == "hmm"
    assert result.attempts == 1
    assert result.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert seen[0].headers["authorization"] == "Bearer sk-secret"
    body = json.loads(seen[0].content)
    assert body == {"model": "m", "messages": MESSAGES, "max_tokens": 100}


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_retryable_statuses_then_success(status: int) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls <= 2:
            return httpx.Response(status, json={"error": {"message": "busy"}})
        return httpx.Response(200, json=completion())

    async with client_for(handler) as client:
        result = await client.chat("m", MESSAGES, max_tokens=10)
    assert result.attempts == 3
    assert calls == 3


async def test_gives_up_after_max_retries() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(500, json={"error": {"message": "boom"}})

    async with client_for(handler) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=10)
    assert calls == 1 + FAST.max_retries
    assert info.value.kind == "http_error"
    assert info.value.status == 500
    assert info.value.attempts == 4
    assert "boom" in info.value.message


async def test_client_errors_are_not_retried() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(
            404, json={"object": "error", "message": "The model `x` does not exist."}
        )

    async with client_for(handler) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("x", MESSAGES, max_tokens=10)
    assert calls == 1
    assert info.value.status == 404
    assert "does not exist" in info.value.message


async def test_retry_after_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("kyai.evaluation._client.asyncio.sleep", fake_sleep)
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(429, headers={"Retry-After": "0.007"}, json={})
        return httpx.Response(200, json=completion())

    async with client_for(handler) as client:
        await client.chat("m", MESSAGES, max_tokens=10)
    assert slept == [0.007]


def test_backoff_grows_with_jitter() -> None:
    policy = RetryPolicy(max_retries=5, backoff_base_s=1.0, backoff_max_s=8.0)
    for retry, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0)]:
        delays = {policy.delay(retry, None) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1  # jittered
    assert policy.delay(1, 30.0) == 8.0  # Retry-After capped by the backoff ceiling


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (httpx.ConnectError("refused"), "connection_error"),
        (httpx.RemoteProtocolError("closed"), "connection_error"),
        (httpx.ReadTimeout("slow"), "timeout"),
    ],
)
async def test_transport_errors_retried_then_reported(exc: Exception, kind: str) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise exc

    async with client_for(handler) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=10)
    assert info.value.kind == kind
    assert calls == 1 + FAST.max_retries


VLLM_OLD = (
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
    "(1000 in the messages, 4000 in the completion). Please reduce the length of the messages "
    "or completion."
)
VLLM_NEW = (
    "'max_tokens' or 'max_completion_tokens' is too large: 4000. This model's maximum context "
    "length is 4096 tokens and your request has 1000 input tokens (4000 > 4096 - 1000)."
)
SGLANG = (
    "Requested token count exceeds the model's maximum context length of 4096 tokens. You "
    "requested a total of 5000 tokens: 1000 tokens from the input messages and 4000 tokens for "
    "the completion. Please reduce the number of tokens in the input messages or the completion "
    "to fit within the limit."
)


@pytest.mark.parametrize(
    ("body", "window", "prompt"),
    [
        (
            {"object": "error", "message": VLLM_OLD, "type": "BadRequestError", "code": 400},
            4096,
            1000,
        ),
        ({"error": {"message": VLLM_NEW, "type": "BadRequestError", "code": 400}}, 4096, 1000),
        (
            {"object": "error", "message": SGLANG, "type": "BadRequestError", "code": 400},
            4096,
            1000,
        ),
        (
            {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 5000,
                    "n_ctx": 4096,
                }
            },
            4096,
            5000,
        ),
        (
            {
                "error": {
                    "message": "This model's maximum context length is 2048 tokens. However, "
                    "you requested 2100 tokens (2100 in the messages, 0 in the completion). "
                    "Please reduce the length of the messages or completion.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
            2048,
            2100,
        ),
    ],
)
def test_parse_overflow(body: dict[str, object], window: int, prompt: int) -> None:
    overflow = parse_overflow(400, body, json.dumps(body))
    assert overflow is not None
    assert (overflow.window, overflow.prompt_tokens) == (window, prompt)


def test_other_400_is_not_overflow() -> None:
    body = {"error": {"message": "temperature must be positive"}}
    assert parse_overflow(400, body, json.dumps(body)) is None
    assert parse_overflow(500, {"error": {"message": VLLM_OLD}}, VLLM_OLD) is None


async def test_shrinks_to_what_the_server_says_fits() -> None:
    budgets: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        budget = json.loads(request.content)["max_tokens"]
        budgets.append(budget)
        if budget + 1000 > 4096:
            message = VLLM_OLD.replace("5000", str(budget + 1000)).replace("4000", str(budget))
            return httpx.Response(400, json={"object": "error", "message": message})
        return httpx.Response(200, json=completion())

    async with client_for(handler) as client:
        result = await client.chat("m", MESSAGES, max_tokens=4000)
    assert budgets == [4000, 3096]
    assert result.max_tokens == 3096
    assert result.attempts == 2


async def test_halves_when_message_has_no_numbers() -> None:
    budgets: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        budget = json.loads(request.content)["max_tokens"]
        budgets.append(budget)
        if budget > 900:
            return httpx.Response(400, json={"error": {"message": "context length exceeded"}})
        return httpx.Response(200, json=completion())

    async with client_for(handler) as client:
        await client.chat("m", MESSAGES, max_tokens=4000)
    assert budgets == [4000, 2000, 1000, 500]


async def test_prompt_alone_too_long_fails_the_row() -> None:
    calls = 0
    body = {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
    }

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(400, json=body)

    async with client_for(handler) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=100)
    assert calls == 1
    assert info.value.kind == "context_overflow"
    assert "5000" in info.value.message and "4096" in info.value.message


async def test_output_cap_from_hosted_apis() -> None:
    budgets: list[int] = []
    message = (
        "max_tokens is too large: 8000. This model supports at most 4096 completion "
        "tokens, whereas you provided 8000."
    )

    def handler(request: httpx.Request) -> httpx.Response:
        budgets.append(json.loads(request.content)["max_tokens"])
        if budgets[-1] > 4096:
            return httpx.Response(400, json={"error": {"message": message}})
        return httpx.Response(200, json=completion())

    async with client_for(handler) as client:
        await client.chat("m", MESSAGES, max_tokens=8000)
    assert budgets == [8000, 4096]


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="not json"),
        httpx.Response(200, json={"choices": []}),
        httpx.Response(200, json={"object": "list"}),
    ],
)
async def test_invalid_success_body(response: httpx.Response) -> None:
    async with client_for(lambda request: response) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=10)
    assert info.value.kind == "invalid_response"


async def test_list_models() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/models"
        return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 8192}]})

    async with client_for(handler) as client:
        assert await client.list_models() == [{"id": "m", "max_model_len": 8192}]


async def test_list_models_absent_route_is_empty() -> None:
    async with client_for(lambda request: httpx.Response(404)) as client:
        assert await client.list_models() == []


async def test_unreachable_server() -> None:
    from kyai.evaluation import EndpointUnreachableError

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused")

    async with client_for(handler) as client:
        with pytest.raises(
            EndpointUnreachableError, match=r"Cannot reach http://llm\.test/v1/models"
        ):
            await client.list_models()


async def test_cut_json_in_a_200_is_retried_like_a_5xx() -> None:
    whole = json.dumps(completion("Paris")).encode()
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls <= 2:
            cut = whole[: len(whole) // 2]
            return httpx.Response(200, content=cut, headers={"content-type": "application/json"})
        return httpx.Response(200, content=whole, headers={"content-type": "application/json"})

    async with client_for(handler) as client:
        result = await client.chat("m", MESSAGES, max_tokens=10)
    assert (result.content, result.attempts, calls) == ("Paris", 3, 3)


async def test_cut_json_every_time_fails_after_the_retries() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(200, content=b'{"choices": [{"mess', headers={})

    async with client_for(handler) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=10)
    assert calls == 1 + FAST.max_retries
    assert info.value.kind == "invalid_response"
    assert "gave up after 4 attempts" in info.value.message


async def test_html_200_is_not_retried() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(200, html="<html><body>Welcome</body></html>")

    async with client_for(handler) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=10)
    assert calls == 1
    assert info.value.kind == "invalid_response" and "Welcome" in info.value.message


async def test_error_messages_never_hold_the_key() -> None:
    key = "sk-unit-test-key-42"

    def handler(request: httpx.Request) -> httpx.Response:
        echoed = request.headers["authorization"]
        return httpx.Response(404, json={"error": {"message": f"no route; you sent {echoed}"}})

    async with client_for(handler, api_key=key) as client:
        with pytest.raises(ChatError) as info:
            await client.chat("m", MESSAGES, max_tokens=10)
    assert key not in info.value.message and "[REDACTED]" in info.value.message


@pytest.mark.parametrize(
    "url", ["foo", "http://", "ftp://x", "http://:80", "localhost:8000", "http://h:99999"]
)
def test_malformed_endpoints_are_refused(url: str) -> None:
    from kyai.evaluation import InvalidEndpointError
    from kyai.evaluation._client import check_endpoint

    with pytest.raises(InvalidEndpointError):
        check_endpoint(url)
    with pytest.raises(InvalidEndpointError):
        ChatClient(url)


def test_good_endpoints_are_normalised() -> None:
    from kyai.evaluation._client import check_endpoint

    assert check_endpoint(" https://llm.example:8443/v1/ ") == "https://llm.example:8443/v1"
    assert check_endpoint("http://[::1]:8000") == "http://[::1]:8000/v1"
