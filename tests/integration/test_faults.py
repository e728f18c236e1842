"""Scores under faults equal the fault-free scores; judging twice gives byte-equal files.

Every fault kind the double injects (429, 500, 503, closed and reset connections, 3 s stalls
against a short request timeout, bodies shorter than their Content-Length, complete 200s
whose JSON is cut) hits 20 % of the candidate's and the judge's requests over real HTTP.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kyai.datasets import load_dataset
from kyai.evaluation import CandidateConfig, JudgeConfig, RetryPolicy, generate, judge
from kyai_testing import (
    FAULT_KINDS,
    ChatRequest,
    Faults,
    LLMDouble,
    ModelSpec,
    Rule,
    substring_judge,
)

ROWS = 200
# Enough retries that 20 % faults cannot exhaust them (0.2 ** 13 per request), tiny backoff.
RETRY = RetryPolicy(max_retries=12, backoff_base_s=0.001, backoff_max_s=0.005)
TIMEOUT_S = 0.5  # the stall fault waits 3 s: always a time-out
GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Return JSON {"score": 0..1, "reasoning": "..."}.'


def candidate_answer(request: ChatRequest) -> str:
    """Right for two rows in three, wrong for the rest (a mixed score)."""
    number = int(re.search(r"Q(\d+)", request.last_user_message).group(1))  # type: ignore[union-attr]
    return f"The answer is W{number}." if number % 3 else f"It is nothing like W{number}."


def write_rows(path: Path, rows: int) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for number in range(rows):
            row = {
                "instruction": f"Q{number:03d}: name the word numbered {number}.",
                "ground_truth_response": f"W{number}" if number % 3 else f"V{number}",
            }
            handle.write(json.dumps(row) + "\n")
    return path


def make_double(faults: Faults | None = None, **kwargs: Any) -> LLMDouble:
    return LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(model="cand", content=candidate_answer),
            Rule(model="judge", content=substring_judge),
        ],
        faults=faults,
        **kwargs,
    )


async def generate_and_judge(
    double: LLMDouble, dataset_path: Path, out: Path, *, concurrency: int = 16
) -> dict[str, Any]:
    dataset = load_dataset(
        str(dataset_path), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT
    )
    await generate(
        dataset,
        out,
        CandidateConfig(
            double.url, "cand", retry=RETRY, timeout_s=TIMEOUT_S, concurrency=concurrency
        ),
    )
    return await judge(
        out,
        out,
        JudgeConfig(double.url, "judge", retry=RETRY, timeout_s=TIMEOUT_S, concurrency=concurrency),
    )


def per_row(out: Path) -> list[tuple[int, float, Any]]:
    lines = (out / "judgements.jsonl").read_text(encoding="utf-8").splitlines()
    return [
        (record["row_index"], record["score"], record["error"]) for record in map(json.loads, lines)
    ]


async def test_faults_on_candidate_and_judge_leave_every_score_unchanged(tmp_path: Path) -> None:
    dataset = write_rows(tmp_path / "rows.jsonl", ROWS)
    async with make_double() as clean:
        expected = await generate_and_judge(clean, dataset, tmp_path / "clean")
    faults = Faults(rate=0.2, seed=8, stall_s=3.0)
    async with make_double(faults) as flaky:
        summary = await generate_and_judge(flaky, dataset, tmp_path / "faulted")
        injected = Counter((record.model, record.fault) for record in flaky.requests)

    # Every kind hit both the candidate and the judge.
    for model in ("cand", "judge"):
        for kind in FAULT_KINDS:
            assert injected[(model, kind)] > 0, (model, kind, injected)
    assert 0.4 < expected["avg_score"] < 0.9  # a mixed score, not all 0 or all 1
    assert summary["scores"] == expected["scores"]
    assert summary["avg_score"] == expected["avg_score"]
    assert summary["error_count"] == 0
    assert per_row(tmp_path / "faulted") == per_row(tmp_path / "clean")
    generations = [
        json.loads(line)
        for line in (tmp_path / "faulted" / "generations.jsonl").read_text().splitlines()
    ]
    assert [g["row_index"] for g in generations] == list(range(ROWS))  # row order
    assert max(g["attempts"] for g in generations) > 1  # faults were met and retried
    assert all(g["streamed"] for g in generations)  # the candidate's answers were streamed


@pytest.mark.parametrize("kind", FAULT_KINDS)
async def test_each_fault_kind_does_what_it_says(kind: str) -> None:
    """A raw aiohttp client sees each fault as described (rate 1: every request)."""
    body = {"model": "cand", "messages": [{"role": "user", "content": "Q001"}]}
    async with make_double(Faults(rate=1.0, kinds=(kind,), stall_s=1.0)) as double:
        timeout = aiohttp.ClientTimeout(total=0.3)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            outcome: str
            try:
                async with session.post(f"{double.base_url}/chat/completions", json=body) as r:
                    raw = await r.read()
                    try:
                        json.loads(raw)
                        outcome = f"status {r.status}"
                    except ValueError:
                        outcome = f"status {r.status} cut"
            except TimeoutError:
                outcome = "timeout"
            except aiohttp.ClientPayloadError:
                outcome = "short body"
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                outcome = "disconnected"
    expected = {
        "429": "status 429",
        "500": "status 500",
        "503": "status 503",
        "close": "disconnected",
        "reset": "disconnected",
        "stall": "timeout",
        "short_body": "short body",
        "cut_json": "status 200 cut",
    }
    assert outcome == expected[kind]
    assert [record.fault for record in double.requests] == [kind]


_VOLATILE = re.compile(
    r'"(started_at|finished_at|latency_ms|elapsed_ms|wall_seconds)": ?("[^"]*"|[0-9.e+-]+|null)'
)


def stable(path: Path) -> bytes:
    """The file's bytes with timestamps and latencies blanked out."""
    return _VOLATILE.sub(r'"\1":-', path.read_text(encoding="utf-8")).encode("utf-8")


