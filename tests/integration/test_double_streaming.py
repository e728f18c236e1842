"""The double (and thus the engine stand-ins) streams like vLLM and serves engine metrics."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kyai_testing import DoubleConfigError, Faults, LLMDouble, ModelSpec, Rule
from kyai_testing.llm_double import _parser, build_double

BODY = {"model": "cand", "messages": [{"role": "user", "content": "hi"}]}


async def post(url: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(url, json=body)


async def get(url: str) -> str:
    async with httpx.AsyncClient(timeout=10) as client:
        return (await client.get(url)).text


async def read_events(
    double: LLMDouble, body: dict[str, Any]
) -> tuple[httpx.Response, list[Any], list[float]]:
    """The streamed answer's events (parsed; "[DONE]" as is) and their arrival times, counted
    from when the request was sent (not from its response's headers, which the server may
    send before it starts pacing the tokens: under load that made the first token seem
    early)."""
    events: list[Any] = []
    times: list[float] = []
    async with httpx.AsyncClient(timeout=10) as client:
        sent = time.monotonic()
        async with client.stream(
            "POST", f"{double.base_url}/chat/completions", json=body
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    data = line[6:]
                    events.append(data if data == "[DONE]" else json.loads(data))
                    times.append(time.monotonic() - sent)
    return response, events, times


async def test_a_stream_is_shaped_like_vllms() -> None:
    rules = [Rule(content="abcdefghij", reasoning_content="hmmm")]
    async with LLMDouble(models=[ModelSpec("cand")], rules=rules) as double:
        body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
        response, events, _ = await read_events(double, body)
        assert double.requests[0].streamed
    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    # One chunk per token of 4 characters: the reasoning first, then the content.
    assert deltas[1:] == [
        {"reasoning_content": "hmmm"},
        {"content": "abcd"},
        {"content": "efgh"},
        {"content": "ij"},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 4 + ["stop"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 1, "completion_tokens": 4, "total_tokens": 5}


async def test_no_usage_chunk_unless_asked_and_the_pacing_is_kept() -> None:
    async with LLMDouble(
        models=[ModelSpec("cand")], rules=[Rule(content="a" * 20)], ttft_s=0.2, token_s=0.05
    ) as double:
        _, events, times = await read_events(double, {**BODY, "stream": True})
        started = time.monotonic()
        whole = await post(f"{double.base_url}/chat/completions", BODY)
        whole_s = time.monotonic() - started
    assert not any("usage" in e for e in events[:-1])
    token_times = times[1:-1]  # after the role chunk, before [DONE]
    assert len(token_times) == 5
    assert token_times[0] >= 0.2
    assert token_times[-1] >= 0.2 + 4 * 0.05
    assert token_times[-1] < 0.2 + 4 * 0.05 + 0.25
    assert whole.json()["choices"][0]["message"]["content"] == "a" * 20
    assert 0.4 <= whole_s < 0.65  # a whole answer takes as long as the stream


async def test_events_per_write_sends_the_tokens_in_groups_the_engine_times_each() -> None:
    """Three token events per write: the client reads them together (when the group's last
    token is due), while the engine's histograms still see one token every 50 ms."""
    async with LLMDouble(
        models=[ModelSpec("cand")],
        rules=[Rule(content="a" * 20)],  # five tokens: writes of (role, 1, 2, 3) and (4, 5)
        ttft_s=0.1,
        token_s=0.05,
        events_per_write=3,
    ) as double:
        _, events, times = await read_events(double, {**BODY, "stream": True})
        text = await get(f"{double.url}/metrics")
    assert len(events) == 1 + 5 + 1  # the role, five tokens, [DONE]
    first, second = times[:4], times[4:6]
    assert max(first) - min(first) < 0.02 and max(second) - min(second) < 0.02
    assert first[0] >= 0.1 + 2 * 0.05  # the first group goes when its third token is due
    # ... and the second when its last (the fifth) is: times due, not gaps, which a late
    # wake-up of the first write on a loaded machine would shrink.
    assert second[0] >= 0.1 + 4 * 0.05
    samples = {
        s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
    }
    gaps = samples["vllm:inter_token_latency_seconds_count"]
    assert gaps == 4.0
    assert 0.045 <= samples["vllm:inter_token_latency_seconds_sum"] / gaps < 0.05 + 0.03


