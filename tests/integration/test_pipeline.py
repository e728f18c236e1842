"""The two-phase pipeline end to end over real HTTP against the OpenAI-compatible double."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kyai.datasets import load_dataset
from kyai.evaluation import (
    CandidateConfig,
    JudgeConfig,
    RetryPolicy,
    RunDirectoryError,
    generate,
    judge,
)
from kyai_testing import LLMDouble, ModelSpec, Rule, count_prompt_tokens, substring_judge

FAST = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.01)
GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Compare with the ground truth. Return JSON {"score": 0..1, "reasoning": "..."}.'

# (instruction, ground truth, expected score under the KYAI rules, expected error kind)
ROWS: list[tuple[str, str, float, str | None]] = [
    ("Q01 capital of France?", "Paris", 1.0, None),
    ("Q02 what is 2+2?", "4", 0.0, None),  # wrong answer: the judge scores 0
    ("Q03 capital of Italy? (thinks aloud)", "Rome", 1.0, None),
    ("Q04 capital of Germany? (reasoning field)", "Berlin", 1.0, None),
    ("Q05 capital of Spain? (transient 503s)", "Madrid", 1.0, None),
    ("Q06 permanent 500", "anything", 0.0, "candidate_http_error"),
    ("Q07 overflow " + "lorem ipsum " * 1500, "x", 0.0, "candidate_context_overflow"),
    ("Q08 judge rambles", "Lisbon", 0.0, "judge_unparseable"),
    ("Q09 judge null", "Vienna", 0.0, "judge_score_missing"),
    ("Q10 judge out of range", "Prague", 0.0, "judge_score_out_of_range"),
    ("Q11 judge partial", "Warsaw", 0.5, None),
    ("Q12 judge always 500", "Dublin", 0.0, "judge_http_error"),
    ("Q13 judge fenced", "Oslo", 1.0, None),
    ("Q14 capital of Greece? (newer vLLM reasoning field)", "Athens", 1.0, None),
    ("Q15 dropped connections", "Bern", 1.0, None),
]


def candidate_rules() -> list[Rule]:
    return [
        Rule(match="Q01", model="cand", content="Paris"),
        Rule(match="Q02", model="cand", content="5"),
        Rule(match="Q03", model="cand", content="<think>Milan? no, Lyon?</think>\nRome"),
        Rule(match="Q04", model="cand", content="Berlin", reasoning_content="SECRET-CHAIN"),
        Rule(match="Q05", model="cand", status=503, times=2, content="Madrid"),
        Rule(match="Q06", model="cand", status=500),
        Rule(match="Q08", model="cand", content="Lisbon"),
        Rule(match="Q09", model="cand", content="Vienna"),
        Rule(match="Q10", model="cand", content="Prague"),
        Rule(match="Q11", model="cand", content="Warsaw-ish"),
        Rule(match="Q12", model="cand", content="Dublin"),
        Rule(match="Q13", model="cand", content="Oslo"),
        Rule(match="Q14", model="cand", content="Athens", reasoning="SECRET-TWO"),
        Rule(match="Q15", model="cand", drop_connection=True, times=1, content="Bern"),
        Rule(model="cand", content="no rule matched"),
    ]


def judge_rules() -> list[Rule]:
    return [
        Rule(match="Q08", model="judge", content="Looks right to me, full marks."),
        Rule(match="Q09", model="judge", content='{"score": null, "reasoning": "unsure"}'),
        Rule(match="Q10", model="judge", content='{"score": 7, "reasoning": "7/10"}'),
        Rule(match="Q11", model="judge", content='{"score": 0.5, "reasoning": "partial"}'),
        Rule(match="Q12", model="judge", status=500),
        Rule(
            match="Q13",
            model="judge",
            content='Verdict:\n```json\n{"score": 1.0, "reasoning": "same"}\n```',
        ),
        Rule(model="judge", content=substring_judge),
    ]


def write_dataset(tmp_path: Path) -> Path:
    path = tmp_path / "mixed.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for number, (instruction, truth, _, _) in enumerate(ROWS, start=1):
            handle.write(
                json.dumps(
                    {
                        "instruction": instruction,
                        "ground_truth_response": truth,
                        "external_row_id": f"r{number}",
                    }
                )
                + "\n"
            )
    return path


def make_double(**kwargs: Any) -> LLMDouble:
    return LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[*candidate_rules(), *judge_rules()],
        **kwargs,
    )


async def run_both(double: LLMDouble, tmp_path: Path, out: Path) -> dict[str, Any]:
    dataset = load_dataset(
        str(write_dataset(tmp_path)), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT
    )
    await generate(dataset, out, CandidateConfig(double.url, "cand", retry=FAST, concurrency=4))
    return await judge(out, out, JudgeConfig(double.url, "judge", retry=FAST, concurrency=4))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


async def test_kyai_rules_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    async with make_double() as double:
        summary = await run_both(double, tmp_path, out)
        requests = list(double.requests)

    expected = sum(score for _, _, score, _ in ROWS) / len(ROWS)
    assert summary["avg_score"] == pytest.approx(expected)
    assert summary["count"] == len(ROWS)
    assert summary["scores"] == [score for _, _, score, _ in ROWS]
    kinds: dict[str, int] = {}
    for *_, kind in ROWS:
        if kind:
            kinds[kind] = kinds.get(kind, 0) + 1
    assert summary["errors"] == kinds
    assert summary["error_count"] == sum(kinds.values())
    assert summary["candidate_model"] == "cand" and summary["judge_model"] == "judge"
    assert summary["context_window"] == 4096 and summary["context_window_source"] == "server"
    assert len(summary["comparison_key"]) == 16

    generations = {record["row_id"]: record for record in read_jsonl(out / "generations.jsonl")}
    assert len(generations) == len(ROWS)
    # Raw answers stored verbatim, reasoning included.
    assert generations["r3"]["content"] == "<think>Milan? no, Lyon?</think>\nRome"
    assert generations["r4"]["reasoning_content"] == "SECRET-CHAIN"
    assert generations["r5"]["attempts"] == 3
    assert generations["r6"]["error"]["kind"] == "candidate_http_error"
    assert generations["r6"]["error"]["status"] == 500
    assert generations["r7"]["error"]["kind"] == "candidate_context_overflow"

    judge_requests = [r for r in requests if r.model == "judge"]
    judged_text = "\n".join(r.messages[-1]["content"] for r in judge_requests)
    # The judge never sees reasoning, and never gets rows whose candidate failed.
    assert "Lyon" not in judged_text and "SECRET" not in judged_text
    assert generations["r14"]["reasoning"] == "SECRET-TWO"
    assert generations["r15"]["attempts"] == 2
    assert "Q06" not in judged_text and "Q07 overflow" not in judged_text
    assert all(r.messages[0] == {"role": "system", "content": JUDGE_PROMPT} for r in judge_requests)

    candidate_requests = [r for r in requests if r.model == "cand" and r.status == 200]
    for request in candidate_requests:
        assert request.messages[0] == {"role": "system", "content": GEN_PROMPT}
        # max_tokens is most of the reported window, and the request fits it.
        assert request.max_tokens is not None
        assert request.max_tokens >= 0.8 * 4096
        assert request.max_tokens + count_prompt_tokens(request.messages) <= 4096

    judgements = {record["row_id"]: record for record in read_jsonl(out / "judgements.jsonl")}
    assert judgements["r8"]["reply"] == "Looks right to me, full marks."
    assert judgements["r10"]["error"]["kind"] == "judge_score_out_of_range"


async def test_concurrency_keeps_requests_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text(
        "".join(
            json.dumps({"instruction": f"q{i}", "ground_truth_response": "OK"}) + "\n"
            for i in range(48)
        )
    )
    dataset = load_dataset(str(path), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT)
    async with LLMDouble(models=[ModelSpec("cand")], latency_s=0.15) as double:
        outcome = await generate(
            dataset, tmp_path / "out", CandidateConfig(double.url, "cand", concurrency=16)
        )
        assert double.max_in_flight >= 8
        assert double.max_in_flight <= 16
    assert outcome.sent == 48


async def test_resume_asks_only_for_missing_rows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    dataset = load_dataset(
        str(write_dataset(tmp_path)), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT
    )
    async with make_double() as double:
        await generate(dataset, out, CandidateConfig(double.url, "cand", retry=FAST))
        lines = (out / "generations.jsonl").read_text().splitlines(keepends=True)
        kept = lines[:5]
        # The process "died" while writing the sixth record: a torn line is left behind.
        (out / "generations.jsonl").write_text("".join(kept) + lines[5][:20])
        before = len(double.requests)
        outcome = await generate(dataset, out, CandidateConfig(double.url, "cand", retry=FAST))
        asked = [r for r in double.requests[before:] if r.model == "cand"]
    kept_ids = {json.loads(line)["row_id"] for line in kept}
    assert outcome.sent == len(ROWS) - 5
    asked_ids = {r.messages[-1]["content"][:3] for r in asked}
    assert not any(f"Q{int(i[1:]):02d}" in asked_ids for i in kept_ids)
    records = read_jsonl(out / "generations.jsonl")
    assert sorted(r["row_index"] for r in records) == list(range(len(ROWS)))


async def test_rejudge_never_calls_the_candidate(tmp_path: Path) -> None:
    out = tmp_path / "run"
    async with make_double() as double:
        first = await run_both(double, tmp_path, out)
        before = len(double.requests)
        second = await judge(
            out, tmp_path / "rejudge", JudgeConfig(double.url, "judge", retry=FAST)
        )
        third = await judge(
            out,
            tmp_path / "other-judge",
            JudgeConfig(double.url, "judge", prompt="A stricter prompt.", retry=FAST),
        )
        later = double.requests[before:]
    assert later and all(r.model == "judge" for r in later)
    assert second["avg_score"] == first["avg_score"]
    assert second["comparison_key"] == first["comparison_key"]
    assert third["comparison_key"] != first["comparison_key"]
    # Judging the same directory again with another judge is refused, not mixed.
    async with make_double() as double:
        with pytest.raises(RunDirectoryError, match="another judge"):
            await judge(out, out, JudgeConfig(double.url, "judge", prompt="other", retry=FAST))


async def test_generation_refuses_to_mix_runs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    dataset = load_dataset(
        str(write_dataset(tmp_path)), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT
    )
    async with make_double() as double:
        await generate(dataset, out, CandidateConfig(double.url, "cand", retry=FAST))
        other = load_dataset(
            str(write_dataset(tmp_path)), generation_prompt="Different.", judge_prompt=JUDGE_PROMPT
        )
        with pytest.raises(RunDirectoryError, match="generation prompt"):
            await generate(other, out, CandidateConfig(double.url, "cand", retry=FAST))


@pytest.mark.parametrize("style", ["vllm", "vllm_v0_10", "vllm_legacy", "sglang"])
async def test_overflow_shrinks_and_succeeds(tmp_path: Path, style: str) -> None:
    # The server reports no window, so the client assumes the default (8192) and learns the
    # real 2048 from the server's refusal.
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"instruction": "word " * 400, "ground_truth_response": "OK"}) + "\n"
    )
    dataset = load_dataset(str(path), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT)
    spec = ModelSpec("cand", max_model_len=2048, report_max_model_len=False, overflow_style=style)  # type: ignore[arg-type]
    async with LLMDouble(models=[spec]) as double:
        await generate(dataset, tmp_path / "out", CandidateConfig(double.url, "cand"))
        answered = [r for r in double.requests if r.status == 200]
    record = read_jsonl(tmp_path / "out" / "generations.jsonl")[0]
    assert record["error"] is None, record["error"]
    assert record["content"] == "OK"
    assert len(answered) == 1
    final = answered[0]
    assert final.max_tokens is not None
    assert final.max_tokens + count_prompt_tokens(final.messages) <= 2048
    # Most of what is left: exactly the rest where the server says the prompt's size, and at
    # least three quarters of it where it does not (current vLLM).
    assert final.max_tokens >= 0.75 * (2048 - count_prompt_tokens(final.messages))


async def test_llamacpp_clamps_silently_and_refuses_long_prompts(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"instruction": "short question", "ground_truth_response": "OK"})
        + "\n"
        + json.dumps({"instruction": "long " * 3000, "ground_truth_response": "OK"})
        + "\n"
    )
    dataset = load_dataset(str(path), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT)
    spec = ModelSpec(
        "cand",
        max_model_len=2048,
        report_max_model_len=False,
        overflow_style="llamacpp",
        clamp_max_tokens=True,
    )
    async with LLMDouble(models=[spec]) as double:
        outcome = await generate(dataset, tmp_path / "out", CandidateConfig(double.url, "cand"))
    assert outcome.window.source == "default"
    records = {r["row_index"]: r for r in read_jsonl(tmp_path / "out" / "generations.jsonl")}
    assert records[0]["error"] is None and records[0]["content"] == "OK"
    assert records[1]["error"]["kind"] == "candidate_context_overflow"
    assert "2048" in records[1]["error"]["message"]
    assert outcome.errors == 1


async def test_config_json_sets_the_window_when_the_server_is_silent(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"instruction": "q", "ground_truth_response": "OK"}) + "\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"max_position_embeddings": 3000}))
    dataset = load_dataset(str(path), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT)
    spec = ModelSpec("cand", max_model_len=3000, report_max_model_len=False)
    async with LLMDouble(models=[spec]) as double:
        outcome = await generate(
            dataset, tmp_path / "out", CandidateConfig(double.url, "cand", model_config_path=config)
        )
        sent = double.requests[0]
    assert (outcome.window.tokens, outcome.window.source) == (3000, "config")
    assert sent.max_tokens is not None and 2900 <= sent.max_tokens < 3000
    assert sent.status == 200


def test_context_window_hint_when_the_server_is_silent(tmp_path: Path) -> None:
    from kyai.cli import main

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"instruction": "q", "ground_truth_response": "OK"}) + "\n")
    spec = ModelSpec("cand", max_model_len=3000, report_max_model_len=False)
    with LLMDouble(models=[spec]).start_in_thread() as double:
        status = main([
            "generate", "--endpoint", double.url, "--model", "cand", "--dataset", str(path),
            "--generation-prompt", GEN_PROMPT, "--context-window", "3000",
            "--output", str(tmp_path / "out"), "--quiet",
        ])  # fmt: skip
        sent = double.requests[0]
    assert status == 0
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    assert manifest["candidate"]["context_window"] == 3000
    assert manifest["candidate"]["context_window_source"] == "hint"
    assert sent.status == 200  # no overflow round trip: the first budget fits
    assert sent.max_tokens is not None and 2900 <= sent.max_tokens < 3000
