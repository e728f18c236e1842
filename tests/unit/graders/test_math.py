from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from kyai.datasets import Row
from kyai.graders import _math
from kyai.graders._math import MathGrader, extract_final_answer
from kyai.graders._types import GradeInput, GradingContext, GradingOutcome

pytest.importorskip("math_verify")

CONTEXT = GradingContext(dataset="math-500", candidate_model="m", run_id="run-1")
# Wall-clock bounds are safety nets against a hang only (>= 10x the expected time, so that a
# loaded machine or mutmut's call recording cannot trip them); the timings themselves are
# figures of bench/bench_graders.py.
HANG_SAFETY_NET_SECONDS = 60.0
HANG_TIMEOUT_SECONDS = 180  # pytest-timeout for the tests that use the net above
HOSTILE_INPUT_SAFETY_NET_SECONDS = 30.0


def _input(gold: str, response: str, *, index: int = 0, failed: bool = False) -> GradeInput:
    row = Row(
        index=index,
        row_id=f"test/algebra/{index}.json",
        instruction="Compute it.",
        ground_truth_response=gold,
        metadata={"subject": "Algebra", "level": 3, "solution": "..."},
    )
    return GradeInput(row=row, response=response, candidate_failed=failed)


# (gold, candidate response, equivalent?) — all graded in one run (one worker start-up).
EQUIVALENCE = [
    # the examples
    ("\\frac{1}{2}", "Final answer: 0.5", True),
    ("0.5", "Final answer: \\frac{1}{2}", True),
    ("2\\sqrt{2}", "Final answer: \\sqrt{8}", True),
    ("\\frac{1}{3}", "Final answer: 0.33", False),
    ("1/3", "Final answer: 0.33", False),
    ("\\frac{1}{3}", "Final answer: 1/3", True),
    # fractions, radicals, mixed forms
    ("\\dfrac{14}{3}", "Final answer: 4\\frac{2}{3}", True),
    ("\\frac{\\sqrt{2}}{2}", "Final answer: $\\frac{1}{\\sqrt{2}}$", True),
    ("\\frac{9}{4}", "Final answer: 9/4", True),
    ("\\frac{9}{4}", "Final answer: 9/5", False),
    # intervals
    ("[-2,7]", "Final answer: $[-2, 7]$", True),
    ("[-2,7]", "Final answer: $(-2, 7)$", False),
    ("(-\\infty, 3)", "Final answer: $(-\\infty, 3)$", True),
    # sets and tuples
    ("\\{1,2,3\\}", "Final answer: $\\{3, 2, 1\\}$", True),
    ("1,2,3", "Final answer: 3, 2, 1", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "Final answer: $(3, \\pi/2)$", True),
    ("(3,4)", "Final answer: (4,3)", False),
    # \text{} units and words
    ("10\\text{ cm}", "Final answer: 10", True),
    ("10", "Final answer: $10 \\text{ cm}$", True),
    ("\\text{Evelyn}", "Final answer: Evelyn", True),
    ("\\text{Evelyn}", "Final answer: Bob", False),
    # degrees
    ("30^\\circ", "Final answer: 30", True),
    ("30", "Final answer: $30^{\\circ}$", True),
    ("30^\\circ", "Final answer: 60^\\circ", False),
    # negative numbers
    ("-5", "Final answer: -5", True),
    ("-5", "Final answer: 5", False),
    ("6 - 5i", "Final answer: $6-5i$", True),
    # other extraction paths
    ("9", "Reasoning first.\n\nSo the total is $\\boxed{9}$.", True),
    ("\\frac{1}{2}", "We get \\boxed{\\frac{1}{2}} after simplifying.", True),
    ("42", "The answer is 42.", True),
    ("42", "**Final Answer:** $\\boxed{41}$", False),
    ("x^2+2x+1", "Final answer: $(x+1)^2$", True),
    ("2, 3", "Final answer: $x = 2$ or $x = 3$", True),
    ("\\frac{3}{4}", "Final answer: \\( \\frac{3}{4} \\)", True),
    ("3", "final answer: **3**", True),
    ("5", "Final answer: 5 (since x = 5)", True),
    # money: a lone dollar sign is currency, not a math delimiter
    ("\\$7", "Final answer: $7", True),
    ("7", "Final answer: \\$7.00", True),
    ("\\$32,\\!348", "Final answer: 32348", True),
    # a full solution as the reference: its final answer is used
    ("Add them: $2+2=4$, so the answer is $\\boxed{4}$.", "Final answer: 4", True),
]