@pytest.mark.parametrize(
    ("kind", "outcome"), [("short_body", "payload error"), ("cut_json", "cut event")]
)
async def test_a_stream_is_cut_by_the_body_faults(kind: str, outcome: str) -> None:
    async with LLMDouble(
        models=[ModelSpec("cand")],
        rules=[Rule(content="x" * 40)],
        faults=Faults(rate=1.0, kinds=(kind,)),
    ) as double:
        seen = b""
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    f"{double.base_url}/chat/completions", json={**BODY, "stream": True}
                ) as response,
            ):
                async for piece in response.content.iter_any():
                    seen += piece
            got = "cut event" if b'{"ind\n\n' in seen else "complete"
        except aiohttp.ClientPayloadError:
            got = "payload error"
    assert got == outcome
    assert b"[DONE]" not in seen
    assert seen.count(b"data: ") < 10 + 2  # half of the ten tokens at most, and the role


async def test_metrics_have_vllms_names_buckets_and_labels() -> None:
    async with LLMDouble(
        models=[ModelSpec("cand")], rules=[Rule(content="a" * 12)], ttft_s=0.3, token_s=0.01
    ) as double:
        await read_events(double, {**BODY, "stream": True})
        await post(f"{double.base_url}/chat/completions", BODY)
        text = await get(f"{double.url}/metrics")
    # TTFT 0.3 s: in vLLM's bucket (0.25, 0.5], which a loaded machine's late wake-ups (up
    # to 0.2 s) keep it in (0.03 s fell out of (0.02, 0.04] with 10 ms of delay).
    samples = {
        (s.name, s.labels.get("le")): (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels, count = samples[("vllm:time_to_first_token_seconds_count", None)]
    assert (labels, count) == ({"model_name": "cand", "engine": "0"}, 2.0)
    assert samples[("vllm:time_to_first_token_seconds_bucket", "0.25")][1] == 0.0
    assert samples[("vllm:time_to_first_token_seconds_bucket", "0.5")][1] == 2.0
    assert samples[("vllm:inter_token_latency_seconds_count", None)][1] == 4.0  # 2 x 2 gaps
    assert samples[("vllm:time_per_output_token_seconds_count", None)][1] == 4.0
    assert samples[("vllm:request_time_per_output_token_seconds_count", None)][1] == 2.0
    assert samples[("vllm:e2e_request_latency_seconds_count", None)][1] == 2.0
    assert samples[("vllm:generation_tokens_total", None)][1] == 6.0
    assert samples[("vllm:request_success_total", None)][0]["finished_reason"] == "stop"
    e2e_sum = samples[("vllm:e2e_request_latency_seconds_sum", None)][1]
    assert 2 * 0.32 <= e2e_sum < 2 * 0.32 + 0.3


async def test_sglang_style_metrics_and_prepared_series() -> None:
    models = [ModelSpec("cand", overflow_style="sglang")]
    async with LLMDouble(models=models) as double:
        before = await get(f"{double.url}/metrics")
        await post(f"{double.base_url}/chat/completions", BODY)
        after = await get(f"{double.url}/metrics")
    assert 'sglang:time_to_first_token_seconds_count{model_name="cand"} 0.0' in before
    assert 'sglang:num_requests_total{model_name="cand"} 1.0' in after
    assert 'sglang:inter_token_latency_seconds_bucket{le="0.002",model_name="cand"}' in after
    assert "vllm:" not in after


def test_command_line_pacing_and_stream_mode() -> None:
    args = _parser().parse_args(["--ttft-ms", "300", "--token-ms", "20", "--stream-mode", "ignore"])
    double = build_double(args)
    assert (double.ttft_s, double.token_s, double.stream_mode) == (0.3, 0.02, "ignore")
    assert build_double(_parser().parse_args([])).stream_mode == "stream"


@pytest.mark.parametrize(
    "options",
    [{"ttft_s": -1.0}, {"token_s": -0.1}, {"stream_mode": "sometimes"}, {"events_per_write": 0}],
)
def test_bad_pacing_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(DoubleConfigError, match=next(iter(options))):
        LLMDouble(**options)


def finish_reasons(events: list[Any]) -> list[Any]:
    return [
        event["choices"][0]["finish_reason"]
        for event in events
        if isinstance(event, dict) and event.get("choices")
    ]


def text_of(events: list[Any]) -> str:
    return "".join(
        event["choices"][0]["delta"].get("content") or ""
        for event in events
        if isinstance(event, dict) and event.get("choices")
    )


@pytest.mark.parametrize(
    ("kind", "reasons", "ends_with_done"),
    [
        ("done_early", [None] * 3, True),  # the role chunk and two tokens, then [DONE]
        ("eof_early", [None] * 3, False),  # the body simply ends
        ("abort", [None, None, None, "abort"], True),  # vLLM's aborted request
        ("no_finish", [None] * 5, True),  # every token, usage and [DONE]: no finish_reason
    ],
)
async def test_the_stream_faults_end_streams_as_servers_do(
    kind: str, reasons: list[Any], ends_with_done: bool
) -> None:
    rules = [Rule(content="abcdefghijklmnop")]  # 4 tokens of 4 characters
    faults = Faults(rate=1.0, kinds=(kind,))
    async with LLMDouble(models=[ModelSpec("cand")], rules=rules, faults=faults) as double:
        body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
        _, events, _ = await read_events(double, body)
        # A whole answer is sent intact: the stream faults are of streams only.
        whole = (await post(f"{double.base_url}/chat/completions", BODY)).json()
    assert finish_reasons(events) == reasons
    assert (events[-1] == "[DONE]") is ends_with_done
    assert text_of(events) == ("abcdefghijklmnop" if kind == "no_finish" else "abcdefgh")
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert whole["choices"][0]["message"]["content"] == "abcdefghijklmnop"


async def test_interrupt_requests_ends_a_stream_when_a_newer_request_waits() -> None:
    """llama-cpp-python's interrupt_requests: [DONE] without a finish_reason, often at once."""
    answer = "abcd" * 12  # 12 tokens, 0.1 s apart: a stream lasts over a second
    rules = [Rule(content=answer)]
    async with LLMDouble(
        models=[ModelSpec("cand")], rules=rules, token_s=0.1, interrupt_requests=True
    ) as double:
        body = {**BODY, "stream": True}
        alone = await read_events(double, body)
        assert double.interrupted == 0
        first = asyncio.create_task(read_events(double, body))
        while len(double.requests) < 2 or double.in_flight < 1:  # the first stream has begun
            await asyncio.sleep(0.005)
        second = await read_events(double, body)
        _, cut, _ = await first
        assert double.interrupted == 1
        # Whole answers are served one at a time and never interrupted.
        answers = await asyncio.gather(
            *(post(f"{double.base_url}/chat/completions", BODY) for _ in range(3))
        )
        assert double.max_in_flight == 3 and double.interrupted == 1
    assert finish_reasons(alone[1])[-1] == "stop" and text_of(alone[1]) == answer
    assert cut[-1] == "[DONE]" and "stop" not in finish_reasons(cut)
    assert len(text_of(cut)) < len(answer)
    assert finish_reasons(second[1])[-1] == "stop"  # the newer request is answered whole
    assert all(a.json()["choices"][0]["finish_reason"] == "stop" for a in answers)


def test_command_line_interrupt_requests_and_stream_faults() -> None:
    args = _parser().parse_args(
        ["--interrupt-requests", "--fault-rate", "0.5", "--fault-kinds", "done_early,abort"]
    )
    double = build_double(args)
    assert double.interrupt_requests
    assert double.faults is not None and double.faults.kinds == ("done_early", "abort")
    with pytest.raises(DoubleConfigError, match="got \\['nope'\\]"):
        build_double(_parser().parse_args(["--fault-rate", "1", "--fault-kinds", "nope"]))
