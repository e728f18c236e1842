"""Streamed chat requests through the client (httpx.MockTransport): timing, retries, fallbacks."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest

from kyai.evaluation import ChatClient, ChatError, RetryPolicy

FAST = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.01)
MESSAGES = [{"role": "user", "content": "hi"}]
SSE = {"content-type": "text/event-stream"}


def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
    body = {"id": "c1", "model": "m", "choices": [{"delta": delta, "finish_reason": reason}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def usage(tokens: int) -> bytes:
    body = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": tokens}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def answer(*pieces: str, with_usage: bool = True) -> list[bytes]:
    parts = [chunk({"role": "assistant", "content": ""})]
    last = len(pieces) - 1
    parts += [chunk({"content": p}, "stop" if i == last else None) for i, p in enumerate(pieces)]
    if with_usage:
        parts.append(usage(len(pieces)))
    return [*parts, b"data: [DONE]\n\n"]


class Paced(httpx.AsyncByteStream):
    """Chunks sent after delays (seconds); ``fail`` raises a transport error at that index."""

    def __init__(self, parts: Sequence[bytes], delays: Sequence[float] = (), fail: int = -1):
        self.parts = parts
        self.delays = list(delays) or [0.0] * len(parts)
        self.fail = fail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for index, (part, delay) in enumerate(zip(self.parts, self.delays, strict=True)):
            if index == self.fail:
                raise httpx.RemoteProtocolError("peer closed connection without sending body")
            if delay:
                await asyncio.sleep(delay)
            yield part


def sse(parts: Sequence[bytes], **kwargs: Any) -> httpx.Response:
    return httpx.Response(200, headers=SSE, stream=Paced(parts, **kwargs))


Handler = Callable[[httpx.Request], httpx.Response]


def client_for(handler: Handler, **kwargs: Any) -> ChatClient:
    return ChatClient(
        "http://llm.test", retry=FAST, transport=httpx.MockTransport(handler), **kwargs
    )


def scripted(replies: list[httpx.Response], seen: list[dict[str, Any]]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return replies.pop(0)

    return handler


async def test_a_streamed_answer_is_asked_for_assembled_and_timed() -> None:
    seen: list[dict[str, Any]] = []
    delays = [0.05, 0.0, 0.02, 0.02, 0.0, 0.0]
    replies = [sse(answer("Hel", "lo", "!"), delays=delays)]
    async with client_for(scripted(replies, seen)) as client:
        result = await client.chat("m", MESSAGES, max_tokens=50, stream=True)
    assert seen[0]["stream"] is True
    assert seen[0]["stream_options"] == {"include_usage": True}
    assert (result.content, result.finish_reason, result.streamed) == ("Hello!", "stop", True)
    assert result.usage == {"prompt_tokens": 1, "completion_tokens": 3}
    assert result.text_chunks == 3
    # As vllm bench: TTFT at the first chunk with a choice (the role chunk, 50 ms in), then a
    # gap per later choice chunk (Hel at once, lo and ! 20 ms apart); E2E at the last one.
    assert result.ttft_ms is not None and result.ttft_ms >= 50.0
    assert len(result.itl_ms) == 3 and min(result.itl_ms[1:]) >= 20.0
    assert result.itl_ms[0] < 15.0
    assert result.latency_ms == pytest.approx(result.ttft_ms + sum(result.itl_ms), abs=1e-6)


async def test_events_in_one_read_get_a_gap_each_and_the_usage_chunk_ends_nothing() -> None:
    """Four choice chunks in one piece of the body (one read): three gaps, each the time it
    took to take the next event out of the read; none dropped, merged or zero. The usage chunk,
    200 ms later, is not the end of the request (E2E)."""
    *choices, tail, done = answer("a", "b", "c")
    replies = [sse([b"".join(choices), tail, done], delays=[0.03, 0.2, 0.0])]
    async with client_for(scripted(replies, [])) as client:
        result = await client.chat("m", MESSAGES, max_tokens=50, stream=True)
    assert (result.content, result.text_chunks) == ("abc", 3)
    assert result.ttft_ms is not None and result.ttft_ms >= 30.0
    assert len(result.itl_ms) == 3
    assert all(0.0 < gap < 15.0 for gap in result.itl_ms), list(result.itl_ms)
    assert result.latency_ms == pytest.approx(result.ttft_ms + sum(result.itl_ms), abs=1e-6)
    assert result.latency_ms < result.ttft_ms + 100.0  # not the usage chunk's 200 ms later


async def test_judge_requests_do_not_stream() -> None:
    seen: list[dict[str, Any]] = []
    whole = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}
    async with client_for(scripted([httpx.Response(200, json=whole)], seen)) as client:
        result = await client.chat("m", MESSAGES, max_tokens=5)
    assert "stream" not in seen[0]
    assert (result.streamed, result.ttft_ms, result.itl_ms) == (False, None, ())


def done_early(*pieces: str) -> list[bytes]:
    """Role chunk, ``pieces`` without a finish_reason, then [DONE] (llama-cpp-python's cut)."""
    role = chunk({"role": "assistant", "content": ""})
    return [role, *(chunk({"content": p}) for p in pieces), b"data: [DONE]\n\n"]


CUTS = ["connection", "no_end", "bad_json", "done_at_once", "done_after_text", "no_finish", "abort"]


def cut_stream(cut: str) -> httpx.Response:
    if cut == "connection":
        return sse(answer("AB", "CD"), fail=2)
    if cut == "no_end":
        return sse(answer("AB", "CD")[:2])
    if cut == "bad_json":
        return sse([chunk({"content": "AB"}), b'data: {"choices": [{"del\n\n'])
    if cut == "done_at_once":
        return sse(done_early())
    if cut == "done_after_text":
        return sse(done_early("AB", "CD"))
    if cut == "no_finish":
        return sse([*done_early("AB", "CD")[:-1], usage(2), b"data: [DONE]\n\n"])
    assert cut == "abort"
    return sse([*done_early("AB")[:-1], chunk({}, "abort"), usage(1), b"data: [DONE]\n\n"])


@pytest.mark.parametrize("cut", CUTS)
async def test_a_cut_stream_is_retried_and_its_part_discarded(cut: str) -> None:
    seen: list[dict[str, Any]] = []
    first = cut_stream(cut)
    async with client_for(scripted([first, sse(answer("xy"))], seen)) as client:
        result = await client.chat("m", MESSAGES, max_tokens=50, stream=True)
    assert result.content == "xy"  # nothing of the cut answer
    assert result.attempts == 2
    assert len(seen) == 2 and all(body["stream"] for body in seen)


@pytest.mark.parametrize(
    ("cut", "kind"),
    [
        ("connection", "connection_error"),
        ("no_end", "stream_incomplete"),
        ("done_at_once", "stream_incomplete"),
        ("done_after_text", "stream_incomplete"),
        ("no_finish", "stream_incomplete"),
        ("abort", "stream_incomplete"),
        ("bad_json", "invalid_response"),
    ],
)
async def test_a_stream_cut_every_time_fails_with_its_kind(cut: str, kind: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return cut_stream(cut)

    async with client_for(handler) as client:
        with pytest.raises(ChatError) as caught:
            await client.chat("m", MESSAGES, max_tokens=50, stream=True)
    assert caught.value.kind == kind
    assert caught.value.attempts == 4
    assert "gave up after 4 attempts" in caught.value.message
    if kind == "stream_incomplete":
        # The cause, and what to do about a server that interrupts streams.
        assert "The stream ended early" in caught.value.message
        assert "--concurrency 1 or --no-stream" in caught.value.message
        assert "interrupt_requests" in caught.value.message


@pytest.mark.parametrize(
    "message",
    [
        {"content": None},  # neither content nor reasoning
        {"content": "half an ans"},  # ended by the server before it was done
    ],
)
async def test_a_whole_answer_the_server_did_not_finish_is_retried(message: dict[str, Any]) -> None:
    seen: list[dict[str, Any]] = []
    reason = None if message["content"] is None else "abort"
    bad = {"choices": [{"message": message, "finish_reason": reason}]}
    good = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}
    replies = [httpx.Response(200, json=bad), httpx.Response(200, json=good)]
    async with client_for(scripted(replies, seen)) as client:
        result = await client.chat("m", MESSAGES, max_tokens=5)
    assert (result.content, result.attempts) == ("ok", 2)

    def always(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=bad)

    async with client_for(always) as client:
        with pytest.raises(ChatError) as caught:
            await client.chat("m", MESSAGES, max_tokens=5)
    assert caught.value.kind == "invalid_response"
    assert caught.value.attempts == 4


@pytest.mark.parametrize("status", [429, 503])
async def test_retryable_statuses_are_retried_for_streams(status: int) -> None:
    seen: list[dict[str, Any]] = []
    replies = [httpx.Response(status, json={"error": {"message": "busy"}}), sse(answer("ok"))]
    async with client_for(scripted(replies, seen)) as client:
        result = await client.chat("m", MESSAGES, max_tokens=50, stream=True)
    assert (result.content, result.attempts, result.streamed) == ("ok", 2, True)


async def test_the_context_length_shrink_works_when_streaming() -> None:
    seen: list[dict[str, Any]] = []
    overflow = {
        "error": {
            "message": "This model's maximum context length is 100 tokens. However, your "
            "request has 40 input tokens. Please reduce the length of the input messages.",
            "type": "BadRequestError",
            "code": 400,
        }
    }
    replies = [httpx.Response(400, json=overflow), sse(answer("ok"))]
    async with client_for(scripted(replies, seen)) as client:
        result = await client.chat("m", MESSAGES, max_tokens=90, stream=True)
    assert [body["max_tokens"] for body in seen] == [90, 60]
    assert all(body["stream"] for body in seen)
    assert (result.content, result.max_tokens, result.streamed) == ("ok", 60, True)


async def test_a_refusal_of_streaming_switches_it_off_for_the_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[dict[str, Any]] = []
    refusal = httpx.Response(400, json={"error": {"message": "Streaming is not supported"}})
    whole = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}
    replies = [refusal, httpx.Response(200, json=whole), httpx.Response(200, json=whole)]
    with caplog.at_level(logging.WARNING, logger="kyai.evaluation._client"):
        async with client_for(scripted(replies, seen)) as client:
            first = await client.chat("m", MESSAGES, max_tokens=5, stream=True)
            second = await client.chat("m", MESSAGES, max_tokens=5, stream=True)
            assert client.stream_refused
    assert [body.get("stream") for body in seen] == [True, None, None]
    assert (first.content, first.streamed, first.attempts) == ("ok", False, 1)
    assert (second.streamed, second.attempts) == (False, 1)
    warnings = [r for r in caplog.records if "refused streaming" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_400_not_about_streaming_is_an_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "temperature must be >= 0"}})

    async with client_for(handler) as client:
        with pytest.raises(ChatError) as caught:
            await client.chat("m", MESSAGES, max_tokens=5, stream=True)
        assert not client.stream_refused
    assert (caught.value.kind, caught.value.status, caught.value.attempts) == (
        "http_error",
        400,
        1,
    )


