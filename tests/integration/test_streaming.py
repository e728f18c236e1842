"""Streamed generation over real HTTP: the serving figures, and answers stored as before.

The double paces its answers like an engine (time to first token, then one token every so
often), so the figures the client measures can be checked against what it was told to do.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from kyai.datasets import Dataset, load_dataset
from kyai.evaluation import (
    CandidateConfig,
    ChatClient,
    JudgeConfig,
    RetryPolicy,
    generate,
    judge,
)
from kyai_testing import ChatRequest, LLMDouble, ModelSpec, Rule, substring_judge

GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Return JSON {"score": 0..1, "reasoning": "..."}.'
FAST = RetryPolicy(max_retries=4, backoff_base_s=0.001, backoff_max_s=0.005)

#: The fields a streamed record may differ in from a whole one: the timings, the times, and
#: the server's random response id (which differs between any two answers).
TIMING = {
    "latency_ms",
    "elapsed_ms",
    "ttft_ms",
    "tpot_ms",
    "itl_ms_mean",
    "streamed",
    "started_at",
    "finished_at",
    "response_id",
}


def rows_file(path: Path, count: int) -> Dataset:
    with path.open("w", encoding="utf-8") as handle:
        for number in range(count):
            row = {"instruction": f"Q{number:03d}: say the word.", "ground_truth_response": "W"}
            handle.write(json.dumps(row) + "\n")
    return load_dataset(str(path), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT)


def records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "generations.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def serving(out: Path) -> dict[str, Any]:
    block: dict[str, Any] = json.loads((out / "run.json").read_text())["generation"]["serving"]
    return block


def within(value: float | None, target: float, share: float = 0.10, late: float = 0.35) -> bool:
    """``value`` near ``target``: at most ``share`` under it (the server paces no faster), and
    up to ``late`` over it (a busy machine wakes late; a figure computed wrongly — a TTFT that
    is the whole answer's time, a per-chunk TPOT — is off by far more)."""
    return value is not None and -share * target <= value - target <= max(share, late) * target


async def test_ttft_tpot_and_e2e_follow_the_servers_pacing(tmp_path: Path) -> None:
    """TTFT 300 ms, 20 ms per token, 40 tokens: 300 / 20 / 300 + 39 x 20 = 1,080 ms."""
    dataset = rows_file(tmp_path / "rows.jsonl", 16)
    answer = "abcd" * 40  # 40 tokens of the double's tokenizer
    async with LLMDouble(
        models=[ModelSpec("cand", max_model_len=None)],
        rules=[Rule(content=answer)],
        ttft_s=0.3,
        token_s=0.02,
    ) as double:
        await generate(
            dataset, tmp_path / "out", CandidateConfig(double.url, "cand", concurrency=8)
        )
        assert double.max_in_flight == 8
    stored = records(tmp_path / "out")
    assert [r["content"] for r in stored] == [answer] * 16
    assert {(r["output_tokens"], r["output_tokens_source"], r["streamed"]) for r in stored} == {
        (40, "usage", True)
    }
    block = serving(tmp_path / "out")
    for figure, target in (("ttft_ms", 300.0), ("tpot_ms", 20.0), ("itl_ms", 20.0)):
        assert within(block[figure]["mean"], target), (figure, block[figure])
        assert within(block[figure]["p50"], target), (figure, block[figure])
    assert within(block["e2e_ms"]["mean"], 1080.0), block["e2e_ms"]
    assert within(block["e2e_ms"]["p50"], 1080.0), block["e2e_ms"]
    # Every answer near the pacing too (looser: one late wake-up on a busy machine is fine).
    for record in stored:
        assert within(record["ttft_ms"], 300.0, 0.25), record
        assert within(record["tpot_ms"], 20.0, 0.25), record
        assert within(record["itl_ms_mean"], 20.0, 0.25), record
        assert within(record["latency_ms"], 1080.0, 0.25), record
    assert block["streamed"] is True
    assert (block["requests"], block["failed"], block["concurrency"]) == (16, 0, 8)
    assert block["output_tokens"] == 16 * 40
    wall = block["wall_seconds"]
    assert 2 * 1.08 <= wall < 2 * 1.08 * 1.5  # two waves of eight
    assert block["output_tokens_per_second"] == pytest.approx(640 / wall, rel=1e-3)
    assert block["requests_per_second"] == pytest.approx(16 / wall, rel=1e-3)
    assert statistics.median(r["ttft_ms"] for r in stored) == pytest.approx(
        block["ttft_ms"]["p50"], abs=1e-3
    )


async def test_events_in_one_write_are_timed_one_by_one_as_vllm_bench_does() -> None:
    """The server writes its role chunk and four tokens at once, then four more: the client
    (aiohttp, as ``kyai generate`` sends) times each event as vllm bench's ``openai-chat``
    client does, so the answer has one gap per choice chunk after the first: 8 here, tiny
    within a write and the whole wait between writes, none zero and none dropped. (Timed per
    read, the role chunk and the events after the first of a read were lost in one shared
    time: 7 gaps, 6 of them exactly 0.)"""
    async with LLMDouble(
        models=[ModelSpec("cand")],
        rules=[Rule(content="abcd" * 8)],  # 8 tokens
        ttft_s=0.05,
        token_s=0.02,
        events_per_write=4,
    ) as double:
        async with ChatClient(double.url) as client:
            result = await client.chat(
                "cand", [{"role": "user", "content": "hi"}], max_tokens=50, stream=True
            )
    assert result.streamed and result.content == "abcd" * 8
    assert (result.text_chunks, result.usage and result.usage["completion_tokens"]) == (8, 8)
    gaps = list(result.itl_ms)
    assert len(gaps) == 8, gaps  # the role chunk, then 8 tokens: 9 choice chunks
    assert all(gap > 0.0 for gap in gaps), gaps
    within = gaps[:4] + gaps[5:]  # role..4th token, 5th..8th: one write each
    assert max(within) < 10.0, gaps
    assert gaps[4] == max(gaps), gaps  # the wait for the second write
    assert result.ttft_ms is not None and result.ttft_ms >= 50.0 + 3 * 20.0 - 5.0
    # The second write goes when its last token (the eighth) is due: a time due, not a gap,
    # which a late first write on a loaded machine would shrink.
    assert result.ttft_ms + sum(gaps[:5]) >= 50.0 + 7 * 20.0 - 5.0, gaps
    assert result.latency_ms == pytest.approx(result.ttft_ms + sum(gaps), abs=1e-6)


def varied_rules() -> list[Rule]:
    """Answers of every shape a record can hold: reasoning, <think>, truncation, errors."""

    def cand(match: str, **fields: Any) -> Rule:
        return Rule(match=match, model="cand", **fields)

    return [
        cand("Q000", content="<think>hmm</think>The word.", reasoning_content="r" * 9),
        cand("Q001", content="The word.", reasoning="thinking it over"),
        cand("Q002", content="x" * 400),  # cut by max_tokens: finish_reason "length"
        cand("Q003", status=404, error_message="no such thing"),
        cand("Q004", content=""),
        cand("Q005", content="é ü ñ 漢字 😀 mixed"),
        cand("Q006", content="z", reasoning_content="", reasoning=""),
        Rule(model="cand", content=lambda r: f"Answer to {r.last_user_message[:4]}"),
        Rule(model="judge", content=substring_judge),
    ]


async def test_streamed_and_whole_records_are_identical_but_for_timings(tmp_path: Path) -> None:
    dataset = rows_file(tmp_path / "rows.jsonl", 10)
    # max_tokens is the window less the prompt's estimate (about 50 tokens here): a window
    # of 120 leaves row 2 too little room for its 100 tokens.
    models = [ModelSpec("cand", max_model_len=120), ModelSpec("judge", max_model_len=8192)]
    async with LLMDouble(models=models, rules=varied_rules(), token_s=0.001) as double:
        for name, stream in (("streamed", True), ("whole", False)):
            config = CandidateConfig(double.url, "cand", concurrency=4, stream=stream, retry=FAST)
            await generate(dataset, tmp_path / name, config)
            await judge(tmp_path / name, tmp_path / name, JudgeConfig(double.url, "judge"))
    streamed, whole = records(tmp_path / "streamed"), records(tmp_path / "whole")
    assert len(streamed) == len(whole) == 10
    for a, b in zip(streamed, whole, strict=True):
        assert set(a) == set(b)
        assert {k: v for k, v in a.items() if k not in TIMING} == {
            k: v for k, v in b.items() if k not in TIMING
        }
    by_row = {r["row_index"]: r for r in streamed}
    assert by_row[0]["reasoning_content"] == "r" * 9
    assert by_row[0]["content"] == "<think>hmm</think>The word."
    assert by_row[1]["reasoning"] == "thinking it over"
    assert by_row[2]["finish_reason"] == "length"
    assert by_row[2]["output_tokens"] == by_row[2]["max_tokens"] < 100
    assert by_row[3]["error"]["kind"] == "candidate_http_error"
    assert by_row[4]["content"] == ""
    assert (by_row[6]["reasoning_content"], by_row[6]["reasoning"]) == ("", "")
    assert all(r["streamed"] for r in streamed if r["error"] is None)
    assert not any(r["streamed"] for r in whole)
    assert by_row[3]["streamed"] is None and by_row[3]["ttft_ms"] is None
    summaries = [
        json.loads((tmp_path / name / "summary.json").read_text()) for name in ("streamed", "whole")
    ]
    assert summaries[0]["scores"] == summaries[1]["scores"]
    assert (summaries[0]["serving"]["streamed"], summaries[1]["serving"]["streamed"]) == (
        True,
        False,
    )
    assert summaries[1]["serving"]["ttft_ms"]["p50"] is None


@pytest.mark.parametrize("mode", ["refuse", "ignore"])
async def test_servers_that_do_not_stream_answer_every_row(tmp_path: Path, mode: str) -> None:
    dataset = rows_file(tmp_path / "rows.jsonl", 24)
    async with LLMDouble(
        models=[ModelSpec("cand")], rules=[Rule(content="W")], stream_mode=mode
    ) as double:
        outcome = await generate(
            dataset, tmp_path / "out", CandidateConfig(double.url, "cand", concurrency=4)
        )
        asked_to_stream = sum(bool(r.body.get("stream")) for r in double.requests)
        refused = sum(r.status == 400 for r in double.requests)
    stored = records(tmp_path / "out")
    assert (outcome.sent, outcome.errors) == (24, 0)
    assert [r["content"] for r in stored] == ["W"] * 24
    assert {(r["streamed"], r["attempts"], r["output_tokens"]) for r in stored} == {(False, 1, 1)}
    assert serving(tmp_path / "out")["streamed"] is False
    if mode == "refuse":
        # Once refused, the client stops asking: only the requests already on their way
        # (at most one per worker) were streamed and refused, each asked again whole.
        assert 1 <= asked_to_stream == refused <= 4
        assert len(double.requests) == 24 + refused
    else:
        assert asked_to_stream == 24 and refused == 0


async def test_context_length_shrink_and_retries_while_streaming(tmp_path: Path) -> None:
    dataset = rows_file(tmp_path / "rows.jsonl", 3)

    def flaky(request: ChatRequest) -> bool:
        return "Q001" in request.last_user_message

    async with LLMDouble(
        models=[ModelSpec("cand", max_model_len=1000, report_max_model_len=False)],
        rules=[Rule(match=flaky, status=503, times=2), Rule(content="W")],
    ) as double:
        # The client believes the window is 4,000 tokens: the server refuses, it shrinks.
        config = CandidateConfig(double.url, "cand", context_window=4000, retry=FAST)
        await generate(dataset, tmp_path / "out", config)
        streamed = [bool(r.body.get("stream")) for r in double.requests]
    stored = records(tmp_path / "out")
    assert [r["content"] for r in stored] == ["W"] * 3
    assert all(r["streamed"] for r in stored)
    assert all(r["max_tokens"] < 1000 for r in stored)
    assert all(streamed)
    assert stored[1]["attempts"] >= 3  # two 503s retried


async def test_streamed_error_bodies_are_redacted(tmp_path: Path) -> None:
    dataset = rows_file(tmp_path / "rows.jsonl", 2)
    key = "sk-redaction-key-5551234"
    async with LLMDouble(
        models=[ModelSpec("cand")],
        rules=[Rule(match="Q001", status=400, error_message="rejected"), Rule(content="W")],
        api_key=key,
        echo_headers=True,
    ) as double:
        config = CandidateConfig(double.url, "cand", api_key=key)
        await generate(dataset, tmp_path / "out", config)
        assert any(key in json.dumps(r.response) for r in double.requests if r.status == 400)
        assert all(r.body.get("stream") for r in double.requests)
    text = (tmp_path / "out" / "generations.jsonl").read_text()
    assert key not in text
    assert "[REDACTED]" in records(tmp_path / "out")[1]["error"]["message"]