@pytest.fixture(scope="module")
def equivalence_outcome() -> GradingOutcome:
    inputs = [_input(g, r, index=i) for i, (g, r, _) in enumerate(EQUIVALENCE)]
    context = GradingContext(dataset="math-500", candidate_model="m", run_id="r", concurrency=2)
    return asyncio.run(MathGrader().grade(inputs, context))


@pytest.mark.parametrize(
    ("position", "gold", "response", "equivalent"),
    [(i, g, r, e) for i, (g, r, e) in enumerate(EQUIVALENCE)],
)
def test_equivalence_table(
    equivalence_outcome: GradingOutcome,
    position: int,
    gold: str,
    response: str,
    equivalent: bool,
) -> None:
    grade = equivalence_outcome.grades[position]
    assert grade.error_kind is None, grade
    assert grade.score == (1.0 if equivalent else 0.0), grade
    assert grade.scores == {"accuracy": grade.score}


def test_equivalence_run_metrics(equivalence_outcome: GradingOutcome) -> None:
    expected = sum(e for _, _, e in EQUIVALENCE) / len(EQUIVALENCE)
    assert equivalence_outcome.metrics["accuracy"] == pytest.approx(expected)
    assert equivalence_outcome.metrics["no_answer_rate"] == 0.0


@pytest.mark.parametrize(
    ("response", "answer", "rule"),
    [
        ("Final answer: 0.5", "0.5", "final_answer"),
        ("final answer is $\\frac{1}{2}$.", "\\frac{1}{2}", "final_answer"),
        ("**Final Answer:** $\\boxed{7}$", "7", "final_answer"),
        ("Final answer = x + 1", "x + 1", "final_answer"),
        ("Final answer:\n\n$$\n\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}\n$$", None, "final_answer"),
        ("The final answer above was rough.\nFinal answer: 3", "3", "final_answer"),
        ("Final answer: 2\nFinal answer: 3", "3", "final_answer"),
        ("so $\\boxed{\\frac{a}{b}}$ and later \\boxed{\\sqrt{\\frac{1}{2}}}", None, "boxed"),
        ("\\fbox{12}", "12", "boxed"),
        ("The result is 12 apples.", "The result is 12 apples.", "last_result"),
        ("", None, None),
        ("   \n ", None, None),
    ],
)
def test_extracts_the_final_answer(response: str, answer: str | None, rule: str | None) -> None:
    found = extract_final_answer(response)
    assert found.rule == rule
    if answer is not None:
        assert found.answer == answer
    elif rule == "final_answer":
        assert found.answer is not None and "pmatrix" in found.answer
    elif rule == "boxed":
        assert found.answer == "\\sqrt{\\frac{1}{2}}"  # the last box, nested braces kept
    else:
        assert found.answer is None


async def test_no_answer_scores_zero() -> None:
    outcome = await MathGrader().grade(
        [
            _input("9", "", index=0),
            _input("9", "I could not solve this one.", index=1),
            _input("9", "Final answer: ", index=2),
        ],
        CONTEXT,
    )
    for grade in outcome.grades:
        assert grade.score == 0.0
        assert grade.error_kind == "grader_no_answer", grade
    assert outcome.metrics["no_answer_rate"] == 1.0


async def test_candidate_failure_and_missing_reference_need_no_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def no_worker(**_: object) -> None:
        raise AssertionError("no worker should start")

    monkeypatch.setattr(_math._Worker, "start", no_worker)
    outcome = await MathGrader().grade(
        [_input("9", "Final answer: 9", failed=True), _input("  ", "Final answer: 9", index=1)],
        CONTEXT,
    )
    assert [g.error_kind for g in outcome.grades] == ["candidate_error", "grader_invalid_row"]
    assert [g.score for g in outcome.grades] == [0.0, 0.0]


@pytest.mark.timeout(HANG_TIMEOUT_SECONDS)
async def test_runaway_comparison_is_interrupted_and_the_run_goes_on() -> None:
    grader = MathGrader(timeout_seconds=1.0)
    context = GradingContext(dataset="math-500", candidate_model="m", run_id="r", concurrency=1)
    started = time.monotonic()
    outcome = await grader.grade(
        [
            _input("1", "Final answer: $9^{9^{9}}$"),
            _input("\\frac{1}{2}", "Final answer: 0.5", index=1),
        ],
        context,
    )
    # A safety net (the comparison would run for hours), not a speed target: the 1 s deadline
    # plus a worker start takes a few seconds (bench/bench_graders.py prints it).
    assert time.monotonic() - started < HANG_SAFETY_NET_SECONDS
    slow, fine = outcome.grades
    assert slow.score == 0.0
    assert slow.error_kind == "grader_timeout"
    assert "interrupted" in (slow.message or "")
    assert fine.score == 1.0