async def test_a_server_ignoring_stream_is_taken_as_it_answers() -> None:
    whole = {
        "id": "x",
        "choices": [{"message": {"content": "ok", "reasoning": "r"}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 1},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, json=whole)

    async with client_for(handler) as client:
        result = await client.chat("m", MESSAGES, max_tokens=5, stream=True)
        assert not client.stream_refused
    assert (result.content, result.reasoning, result.streamed) == ("ok", "r", False)
    assert result.ttft_ms is None


@pytest.mark.parametrize(("code", "attempts"), [(500, 2), (400, 1)])
async def test_an_error_inside_the_stream(code: int, attempts: int) -> None:
    error = json.dumps({"error": {"message": "engine failed", "code": code}}).encode()
    replies = [sse([chunk({"content": "a"}), b"data: " + error + b"\n\n"]), sse(answer("ok"))]
    seen: list[dict[str, Any]] = []
    async with client_for(scripted(replies, seen)) as client:
        if attempts == 1:
            with pytest.raises(ChatError) as caught:
                await client.chat("m", MESSAGES, max_tokens=5, stream=True)
            assert (caught.value.kind, caught.value.status) == ("http_error", 400)
            assert "engine failed" in caught.value.message
        else:
            result = await client.chat("m", MESSAGES, max_tokens=5, stream=True)
            assert (result.content, result.attempts) == ("ok", attempts)
    assert len(seen) == attempts


async def test_streamed_error_bodies_are_redacted() -> None:
    key = "sk-stream-secret-0123456789"

    def handler(request: httpx.Request) -> httpx.Response:
        echoed = request.headers["authorization"]
        return httpx.Response(401, json={"error": {"message": f"bad header {echoed}"}})

    async with client_for(handler, api_key=key) as client:
        with pytest.raises(ChatError) as caught:
            await client.chat("m", MESSAGES, max_tokens=5, stream=True)
    assert key not in caught.value.message
    assert "[REDACTED]" in caught.value.message
