"""Guard (issue 14): the built-in deterministic graders score the judge-facing copy of an
answer, never the raw text with its chain of thought. An answer cut off while thinking
(``<think>The answer is C`` with no closing tag) has no final answer and scores 0, even when
the letter or number inside the thinking is the right one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai.cli import main
from kyai.datasets import load_dataset
from kyai_testing import ChatRequest, LLMDouble, ModelSpec, Rule

NATIVE = Path(__file__).parent.parent / "unit/datasets/data/native"
CASES = {
    # dataset: (native file, how the right answer is written)
    "gpqa-diamond": (NATIVE / "gpqa_diamond.csv", "The answer is {}"),
    "math-500": (NATIVE / "math500_test.jsonl", "Final answer: {}"),
}


def answers(dataset: str) -> dict[str, str]:
    """Each row's instruction → its right answer written as a model would."""
    native, pattern = CASES[dataset]
    rows = load_dataset(dataset, dataset_file=native).rows
    return {row.instruction: pattern.format(row.ground_truth_response) for row in rows}


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    right = {**answers("gpqa-diamond"), **answers("math-500")}

    def cut_off(request: ChatRequest) -> str:  # thinking never closed: no answer given
        return "<think>" + right[request.last_user_message]

    def closed(request: ChatRequest) -> str:  # the same words after the thinking
        return "<think>Let me see.</think>" + right[request.last_user_message]

    server = LLMDouble(
        models=[ModelSpec("cut"), ModelSpec("closed")],
        rules=[Rule(model="cut", content=cut_off), Rule(model="closed", content=closed)],
    )
    with server.start_in_thread() as running:
        yield running


def run_builtin(double: LLMDouble, dataset: str, model: str, out: Path) -> dict[str, Any]:
    status = main(
        [
            "run",
            "--endpoint",
            double.url,
            "--model",
            model,
            "--dataset",
            dataset,
            "--dataset-file",
            str(CASES[dataset][0]),
            "--judge",
            "builtin",
            "--output",
            str(out),
            "--quiet",
        ]
    )
    assert status == 0
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


@pytest.mark.parametrize("dataset", sorted(CASES))
def test_an_answer_cut_off_while_thinking_scores_zero(
    double: LLMDouble, dataset: str, tmp_path: Path
) -> None:
    closed = run_builtin(double, dataset, "closed", tmp_path / "closed")
    assert closed["judge_type"] == "builtin"
    rows = closed["count"]
    assert rows >= 2
    # Control: the right answer after a closed thinking block scores 1 on every row.
    assert closed["scores"] == [1.0] * rows, closed

    cut = run_builtin(double, dataset, "cut", tmp_path / "cut")
    assert cut["count"] == rows
    assert cut["scores"] == [0.0] * rows, cut
    assert cut["avg_score"] == 0.0
    # The raw answer is stored verbatim, thinking included.
    stored = [
        json.loads(line)
        for line in (tmp_path / "cut" / "generations.jsonl").read_text().splitlines()
    ]
    assert all(record["content"].startswith("<think>") for record in stored)