@pytest.mark.timeout(HANG_TIMEOUT_SECONDS)
async def test_unresponsive_worker_is_killed_and_replaced() -> None:
    # The in-worker deadline (30 s) is later than the parent's (1 s): the parent kills the
    # worker, and the next row gets a fresh one.
    grader = MathGrader(timeout_seconds=30.0, hard_timeout_seconds=1.0, startup_timeout_seconds=60)
    context = GradingContext(dataset="math-500", candidate_model="m", run_id="r", concurrency=1)
    started = time.monotonic()
    outcome = await grader.grade(
        [_input("1", "Final answer: $9^{9^{9}}$"), _input("-5", "Final answer: -5", index=1)],
        context,
    )
    # A safety net (the worker itself would give up only after 30 s), not a speed target.
    assert time.monotonic() - started < HANG_SAFETY_NET_SECONDS
    killed, fine = outcome.grades
    assert killed.error_kind == "grader_timeout"
    assert "killed" in (killed.message or "")
    assert fine.score == 1.0 and fine.ok


async def test_worker_count_is_bounded_by_the_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    starts = 0
    real_start = _math._Worker.start

    async def counting_start(**kwargs: object) -> _math._Worker:
        nonlocal starts
        starts += 1
        return await real_start(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_math._Worker, "start", counting_start)
    inputs = [_input(str(n), f"Final answer: {n}", index=n) for n in range(6)]
    context = GradingContext(dataset="math-500", candidate_model="m", run_id="r", concurrency=2)
    outcome = await MathGrader().grade(inputs, context)
    assert [g.score for g in outcome.grades] == [1.0] * 6
    assert starts == 2


async def test_workers_do_not_inherit_the_parents_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    seen: list[dict[str, str]] = []
    real_exec = asyncio.create_subprocess_exec

    async def spying_exec(*args: object, **kwargs: object) -> asyncio.subprocess.Process:
        env = kwargs.get("env")
        assert isinstance(env, dict)
        seen.append(env)
        return await real_exec(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spying_exec)
    outcome = await MathGrader().grade([_input("2", "Final answer: 2")], CONTEXT)
    assert outcome.grades[0].score == 1.0
    assert seen and all("OPENAI_API_KEY" not in env for env in seen)
    assert all("sk-secret-value" not in env.values() for env in seen)


def test_grades_from_a_thread_that_is_not_the_main_thread() -> None:
    results: list[Sequence[float]] = []

    def run() -> None:
        outcome = asyncio.run(
            MathGrader().grade([_input("\\frac{1}{2}", "Final answer: 0.5")], CONTEXT)
        )
        results.append([g.score for g in outcome.grades])

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert results == [[1.0]]


def test_identity_holds_versions_and_deadline() -> None:
    identity = MathGrader(timeout_seconds=7).identity
    assert identity["name"] == "math-verify"
    assert identity["version"]
    assert identity["math_verify"] != "not installed"
    assert identity["timeout_seconds"] == 7.0
    assert MathGrader().identity != identity


@pytest.mark.parametrize("kwargs", [{"timeout_seconds": 0}, {"hard_timeout_seconds": -1}])
def test_rejects_non_positive_timeouts(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        MathGrader(**kwargs)


@pytest.mark.parametrize(
    ("response", "rule"),
    [
        ("\\boxed{" * 30_000, "last_result"),  # never closed: no boxed answer
        ("Final answer: **\n\n" * 20_000, "final_answer"),
        ("$" * 100_000 + "1", "last_result"),
    ],
)
def test_extraction_finishes_on_hostile_input(response: str, rule: str) -> None:
    # A safety net against catastrophic backtracking, not a speed target: the extraction
    # takes milliseconds (bench/bench_graders.py prints the figures), a quadratic pattern on
    # these 100 kB inputs takes many minutes.
    started = time.monotonic()
    extraction = extract_final_answer(response)
    assert time.monotonic() - started < HOSTILE_INPUT_SAFETY_NET_SECONDS
    assert extraction.rule == rule
