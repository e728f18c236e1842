"""The product's client against the real ``vllm serve`` (0.32, CPU), as the client reads it.

One server (conftest's ``vllm_server``): the tiny model, ``--max-model-len 1024``,
``--reasoning-parser deepseek_r1``. The model's weights are random but its output head is
wired (``tiny_model.py``): after the chat template's ``<|assistant|>`` it says
``<think>Let me see.</think>Paris</s>``, so every answer is known and short. What is checked:
what the server says (cards, chunks, errors, metrics: the facts the stand-ins imitate), and
what kyai's client, ``kyai generate`` and the server-metrics reader make of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.real_vllm import MAX_MODEL_LEN, SERVED_NAME, VllmServer
from kyai.evaluation import (
    ChatClient,
    ChatError,
    RetryPolicy,
    output_budget,
    parse_overflow,
    resolve_window,
)
from kyai.evaluation._servermetrics import HISTOGRAMS, TOKEN_COUNTERS, scrape, server_block

pytestmark = [pytest.mark.engines, pytest.mark.timeout(400)]

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
#: Streams and whole answers alike: no retry hides a refusal.
NO_RETRY = RetryPolicy(max_retries=0)


def words(count: int) -> list[dict[str, str]]:
    """A user message of ``count`` words (the tiny tokenizer reads each as one token or more)."""
    return [{"role": "user", "content": " ".join(["word"] * count)}]


def post(server: VllmServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": SERVED_NAME, **body},
        timeout=120,
    )


def sse_events(text: str) -> list[Any]:
    """The ``data:`` payloads of an event stream: JSON objects, then ``"[DONE]"``."""
    events: list[Any] = []
    for block in text.split("\n\n"):
        data = "\n".join(
            line[len("data:") :].strip() for line in block.splitlines() if line.startswith("data:")
        )
        if data:
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_models_health_and_version_as_vllm_serves_them(vllm_server: VllmServer) -> None:
    models = httpx.get(f"{vllm_server.url}/v1/models", timeout=10).json()
    (card,) = models["data"]
    assert models["object"] == "list"
    assert card["id"] == SERVED_NAME and card["object"] == "model"
    assert card["owned_by"] == "vllm" and card["root"] == str(vllm_server.model.path)
    assert card["max_model_len"] == MAX_MODEL_LEN and card["parent"] is None
    health = httpx.get(f"{vllm_server.url}/health", timeout=10)
    assert health.status_code == 200 and health.content == b""
    assert httpx.get(f"{vllm_server.url}/version", timeout=10).json() == {"version": "0.32.0"}
    # What the client makes of the card: the window, from the server.
    window = resolve_window(models["data"], SERVED_NAME)
    assert (window.tokens, window.source) == (MAX_MODEL_LEN, "server")


def test_a_whole_answer_carries_reasoning_not_reasoning_content(
    vllm_server: VllmServer,
) -> None:
    response = post(vllm_server, {"messages": QUESTION, "max_tokens": 64})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == SERVED_NAME
    (choice,) = body["choices"]
    message = choice["message"]
    assert message["role"] == "assistant"
    assert message["content"] == vllm_server.model.answer
    assert message["reasoning"] == vllm_server.model.reasoning
    assert "reasoning_content" not in message
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] is None
    usage = body["usage"]
    assert usage["completion_tokens"] + usage["prompt_tokens"] == usage["total_tokens"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] > 0


def test_a_stream_has_reasoning_deltas_and_a_usage_chunk_only_when_asked(
    vllm_server: VllmServer,
) -> None:
    asked = post(
        vllm_server,
        {
            "messages": QUESTION,
            "max_tokens": 64,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert asked.status_code == 200
    assert asked.headers["content-type"].startswith("text/event-stream")
    events = sse_events(asked.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert not any("reasoning_content" in delta for delta in deltas)
    reasoning = "".join(delta.get("reasoning") or "" for delta in deltas)
    content = "".join(delta.get("content") or "" for delta in deltas)
    assert (reasoning, content) == (vllm_server.model.reasoning, vllm_server.model.answer)
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    # Without stream_options: no usage chunk; the last choice chunk says how it finished.
    plain = sse_events(
        post(vllm_server, {"messages": QUESTION, "max_tokens": 64, "stream": True}).text
    )
    assert plain[-1] == "[DONE]" and all(chunk["choices"] for chunk in plain[:-1])
    assert plain[-2]["choices"][0]["finish_reason"] == "stop"
    assert not any("usage" in chunk for chunk in plain[:-1])


async def test_the_client_reads_a_streamed_answer(vllm_server: VllmServer) -> None:
    async with ChatClient(vllm_server.url, retry=NO_RETRY) as client:
        cards = await client.list_models()
        window = resolve_window(cards, SERVED_NAME)
        budget = output_budget(window.tokens, QUESTION)
        result = await client.chat(SERVED_NAME, QUESTION, max_tokens=budget, stream=True)
    assert result.streamed and result.attempts == 1 and result.max_tokens == budget
    assert result.content == vllm_server.model.answer
    assert result.reasoning == vllm_server.model.reasoning
    assert result.reasoning_content is None
    assert result.finish_reason == "stop"
    assert result.usage is not None and result.usage["completion_tokens"] > 0
    assert result.ttft_ms is not None and 0 < result.ttft_ms <= result.latency_ms
    assert result.text_chunks >= 2 and len(result.itl_ms) >= 1


async def test_prompt_and_max_tokens_over_the_window_is_answered_and_clamped(
    vllm_server: VllmServer,
) -> None:
    messages = words(300)
    # ignore_eos: the answer runs to its budget, which shows where the server clamped it.
    raw = post(vllm_server, {"messages": messages, "max_tokens": 1000, "ignore_eos": True})
    assert raw.status_code == 200, raw.text
    usage = raw.json()["usage"]
    assert usage["prompt_tokens"] + 1000 > MAX_MODEL_LEN
    assert usage["total_tokens"] == MAX_MODEL_LEN
    assert raw.json()["choices"][0]["finish_reason"] == "length"
    # The client sends that budget once and takes the answer.
    async with ChatClient(vllm_server.url, retry=NO_RETRY) as client:
        result = await client.chat(SERVED_NAME, messages, max_tokens=1000, stream=True)
    assert result.attempts == 1 and result.max_tokens == 1000
    assert result.content == vllm_server.model.answer and result.finish_reason == "stop"


async def test_max_tokens_alone_over_the_window_is_refused_and_the_client_shrinks_it(
    vllm_server: VllmServer,
) -> None:
    raw = post(vllm_server, {"messages": QUESTION, "max_tokens": 2000})
    assert raw.status_code == 400
    assert raw.json() == {
        "error": {
            "message": "max_tokens=2000 cannot be greater than max_model_len=1024. Please "
            "request fewer output tokens. (parameter=max_tokens, value=2000)",
            "type": "BadRequestError",
            "param": "max_tokens",
            "code": 400,
        }
    }
    overflow = parse_overflow(400, raw.json(), raw.text)
    assert overflow is not None and overflow.window == MAX_MODEL_LEN
    for stream in (False, True):
        async with ChatClient(vllm_server.url, retry=NO_RETRY) as client:
            result = await client.chat(SERVED_NAME, QUESTION, max_tokens=2000, stream=stream)
        assert result.attempts == 2, stream
        assert result.max_tokens is not None and result.max_tokens < MAX_MODEL_LEN
        assert result.content == vllm_server.model.answer


async def test_a_prompt_alone_over_the_window_is_refused_and_fails_the_row(
    vllm_server: VllmServer,
) -> None:
    messages = words(1200)
    for stream in (False, True):
        body = {"messages": messages, "max_tokens": 10, **({"stream": True} if stream else {})}
        raw = post(vllm_server, body)
        assert raw.status_code == 400, stream
        error = raw.json()["error"]
        assert error["type"] == "BadRequestError" and error["code"] == 400
        assert error["param"] == "input_tokens"
        assert error["message"].startswith(
            "This model's maximum context length is 1024 tokens. However, your prompt "
            "contains at least 1025 input tokens, which exceeds this limit even without any "
            "output tokens. Please reduce the length of the input prompt."
        )
    overflow = parse_overflow(400, raw.json(), raw.text)
    assert overflow is not None and overflow.window == MAX_MODEL_LEN
    assert overflow.prompt_tokens == MAX_MODEL_LEN + 1 and overflow.prompt_is_lower_bound
    async with ChatClient(vllm_server.url, retry=NO_RETRY) as client:
        with pytest.raises(ChatError) as refused:
            await client.chat(SERVED_NAME, messages, max_tokens=200, stream=True)
    assert refused.value.kind == "context_overflow" and refused.value.attempts == 1
    assert "does not fit" in refused.value.message


def metric_families(text: str) -> dict[str, set[str]]:
    """``vllm:`` family name -> the label names of its samples (``le`` aside)."""
    families: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("vllm:"):
            labels = {name for sample in family.samples for name in sample.labels}
            families[family.name] = labels - {"le"}
    return families


async def test_the_engines_metrics_give_the_engine_side_figures(vllm_server: VllmServer) -> None:
    url = f"{vllm_server.url}/metrics"
    text = httpx.get(url, timeout=10).text
    families = metric_families(text)
    print(f"\n{len(families)} vllm: families: " + ", ".join(sorted(families)))
    read = {name for names in HISTOGRAMS.values() for name in names if name in families}
    assert read == {
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
    }
    assert "vllm:generation_tokens" in families  # the counter, its samples ..._total
    assert TOKEN_COUNTERS[0] == "vllm:generation_tokens_total"
    for name in read | {"vllm:generation_tokens"}:
        assert families[name] == {"model_name", "engine"}, name
    before = await scrape(url, SERVED_NAME)
    async with ChatClient(vllm_server.url, retry=NO_RETRY) as client:
        answers = [
            await client.chat(SERVED_NAME, QUESTION, max_tokens=64, stream=True) for _ in range(3)
        ]
    after = await scrape(url, SERVED_NAME)
    block = server_block(url, before, after, wall_s=1.0)
    assert block is not None
    assert block["requests"] == 3
    assert block["output_tokens"] == sum(a.usage["completion_tokens"] for a in answers if a.usage)
    for figure in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert block[figure]["mean"] is not None and block[figure]["mean"] > 0, figure
    # The engine's time to first token lies inside the client's.
    client_ttft = sum(a.ttft_ms or 0.0 for a in answers) / len(answers)
    assert block["ttft_ms"]["mean"] <= client_ttft


def test_kyai_generate_stores_the_real_servers_answers(
    vllm_server: VllmServer, tmp_path: Path
) -> None:
    rows = tmp_path / "capitals.jsonl"
    rows.write_text(
        "".join(
            json.dumps(
                {"instruction": f"Capital of France? ({i})", "ground_truth_response": "Paris"}
            )
            + "\n"
            for i in range(4)
        )
    )
    out = tmp_path / "run"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "kyai.cli",
            "generate",
            "--endpoint",
            vllm_server.url,
            "--model",
            SERVED_NAME,
            "--dataset",
            str(rows),
            "--generation-prompt",
            "Answer with the city only.",
            "--judge-prompt",
            "Score 1 if the response names the ground truth.",
            "--server-metrics",
            f"{vllm_server.url}/metrics",
            "--concurrency",
            "2",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert len(records) == 4
    for record in records:
        assert record["error"] is None, record
        assert record["content"] == vllm_server.model.answer
        assert record["reasoning"] == vllm_server.model.reasoning
        assert record["reasoning_content"] is None
        assert record["finish_reason"] == "stop" and record["streamed"] is True
        assert record["ttft_ms"] is not None and record["output_tokens"] > 0
    serving = json.loads((out / "run.json").read_text())["generation"]["serving"]
    assert serving["requests"] == 4 and serving["streamed"] is True
    server = serving["server"]
    assert server["url"] == f"{vllm_server.url}/metrics" and server["requests"] == 4
    assert server["output_tokens"] == sum(r["usage"]["completion_tokens"] for r in records)
    for figure in ("ttft_ms", "itl_ms", "e2e_ms"):
        assert server[figure]["mean"] > 0, figure
