"""Streams that real servers end early: retried, or a counted error; never an empty answer.

Over real HTTP to the LLM double: llama-cpp-python's ``interrupt_requests`` (a stream ends
with ``[DONE]`` and no ``finish_reason`` as soon as a newer request waits), and the stream
faults of servers and proxies (``[DONE]`` early, the body ended early, no ``finish_reason``
at all, vLLM's ``abort``), at concurrency 1, 2 and 8. Every row ends either with its complete
answer or as a counted ``candidate_stream_incomplete`` error scored 0; when the retries
suffice, the scores equal a clean server's.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kyai.datasets import load_dataset
from kyai.evaluation import CandidateConfig, JudgeConfig, RetryPolicy, generate, judge
from kyai.evaluation._store import answer_problem
from kyai_testing import (
    ALL_FAULT_KINDS,
    STREAM_FAULT_KINDS,
    ChatRequest,
    Faults,
    LLMDouble,
    ModelSpec,
    Rule,
    substring_judge,
)

ROWS = 24
GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Return JSON {"score": 0..1, "reasoning": "..."}.'
#: Enough retries that a 30 % fault rate cannot exhaust them (0.3 ** 16), tiny backoff.
PATIENT = RetryPolicy(max_retries=15, backoff_base_s=0.001, backoff_max_s=0.004)
#: Few retries: an interrupting server at concurrency 8 exhausts some of them.
HASTY = RetryPolicy(max_retries=2, backoff_base_s=0.001, backoff_max_s=0.002)


def candidate_answer_text(number: int) -> str:
    """Right for two rows in three, wrong for the rest; long enough to stream many tokens."""
    word = f"W{number}" if number % 3 else f"V{number}"
    return f"After some thought, the answer is {word}."


def candidate_answer(request: ChatRequest) -> str:
    return candidate_answer_text(int(request.last_user_message.split(":")[0][1:]))


def write_rows(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for number in range(ROWS):
            row = {
                "instruction": f"Q{number:03d}: name the word numbered {number}.",
                "ground_truth_response": f"W{number}",
            }
            handle.write(json.dumps(row) + "\n")
    return path


def make_double(**kwargs: Any) -> LLMDouble:
    return LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(model="cand", content=candidate_answer),
            Rule(model="judge", content=substring_judge),
        ],
        token_s=0.001,
        **kwargs,
    )


async def run(
    double: LLMDouble,
    rows: Path,
    out: Path,
    *,
    concurrency: int,
    retry: RetryPolicy = PATIENT,
    stream: bool = True,
) -> dict[str, Any]:
    dataset = load_dataset(str(rows), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT)
    config = CandidateConfig(
        double.url, "cand", retry=retry, concurrency=concurrency, stream=stream, timeout_s=5.0
    )
    await generate(dataset, out, config)
    return await judge(out, out, JudgeConfig(double.url, "judge", concurrency=concurrency))


def generations(out: Path) -> list[dict[str, Any]]:
    lines = (out / "generations.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def assert_complete_or_counted(out: Path, summary: dict[str, Any]) -> Counter[str]:
    """Every row holds its whole answer or a counted error; the errors' kinds."""
    records = generations(out)
    assert [record["row_index"] for record in records] == list(range(ROWS))
    kinds: Counter[str] = Counter()
    for record in records:
        assert answer_problem(record) is None, record
        if record["error"] is not None:
            kinds[record["error"]["kind"]] += 1
            assert record["content"] is None
            continue
        number = record["row_index"]
        expected = candidate_answer_text(number)
        assert (record["content"], record["finish_reason"]) == (expected, "stop"), record
    assert summary["error_count"] == sum(kinds.values())
    assert summary["errors"] == dict(sorted(kinds.items()))
    scores = summary["scores"]
    for record in records:
        if record["error"] is not None:
            assert scores[record["row_index"]] == 0.0
    return kinds


@pytest.fixture
async def clean_scores(tmp_path: Path) -> list[float]:
    async with make_double() as double:
        summary = await run(
            double, write_rows(tmp_path / "rows.jsonl"), tmp_path / "clean", concurrency=4
        )
    assert summary["error_count"] == 0
    assert 0.4 < summary["avg_score"] < 0.9
    return list(summary["scores"])


@pytest.mark.parametrize("concurrency", [1, 2, 8])
async def test_streams_cut_every_way_are_retried_to_the_clean_scores(
    tmp_path: Path, clean_scores: list[float], concurrency: int
) -> None:
    faults = Faults(
        rate=0.3,
        kinds=(*STREAM_FAULT_KINDS, "short_body"),
        seed=concurrency,
        models=frozenset({"cand"}),
    )
    async with make_double(faults=faults) as double:
        summary = await run(
            double, tmp_path / "rows.jsonl", tmp_path / "cut", concurrency=concurrency
        )
        injected = Counter(record.fault for record in double.requests if record.model == "cand")
    assert sum(injected[kind] for kind in STREAM_FAULT_KINDS) >= 4, injected
    assert assert_complete_or_counted(tmp_path / "cut", summary) == Counter()
    assert summary["scores"] == clean_scores
    assert max(record["attempts"] for record in generations(tmp_path / "cut")) > 1