async def test_judging_twice_gives_byte_identical_results(tmp_path: Path) -> None:
    dataset_path = write_rows(tmp_path / "rows.jsonl", 60)
    dataset = load_dataset(
        str(dataset_path), generation_prompt=GEN_PROMPT, judge_prompt=JUDGE_PROMPT
    )
    gen = tmp_path / "gen"
    rules = [
        Rule(model="cand", content=candidate_answer),
        # Uneven judge latencies so that completion order differs from row order.
        Rule(
            match=lambda r: "Q00" in r.last_user_message,
            model="judge",
            delay_s=0.05,
            content=substring_judge,
        ),
        Rule(match="Q01", model="judge", delay_s=0.02, content=substring_judge),
        Rule(model="judge", content=substring_judge),
    ]
    async with LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")], rules=rules, latency_s=0.001
    ) as double:
        await generate(dataset, gen, CandidateConfig(double.url, "cand", concurrency=8))
        for name in ("first", "second"):
            await judge(gen, tmp_path / name, JudgeConfig(double.url, "judge", concurrency=8))
    first, second = tmp_path / "first", tmp_path / "second"
    lines = (first / "judgements.jsonl").read_text().splitlines()
    assert [json.loads(line)["row_index"] for line in lines] == list(range(60))
    assert stable(first / "judgements.jsonl") == stable(second / "judgements.jsonl")
    assert stable(first / "summary.json") == stable(second / "summary.json")
    assert (first / "judgements.jsonl").read_bytes() != (second / "judgements.jsonl").read_bytes()


def test_command_line_builds_the_faults() -> None:
    from kyai_testing.llm_double import _parser, build_double

    args = _parser().parse_args(
        [
            "--fault-rate",
            "0.3",
            "--fault-kinds",
            "429,cut_json",
            "--fault-seed",
            "5",
            "--echo-headers",
        ]
    )
    double = build_double(args)
    assert double.faults == Faults(rate=0.3, kinds=("429", "cut_json"), seed=5, stall_s=3.0)
    assert double.echo_headers
    assert build_double(_parser().parse_args([])).faults is None


@pytest.mark.parametrize(
    "options",
    [{"rate": 1.5}, {"rate": 0.1, "kinds": ("teapot",)}, {"rate": 0.1, "stall_s": -1.0}],
)
def test_bad_fault_settings_are_refused(options: dict[str, Any]) -> None:
    from kyai_testing import DoubleConfigError

    with pytest.raises(DoubleConfigError):
        Faults(**options)
