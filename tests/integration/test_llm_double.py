"""The LLM double over real HTTP: scripted answers, failures, and servers' real error wording."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from kyai_testing import (
    ChatRequest,
    DoubleConfigError,
    DoubleNotRunningError,
    LLMDouble,
    ModelSpec,
    Rule,
    count_prompt_tokens,
    substring_judge,
)

# The factories the conftest fixtures yield (named here, not imported from conftest).
DoubleFactory = Callable[..., Awaitable[LLMDouble]]
ThreadDoubleFactory = Callable[..., LLMDouble]


def _user(text: str, *, system: str | None = None) -> list[dict[str, Any]]:
    messages = [] if system is None else [{"role": "system", "content": system}]
    return [*messages, {"role": "user", "content": text}]


async def _chat(
    client: httpx.AsyncClient,
    double: LLMDouble,
    text: str = "hello",
    *,
    model: str = "candidate",
    system: str | None = None,
    **extra: Any,
) -> httpx.Response:
    body = {"model": model, "messages": _user(text, system=system), **extra}
    return await client.post(f"{double.base_url}/chat/completions", json=body)


@pytest.fixture
async def client() -> Any:
    async with httpx.AsyncClient(timeout=10) as http:
        yield http


def _content(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


# -- endpoints -----------------------------------------------------------------------------


async def test_health_and_model_cards(llm_double: DoubleFactory, client: httpx.AsyncClient) -> None:
    double = await llm_double(
        models=[
            ModelSpec("vllm-model", max_model_len=8192),
            ModelSpec("trt-model", max_model_len=2048, report_max_model_len=False),
            ModelSpec("unbounded", max_model_len=None),
        ]
    )
    assert double.base_url == double.url + "/v1"
    assert double.url.startswith("http://127.0.0.1:") and double.port > 0
    assert (await client.get(f"{double.url}/health")).status_code == 200
    listing = (await client.get(f"{double.base_url}/models")).json()
    assert listing["object"] == "list"
    cards = {card["id"]: card for card in listing["data"]}
    assert list(cards) == ["vllm-model", "trt-model", "unbounded"]
    assert cards["vllm-model"]["max_model_len"] == 8192
    assert cards["vllm-model"]["object"] == "model" and cards["vllm-model"]["owned_by"] == "vllm"
    assert "max_model_len" not in cards["trt-model"]
    assert "max_model_len" not in cards["unbounded"]


async def test_default_answer_and_usage(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double()
    # 9 characters of system prompt (3 tokens at 4 characters a token) + 8 of user (2 tokens).
    response = await _chat(client, double, "abcdefgh", system="Be brief.")
    body = response.json()
    assert response.status_code == 200
    assert body["object"] == "chat.completion" and body["model"] == "candidate"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "OK"}
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    assert count_prompt_tokens(_user("abcdefgh", system="Be brief.")) == 5


def test_count_prompt_tokens_handles_parts_and_empty_content() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": None},
        {
            "role": "user",
            "content": [{"type": "text", "text": "abcde"}, {"type": "text", "text": "f"}],
        },
        {"role": "assistant", "content": ""},
    ]
    assert count_prompt_tokens(messages) == 2  # "abcdef": 6 characters, ceil(6 / 4)


async def test_unknown_model_is_a_vllm_404(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double()
    response = await _chat(client, double, model="gpt-nope")
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "The model `gpt-nope` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


async def test_streaming_is_refused_in_refuse_mode(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(stream_mode="refuse")
    response = await _chat(client, double, stream=True)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "streaming not supported by the double"
    assert (await _chat(client, double)).status_code == 200  # not streamed: answered


async def test_api_key(llm_double: DoubleFactory, client: httpx.AsyncClient) -> None:
    double = await llm_double(api_key="s3cret")
    assert (await client.get(f"{double.url}/health")).status_code == 200
    missing = await _chat(client, double)
    assert missing.status_code == 401
    assert missing.json() == {"error": "Unauthorized"}
    models = await client.get(f"{double.base_url}/models")
    assert models.status_code == 401
    wrong = await client.post(
        f"{double.base_url}/chat/completions",
        json={"model": "candidate", "messages": _user("hi")},
        headers={"Authorization": "Bearer nope"},
    )
    assert wrong.status_code == 401
    right = await client.post(
        f"{double.base_url}/chat/completions",
        json={"model": "candidate", "messages": _user("hi")},
        headers={"Authorization": "Bearer s3cret"},
    )
    assert _content(right) == "OK"
    assert [record.status for record in double.requests] == [401, 401, 200]


# -- rules ---------------------------------------------------------------------------------


async def test_rules_match_last_user_message_model_and_predicate(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(
        models=[ModelSpec("candidate"), ModelSpec("other")],
        rules=[
            Rule(match="France", model="other", content="Paris (other)"),
            Rule(match="France", content="Paris"),
            Rule(match=lambda r: r.max_tokens == 7, content="seven"),
            Rule(match="France", content="never reached: an earlier rule wins"),
            Rule(match="echo", content=lambda r: r.last_user_message.upper()),
        ],
    )
    assert _content(await _chat(client, double, "Capital of France?")) == "Paris"
    assert _content(await _chat(client, double, "Capital of France?", model="other")) == (
        "Paris (other)"
    )
    # Only the LAST user message is matched, not the system prompt.
    assert _content(await _chat(client, double, "hi", system="France")) == "OK"
    assert _content(await _chat(client, double, "anything", max_tokens=7)) == "seven"
    assert _content(await _chat(client, double, "echo me")) == "ECHO ME"
    assert [record.rule for record in double.requests] == [1, 0, None, 2, 4]


async def test_reasoning_fields(llm_double: DoubleFactory, client: httpx.AsyncClient) -> None:
    double = await llm_double(
        rules=[
            Rule(match="old", content="4", reasoning_content="2+2 is 4"),
            Rule(match="new", content="4", reasoning="2+2 is 4"),
            Rule(match="inline", content="<think>2+2 is 4</think>4"),
        ]
    )
    old = (await _chat(client, double, "old")).json()["choices"][0]["message"]
    assert old == {"role": "assistant", "content": "4", "reasoning_content": "2+2 is 4"}
    new = (await _chat(client, double, "new")).json()
    assert new["choices"][0]["message"]["reasoning"] == "2+2 is 4"
    assert "reasoning_content" not in new["choices"][0]["message"]
    # Reasoning tokens count as completion tokens: 8 characters (2) + 1 character (1).
    assert new["usage"]["completion_tokens"] == 3
    assert _content(await _chat(client, double, "inline")) == "<think>2+2 is 4</think>4"


async def test_fails_n_times_then_answers(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(rules=[Rule(status=503, times=2, content="Paris")])
    first, second, third = [await _chat(client, double) for _ in range(3)]
    assert first.status_code == second.status_code == 503
    assert first.json() == {
        "error": {
            "message": "Service Unavailable",
            "type": "ServiceUnavailableError",
            "param": None,
            "code": 503,
        }
    }
    assert _content(third) == "Paris"
    assert [record.status for record in double.requests] == [503, 503, 200]


async def test_exhausted_error_rule_falls_through(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(
        rules=[
            Rule(status=429, times=1, error_message="Too many requests, slow down."),
            Rule(content="after the 429"),
        ]
    )
    limited = await _chat(client, double)
    assert limited.status_code == 429
    assert limited.json()["error"]["message"] == "Too many requests, slow down."
    assert _content(await _chat(client, double)) == "after the 429"
    double.reset()
    assert (await _chat(client, double)).status_code == 429
    assert len(double.requests) == 1


async def test_always_failing_rule_and_error_shapes(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(
        models=[
            ModelSpec("sg", overflow_style="sglang"),
            ModelSpec("cpp", overflow_style="llamacpp"),
        ],
        rules=[Rule(status=500)],
    )
    for _ in range(3):
        response = await _chat(client, double, model="sg")
        assert response.status_code == 500
    assert response.json() == {
        "object": "error",
        "message": "Internal Server Error",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
    cpp = await _chat(client, double, model="cpp")
    assert cpp.json() == {
        "error": {"code": 500, "message": "Internal Server Error", "type": "server_error"}
    }


@pytest.mark.parametrize(("retry_after", "header"), [(2, "2"), (0.5, "0.5")])
async def test_retry_after_header(
    llm_double: DoubleFactory, client: httpx.AsyncClient, retry_after: float, header: str
) -> None:
    double = await llm_double(rules=[Rule(status=429, times=1, retry_after=retry_after)])
    limited = await _chat(client, double)
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == header
    answered = await _chat(client, double)
    assert answered.status_code == 200 and "Retry-After" not in answered.headers


async def test_drop_connection_then_answer(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(rules=[Rule(drop_connection=True, times=1, content="back")])
    with pytest.raises(httpx.TransportError):
        await _chat(client, double)
    assert _content(await _chat(client, double)) == "back"
    dropped, answered = double.requests
    assert dropped.dropped and dropped.status is None and dropped.response is None
    assert not answered.dropped and answered.status == 200


async def test_callable_errors_become_500(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    def broken(_: ChatRequest) -> str:
        raise KeyError("ground_truth")

    double = await llm_double(rules=[Rule(content=broken)])
    response = await _chat(client, double)
    assert response.status_code == 500
    assert "KeyError" in response.json()["error"]["message"]


# -- context window ------------------------------------------------------------------------

# A 100-token window; a 240-character user message is 60 prompt tokens, 480 characters 120.
FITS = "x" * 240
TOO_LONG = "x" * 480

TOTAL_OVERFLOW = {  # 60 prompt tokens + max_tokens=50 > 100
    "vllm": (
        {
            "error": {
                "message": "This model's maximum context length is 100 tokens. However, you "
                "requested 50 output tokens and your prompt contains at least 51 input tokens, "
                "for a total of at least 101 tokens. Please reduce the length of the input "
                "prompt or the number of requested output tokens. "
                "(parameter=input_tokens, value=51)",
                "type": "BadRequestError",
                "param": "input_tokens",
                "code": 400,
            }
        }
    ),
    "vllm_v0_10": {
        "error": {
            "message": "'max_tokens' or 'max_completion_tokens' is too large: 50. This model's "
            "maximum context length is 100 tokens and your request has 60 input tokens "
            "(50 > 100 - 60).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    },
    "vllm_legacy": {
        "object": "error",
        "message": "This model's maximum context length is 100 tokens. However, you requested "
        "110 tokens (60 in the messages, 50 in the completion). Please reduce the length of the "
        "messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "sglang": {
        "object": "error",
        "message": "Requested token count exceeds the model's maximum context length of 100 "
        "tokens. You requested a total of 110 tokens: 60 tokens from the input messages and 50 "
        "tokens for the completion. Please reduce the number of tokens in the input messages or "
        "the completion to fit within the limit.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
}

PROMPT_OVERFLOW = {  # 120 prompt tokens, no max_tokens
    "vllm": {
        "error": {
            # vLLM 0.32's words (seen from its own server, tests/engines).
            "message": "This model's maximum context length is 100 tokens. However, your "
            "prompt contains at least 101 input tokens, which exceeds this limit even without "
            "any output tokens. Please reduce the length of the input prompt. "
            "(parameter=input_tokens, value=101)",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
    },
    "vllm_v0_10": {
        "error": {
            "message": "This model's maximum context length is 100 tokens. However, your request "
            "has 120 input tokens. Please reduce the length of the input messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    },
    "vllm_legacy": {
        "object": "error",
        "message": "This model's maximum context length is 100 tokens. However, you requested "
        "120 tokens in the messages, Please reduce the length of the messages.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "sglang": {
        "object": "error",
        "message": "The input (120 tokens) is longer than the model's context length (100 tokens).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "llamacpp": {
        "error": {
            "code": 400,
            "message": "request (120 tokens) exceeds the available context size (100 tokens), "
            "try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 120,
            "n_ctx": 100,
        }
    },
    "llama_cpp_python": {
        "error": {
            "message": "This model's maximum context length is 100 tokens. However, you requested "
            "120 tokens (120 in the messages, None in the completion). Please reduce the length "
            "of the messages or completion.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
}


@pytest.mark.parametrize("style", sorted(TOTAL_OVERFLOW))
async def test_prompt_plus_max_tokens_overflow_wording(
    llm_double: DoubleFactory, client: httpx.AsyncClient, style: Any
) -> None:
    double = await llm_double(
        models=[ModelSpec("candidate", max_model_len=100, overflow_style=style)]
    )
    response = await _chat(client, double, FITS, max_tokens=50)
    assert response.status_code == 400
    assert response.json() == TOTAL_OVERFLOW[style]
    # The boundary: prompt + max_tokens == window fits.
    assert _content(await _chat(client, double, FITS, max_tokens=40)) == "OK"


@pytest.mark.parametrize("style", sorted(PROMPT_OVERFLOW))
async def test_prompt_alone_overflow_wording(
    llm_double: DoubleFactory, client: httpx.AsyncClient, style: Any
) -> None:
    double = await llm_double(
        models=[ModelSpec("candidate", max_model_len=100, overflow_style=style)]
    )
    response = await _chat(client, double, TOO_LONG)
    assert response.status_code == 400
    assert response.json() == PROMPT_OVERFLOW[style]


async def test_prompt_equal_to_window_is_refused(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(models=[ModelSpec("candidate", max_model_len=100)])
    assert (await _chat(client, double, "x" * 400)).status_code == 400  # 100 tokens
    assert _content(await _chat(client, double, "x" * 396, max_tokens=1)) == "OK"  # 99 + 1


async def test_max_completion_tokens_counts_like_max_tokens(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(models=[ModelSpec("candidate", max_model_len=100)])
    response = await _chat(client, double, FITS, max_completion_tokens=50)
    assert response.status_code == 400
    assert "requested 50 output tokens" in response.json()["error"]["message"]
    assert double.requests[0].max_tokens == 50


async def test_vllm_refuses_max_tokens_above_the_window(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(models=[ModelSpec("candidate", max_model_len=100)])
    error = (await _chat(client, double, "hi", max_tokens=500)).json()["error"]
    assert error["message"] == (
        "max_tokens=500 cannot be greater than max_model_len=100. "
        "Please request fewer output tokens. (parameter=max_tokens, value=500)"
    )
    assert error["param"] == "max_tokens"


async def test_llama_cpp_clamps_max_tokens_and_truncates(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(
        models=[
            ModelSpec(
                "candidate",
                max_model_len=100,
                report_max_model_len=False,
                overflow_style="llamacpp",
                clamp_max_tokens=True,
            )
        ],
        rules=[Rule(content="y" * 400)],  # 100 tokens of answer
    )
    response = await _chat(client, double, FITS, max_tokens=50)  # clamped to 100 - 60 = 40
    body = response.json()
    assert response.status_code == 200
    assert body["choices"][0]["message"]["content"] == "y" * 160
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 60, "completion_tokens": 40, "total_tokens": 100}
    # The prompt alone still does not fit.
    assert (await _chat(client, double, TOO_LONG, max_tokens=5)).status_code == 400


async def test_max_tokens_truncates_reasoning_first(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(
        models=[ModelSpec("candidate", max_model_len=None)],
        rules=[Rule(content="a" * 40, reasoning_content="r" * 40)],  # 10 + 10 tokens
    )
    partial = (await _chat(client, double, max_tokens=15)).json()
    assert partial["choices"][0]["message"]["reasoning_content"] == "r" * 40
    assert partial["choices"][0]["message"]["content"] == "a" * 20
    assert partial["choices"][0]["finish_reason"] == "length"
    starved = (await _chat(client, double, max_tokens=10)).json()["choices"][0]
    assert starved["message"]["content"] is None and starved["finish_reason"] == "length"
    whole = (await _chat(client, double, max_tokens=20)).json()["choices"][0]
    assert whole["message"]["content"] == "a" * 40 and whole["finish_reason"] == "stop"


async def test_no_max_tokens_and_unbounded_models_always_fit(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(
        models=[ModelSpec("candidate", max_model_len=100), ModelSpec("big", max_model_len=None)]
    )
    assert _content(await _chat(client, double, FITS)) == "OK"
    assert (
        _content(await _chat(client, double, "x" * 100_000, model="big", max_tokens=10**6)) == "OK"
    )


# -- concurrency and records ---------------------------------------------------------------


async def test_max_in_flight_and_latency(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(latency_s=0.2)
    responses = await asyncio.gather(*(_chat(client, double, f"q{i}") for i in range(6)))
    assert all(response.status_code == 200 for response in responses)
    # Served concurrently (all six in flight at once), each after its latency.
    assert double.max_in_flight == 6
    assert all((record.duration or 0) >= 0.2 for record in double.requests)
    double.reset()
    await _chat(client, double)
    await _chat(client, double)
    assert double.max_in_flight == 1 and double.in_flight == 0


async def test_rule_delay_adds_to_latency(
    llm_double: DoubleFactory, client: httpx.AsyncClient
) -> None:
    double = await llm_double(latency_s=0.05, rules=[Rule(match="slow", delay_s=0.2)])
    await _chat(client, double, "slow")
    await _chat(client, double, "fast")
    slow, fast = (record.duration or 0 for record in double.requests)
    assert slow >= 0.25 and 0.05 <= fast < 0.25


async def test_requests_are_recorded(llm_double: DoubleFactory, client: httpx.AsyncClient) -> None:
    double = await llm_double(models=[ModelSpec("candidate"), ModelSpec("judge")])
    await client.post(
        f"{double.base_url}/chat/completions",
        json={"model": "judge", "messages": _user("q", system="sys"), "max_tokens": 9, "seed": 1},
        headers={"X-Trace": "abc"},
    )
    await _chat(client, double, "second")
    first, second = double.requests
    assert first.model == "judge" and first.max_tokens == 9
    assert first.messages == _user("q", system="sys")
    assert first.body["seed"] == 1 and first.headers["X-Trace"] == "abc"
    assert first.status == 200 and first.response is not None
    assert first.response["choices"][0]["message"]["content"] == "OK"
    assert first.finished is not None and first.started <= first.finished <= second.started
    assert second.last_user_message == "second" and second.max_tokens is None
    assert double.requests_for("judge") == [first]


async def test_invalid_bodies_are_400(llm_double: DoubleFactory, client: httpx.AsyncClient) -> None:
    double = await llm_double()
    url = f"{double.base_url}/chat/completions"
    not_json = await client.post(
        url, content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 400
    assert (await client.post(url, json={"model": "candidate"})).status_code == 400
    assert (await _chat(client, double, max_tokens="ten")).status_code == 400
    zero = await _chat(client, double, max_tokens=0)
    assert zero.json()["error"]["message"] == "max_tokens must be at least 1, got 0."


# -- scripted judge ------------------------------------------------------------------------


def _judge_message(ground_truth: str, response: str) -> str:
    return (
        "<instruction>\nWhat is the capital of France?\n</instruction>\n"
        f"<ground_truth>\n{ground_truth}\n</ground_truth>\n"
        f"<candidate_response>\n{response}\n</candidate_response>"
    )


@pytest.mark.parametrize(
    ("ground_truth", "response", "score"),
    [
        ("Paris", "The capital is PARIS.", 1.0),
        ("  Paris  ", "paris", 1.0),
        ("Paris", "It is Lyon.", 0.0),
        ("", "anything", 0.0),
    ],
)
async def test_substring_judge_over_http(
    llm_double: DoubleFactory,
    client: httpx.AsyncClient,
    ground_truth: str,
    response: str,
    score: float,
) -> None:
    double = await llm_double(
        models=[ModelSpec("judge")], rules=[Rule(model="judge", content=substring_judge)]
    )
    answer = await _chat(
        client, double, _judge_message(ground_truth, response), model="judge", system="You judge."
    )
    verdict = json.loads(_content(answer))
    assert verdict["score"] == score
    assert isinstance(verdict["reasoning"], str) and verdict["reasoning"]


def test_substring_judge_without_blocks_scores_zero() -> None:
    request = ChatRequest(
        model="judge", messages=_user("no tags here"), max_tokens=None, body={}, headers={}
    )
    assert json.loads(substring_judge(request))["score"] == 0.0


# -- lifecycle -----------------------------------------------------------------------------


def test_thread_mode_serves_sync_clients(llm_double_thread: ThreadDoubleFactory) -> None:
    double = llm_double_thread(rules=[Rule(match="ping", content="pong")])
    with httpx.Client(timeout=10) as http:
        body = {"model": "candidate", "messages": _user("ping")}
        response = http.post(f"{double.base_url}/chat/completions", json=body)
    assert _content(response) == "pong"
    assert double.requests[0].status == 200


def test_thread_mode_stops_serving_on_exit() -> None:
    double = LLMDouble()
    with double.start_in_thread():
        port = double.port
        assert httpx.get(f"{double.url}/health", timeout=5).status_code == 200
    with pytest.raises(DoubleNotRunningError):
        _ = double.url
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


def test_config_errors() -> None:
    with pytest.raises(DoubleConfigError, match="unique"):
        LLMDouble(models=[ModelSpec("a"), ModelSpec("a")])
    with pytest.raises(DoubleConfigError, match="overflow_style"):
        ModelSpec("a", overflow_style="tgi")  # type: ignore[arg-type]
    with pytest.raises(DoubleConfigError, match="400-599"):
        Rule(status=200)


def test_command_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"match": "France", "content": "Paris", "model": "cand"}]))
    ready = tmp_path / "url.txt"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kyai_testing.llm_double",
            "--model",
            "cand",
            "--judge-model",
            "judge",
            "--max-model-len",
            "2048",
            "--rules",
            str(rules),
            "--ready-file",
            str(ready),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text().strip():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the double did not start within 30 s"
            time.sleep(0.05)
        base = ready.read_text().strip() + "/v1"
        with httpx.Client(timeout=10) as http:
            cards = http.get(f"{base}/models").json()["data"]
            assert [(c["id"], c["max_model_len"]) for c in cards] == [
                ("cand", 2048),
                ("judge", 2048),
            ]
            url = f"{base}/chat/completions"
            paris = http.post(url, json={"model": "cand", "messages": _user("France?")})
            other = http.post(url, json={"model": "cand", "messages": _user("Spain?")})
            judged = http.post(
                url, json={"model": "judge", "messages": _user(_judge_message("Paris", "paris"))}
            )
        assert _content(paris) == "Paris" and _content(other) == "OK"
        assert json.loads(_content(judged))["score"] == 1.0
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "LLM double listening on http://127.0.0.1:" in out
    assert err == ""


# -- demo ----------------------------------------------------------------------------------


def test_demo_runs_kyai_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kyai_testing.demo import DEMO_ROWS, run_demo

    output = tmp_path / "run"
    assert run_demo(output, latency_s=0.0) == 0
    summary = json.loads((output / "summary.json").read_text())
    judgements = [
        json.loads(line) for line in (output / "judgements.jsonl").read_text().splitlines()
    ]
    scores = {j["row_id"]: j["score"] for j in judgements}
    # One scripted answer is wrong (Kyoto for Tokyo); the others, <think> row included, are right.
    assert scores == {
        row.row_id: (0.0 if row.row_id == "capital-japan" else 1.0) for row in DEMO_ROWS
    }
    assert summary["avg_score"] == pytest.approx(5 / 6, abs=1e-4)
    printed = capsys.readouterr().out
    assert "capital-japan" in printed and str(output) in printed


def test_a_model_named_as_candidate_and_judge_is_served_once_as_the_judge() -> None:
    # A command line the README once gave: `--model judge --judge-model judge` (it exited 2:
    # names repeated).
    from kyai_testing.llm_double import _parser, build_double

    double = build_double(_parser().parse_args(["--model", "judge", "--judge-model", "judge"]))
    assert list(double.models) == ["judge"]
    both = build_double(_parser().parse_args(["--model", "cand", "--judge-model", "judge"]))
    assert list(both.models) == ["cand", "judge"]