@pytest.mark.parametrize("concurrency", [1, 2, 8])
async def test_a_server_that_interrupts_streams_never_yields_an_empty_answer(
    tmp_path: Path, clean_scores: list[float], concurrency: int
) -> None:
    async with make_double(interrupt_requests=True) as double:
        summary = await run(
            double, tmp_path / "rows.jsonl", tmp_path / "cut", concurrency=concurrency, retry=HASTY
        )
        interrupted = double.interrupted
    kinds = assert_complete_or_counted(tmp_path / "cut", summary)
    assert set(kinds) <= {"candidate_stream_incomplete"}
    if concurrency == 1:
        # One request at a time: nothing to interrupt, the clean scores.
        assert interrupted == 0
        assert summary["scores"] == clean_scores
    else:
        assert interrupted > 0  # the server did interrupt streams
    if kinds:
        record = next(r for r in generations(tmp_path / "cut") if r["error"] is not None)
        message = record["error"]["message"]
        assert "data: [DONE] came before any chunk said how the answer finished" in message
        assert "--concurrency 1 or --no-stream" in message
        assert record["attempts"] == HASTY.max_retries + 1
    # Rows that kept their answer scored as on a clean server.
    for index, score in enumerate(summary["scores"]):
        if summary["scores"][index] and index < len(clean_scores):
            assert score == clean_scores[index]


async def test_the_advice_works_whole_answers_from_an_interrupting_server(
    tmp_path: Path, clean_scores: list[float]
) -> None:
    async with make_double(interrupt_requests=True) as double:
        summary = await run(
            double, tmp_path / "rows.jsonl", tmp_path / "whole", concurrency=8, stream=False
        )
        assert double.interrupted == 0
        assert double.max_in_flight == 8  # asked at once, served one at a time
    assert summary["error_count"] == 0
    assert summary["scores"] == clean_scores


async def test_no_fault_of_any_kind_stores_a_row_without_an_answer_or_an_error(
    tmp_path: Path,
) -> None:
    """Every fault the double knows, often, with few retries: only sound records are stored."""
    kinds = tuple(kind for kind in ALL_FAULT_KINDS if kind != "stall")
    faults = Faults(rate=0.6, kinds=kinds, seed=3, models=frozenset({"cand"}))
    rows = write_rows(tmp_path / "rows.jsonl")
    for stream in (True, False):
        out = tmp_path / f"stream-{stream}"
        async with make_double(faults=faults) as double:
            summary = await run(double, rows, out, concurrency=8, retry=HASTY, stream=stream)
        counted = assert_complete_or_counted(out, summary)
        assert counted, "with 60 % faults and 2 retries some rows must fail"


async def test_an_unsound_stored_row_is_counted_by_the_judge_and_asked_again(
    tmp_path: Path, clean_scores: list[float]
) -> None:
    """A directory written before the fix: a cut stream stored as a null answer."""
    out = tmp_path / "old"
    async with make_double() as double:
        await run(double, tmp_path / "rows.jsonl", out, concurrency=4)
        records = generations(out)
        records[5].update(content=None, finish_reason=None, output_tokens=0)
        (out / "generations.jsonl").write_text(
            "".join(json.dumps(record) + "\n" for record in records), encoding="utf-8"
        )
        summary = await judge(out, tmp_path / "judged", JudgeConfig(double.url, "judge"))
        assert summary["errors"] == {"candidate_no_answer": 1}
        assert summary["scores"][5] == 0.0
        asked = len(double.requests_for("cand"))
        dataset = load_dataset(
            str(tmp_path / "rows.jsonl"), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT
        )
        await generate(dataset, out, CandidateConfig(double.url, "cand", retry=PATIENT))
        assert len(double.requests_for("cand")) == asked + 1  # that row alone, again
        summary = await judge(out, tmp_path / "again", JudgeConfig(double.url, "judge"))
    assert summary["error_count"] == 0
    assert summary["scores"] == clean_scores


async def test_the_writer_refuses_a_record_without_an_answer_or_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard where records are written: a path that built an unsound record stops the run."""
    from kyai.evaluation import _generate
    from kyai.evaluation._store import UnsoundRecordError

    answer = _generate._answer

    async def unsound(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], Any]:
        record, failure = await answer(*args, **kwargs)
        if record["row_index"] == 2:
            record.update(content=None, finish_reason=None)
        return record, failure

    monkeypatch.setattr(_generate, "_answer", unsound)
    dataset = load_dataset(
        str(write_rows(tmp_path / "rows.jsonl")), generation_prompt=GEN_PROMPT, judge_prompt=None
    )
    async with make_double() as double:
        with pytest.raises(UnsoundRecordError, match="row 2: it holds neither an answer"):
            await generate(
                dataset, tmp_path / "out", CandidateConfig(double.url, "cand", concurrency=1)
            )
    assert [record["row_index"] for record in generations(tmp_path / "out")] == [0, 1]
