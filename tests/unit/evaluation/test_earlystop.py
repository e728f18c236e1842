"""The judge gateway's 502 for a refused platform key: not retried, stopped early, whose it is."""

from __future__ import annotations

import httpx
import pytest

from kyai.evaluation import ChatClient, ChatError, RetryPolicy
from kyai.evaluation._client import EndpointConfigError
from kyai.evaluation._earlystop import EARLY_ROWS, EarlyStop

FAST = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.01)
MESSAGES = [{"role": "user", "content": "grade"}]
REFUSED = {
    "error": {
        "message": "the default judge refused the platform's API key (HTTP 403); the platform "
        "team must fix defaultJudge.apiKeySecret",
        "type": "api_error",
        "code": "UpstreamRefusedKey",
    }
}


async def refused_error(body: dict[str, object], status: int = 502) -> ChatError:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body)

    client = ChatClient("http://gateway.test", retry=FAST, transport=httpx.MockTransport(handler))
    async with client:
        with pytest.raises(ChatError) as caught:
            await client.chat("judge", MESSAGES, max_tokens=10)
    return caught.value


async def test_the_gateways_refused_key_is_not_asked_again() -> None:
    error = await refused_error(REFUSED)
    assert (error.kind, error.status, error.code, error.attempts) == (
        "http_error",
        502,
        "UpstreamRefusedKey",
        1,
    )
    # Any other 502 is still retried.
    other = await refused_error({"error": {"message": "bad gateway", "code": "Other"}})
    assert (other.attempts, other.code) == (4, "Other")


async def test_a_judge_phase_refused_so_stops_early_saying_whose_it_is() -> None:
    error = await refused_error(REFUSED)
    early = EarlyStop("judge", "http://gateway.test/v1", "judge", planned=50)
    with pytest.raises(EndpointConfigError) as caught:
        for _ in range(EARLY_ROWS):
            early.observe(error)
    message = str(caught.value)
    assert f"the first {EARLY_ROWS} judge requests" in message
    assert "refused by the platform's judge gateway (HTTP 502)" in message
    assert "defaultJudge.apiKeySecret" in message
    assert "the platform's configuration, not this run's" in message
    assert "wrong URL, model name or API key" not in message  # never blames the tenant


async def test_a_plain_502_never_stops_a_phase_early() -> None:
    error = await refused_error({"error": {"message": "bad gateway"}})
    early = EarlyStop("judge", "http://gateway.test/v1", "judge", planned=50)
    for _ in range(EARLY_ROWS * 2):
        early.observe(error)  # retryable: a flaky upstream, not a configuration error
    assert early.decided


async def test_the_model_probe_through_a_refusing_gateway_fails_at_once() -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(502, json=REFUSED)

    client = ChatClient("http://gateway.test", retry=FAST, transport=httpx.MockTransport(handler))
    async with client:
        with pytest.raises(EndpointConfigError) as caught:
            await client.list_models()
    assert asked == ["/v1/models"]  # once: no retry
    assert "defaultJudge.apiKeySecret" in str(caught.value)
    assert "the platform's configuration, not this run's" in str(caught.value)
