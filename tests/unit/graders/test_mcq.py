from __future__ import annotations

import time
from typing import Any

import pytest

from kyai.datasets import Row
from kyai.graders._mcq import (
    GPQA_LETTERS,
    MMLU_PRO_LETTERS,
    MCQGrader,
    extract_letter,
)
from kyai.graders._types import GradeInput, GradingContext

CONTEXT = GradingContext(dataset="gpqa-diamond", candidate_model="m", run_id="run-1")
# A safety net against catastrophic backtracking only (the extraction takes milliseconds; the
# figures are printed by bench/bench_graders.py).
HOSTILE_INPUT_SAFETY_NET_SECONDS = 30.0


def _input(
    response: str,
    truth: str = "C",
    *,
    metadata: dict[str, Any] | None = None,
    failed: bool = False,
    index: int = 0,
) -> GradeInput:
    row = Row(
        index=index,
        row_id=f"q{index}",
        instruction="Which one?\n\nA. a\nB. b\nC. c\nD. d",
        ground_truth_response=truth,
        metadata=metadata or {},
    )
    return GradeInput(row=row, response=response, candidate_failed=failed)


# (response, expected letter) — the forms the seed's MCQ judge prompt names, and odd ones.
EXTRACTED = [
    # plain and prefixed forms
    ("Answer: C", "C"),
    ("C", "C"),
    ("  c  ", "C"),
    ("(C)", "C"),
    ("C.", "C"),
    ("C)", "C"),
    ("[C]", "C"),
    ("The answer is C", "C"),
    ("The answer is (B).", "B"),
    ("The correct answer is option H.", "H"),
    ("The answer to this question is B.", "B"),
    ("The answer for part two would be D", "D"),
    ("Final answer - D", "D"),
    ("Answer：C", "C"),
    ("ANSWER: b", "B"),
    ("answer: c", "C"),
    ("Option: C", "C"),
    ("My choice: (D)", "D"),
    ("Therefore, the best choice is C, because it fits.", "C"),
    ("I would choose J.", "J"),
    ("I'd go with (c)", "C"),
    ("Option B is correct.", "B"),
    ("(C) is the correct answer.", "C"),
    ("Answer: I", "I"),
    # Markdown, LaTeX
    ("**Answer:** D", "D"),
    ("Answer: **E**", "E"),
    ("**Answer: F**", "F"),
    ("> **C**", "C"),
    ("### Answer\nB", "B"),
    ("Answer: $C$", "C"),
    ("Answer: `C`", "C"),
    ("Final Answer: $\\boxed{G}$", "G"),
    ("\\boxed{\\text{D}}", "D"),
    ("The final answer is \\(\\boxed{B}\\).", "B"),
    # the final answer wins over earlier mentions
    ("Let me think. B is wrong. The answer is D.\n\nAnswer: A", "A"),
    ("Answer: B\nWait, actually it is C.\n\nC", "C"),
    ("A seems plausible, and **B** too.\n\nAnswer: D", "D"),
    ("Answer: A\n\nExplanation: option C is wrong because (C) ignores friction.", "A"),
    # an option line restating the chosen option
    ("C. Paris", "C"),
    ("**C) Paris**", "C"),
    # bold in prose, when nothing stronger exists
    ("We see that **B** holds.", "B"),
    # letters outside A-J are still extracted (the grader rejects them)
    ("Answer: K", "K"),
]


@pytest.mark.parametrize(("response", "letter"), EXTRACTED)
def test_extracts_the_final_letter(response: str, letter: str) -> None:
    assert extract_letter(response).letter == letter


# Responses that name no clear letter.
NO_LETTER = [
    "",
    "I don't know.",
    "A cat sat on the mat.",  # the article "A" in prose is not a choice
    "The answer is a mixture of both.",  # nor a lowercase article after "answer is"
    "answer: a paris",
    "Answer: A-level physics",
    "Answer: None of the above",
    "The answers are many",
    "answer is interesting",
    "Final answer\n\nA cat sat here.",
    "The option is valid",
    "Among the options, A and B look similar.",
    "The answer depends on whether x is A or not",
    "In answer to your question, it is A cat.",
]


@pytest.mark.parametrize("response", NO_LETTER)
def test_finds_no_letter_in_prose(response: str) -> None:
    assert extract_letter(response).letter is None


@pytest.mark.parametrize(
    "response",
    ["Answer: A or B", "Answer: A, C", "Answer: (A) or (B).", "A. one\nB. two\nC. three"],
)
def test_several_letters_are_ambiguous(response: str) -> None:
    found = extract_letter(response)
    assert found.letter is None
    assert found.ambiguous


def test_a_following_word_is_not_a_second_letter() -> None:
    assert extract_letter("Answer: A, because it is good").letter == "A"
    assert extract_letter("The correct option is C and I think so.").letter == "C"


async def test_grades_matches_and_mismatches() -> None:
    grader = MCQGrader(GPQA_LETTERS)
    outcome = await grader.grade(
        [
            _input("Answer: C", "C", index=0),
            _input("Answer: B", "C", index=1),
            _input("The answer is (a).", "A", index=2),
            _input("Answer: D\n\nOn reflection, the answer is C.", "C", index=3),
        ],
        CONTEXT,
    )
    assert [g.score for g in outcome.grades] == [1.0, 0.0, 1.0, 1.0]
    assert [g.extracted for g in outcome.grades] == ["C", "B", "A", "C"]
    assert all(g.ok for g in outcome.grades)
    assert outcome.grades[1].message == "Extracted letter: B. Ground truth: C."
    assert outcome.metrics["accuracy"] == 0.75
    assert outcome.metrics["no_answer_rate"] == 0.0


async def test_no_clear_letter_fails_closed() -> None:
    grader = MCQGrader(GPQA_LETTERS)
    outcome = await grader.grade(
        [_input("It depends on the temperature."), _input("Answer: A or C", "A", index=1)],
        CONTEXT,
    )
    for grade in outcome.grades:
        assert grade.score == 0.0
        assert grade.error_kind == "grader_no_answer"
        assert grade.extracted is None
    assert "several letters" in (outcome.grades[1].message or "")
    assert outcome.metrics["no_answer_rate"] == 1.0


async def test_letter_outside_the_range_scores_zero_with_the_letter_kept() -> None:
    outcome = await MCQGrader(GPQA_LETTERS).grade([_input("Answer: E", "C")], CONTEXT)
    (grade,) = outcome.grades
    assert grade.score == 0.0
    assert grade.error_kind == "grader_no_answer"
    assert grade.extracted == "E"


async def test_mmlu_pro_accepts_a_to_j_but_narrows_to_the_rows_choices() -> None:
    grader = MCQGrader.for_dataset("mmlu-pro")
    ten = {"choices": [f"option {i}" for i in range(10)]}
    seven = {"choices": [f"option {i}" for i in range(7)]}
    outcome = await grader.grade(
        [
            _input("Answer: J", "J", metadata=ten, index=0),
            _input("Answer: I", "G", metadata=seven, index=1),
            _input("Answer: G", "G", metadata=seven, index=2),
        ],
        CONTEXT,
    )
    assert [g.score for g in outcome.grades] == [1.0, 0.0, 1.0]
    assert outcome.grades[1].error_kind == "grader_no_answer"
    assert outcome.grades[1].extracted == "I"


async def test_gpqa_rejects_e_that_mmlu_pro_accepts() -> None:
    item = _input("Answer: E", "E")
    gpqa = await MCQGrader.for_dataset("gpqa-diamond").grade([item], CONTEXT)
    assert gpqa.grades[0].error_kind == "grader_invalid_row"  # E is not a GPQA letter
    mmlu = await MCQGrader.for_dataset("mmlu-pro").grade([item], CONTEXT)
    assert mmlu.grades[0].score == 1.0


async def test_candidate_failure_still_gets_a_grade() -> None:
    outcome = await MCQGrader().grade([_input("", failed=True)], CONTEXT)
    (grade,) = outcome.grades
    assert grade.score == 0.0
    assert grade.error_kind == "candidate_error"


async def test_ground_truth_that_is_not_a_letter_is_an_invalid_row() -> None:
    outcome = await MCQGrader().grade([_input("Answer: C", "Paris")], CONTEXT)
    assert outcome.grades[0].error_kind == "grader_invalid_row"
    assert outcome.grades[0].score == 0.0


async def test_keeps_input_order_and_count() -> None:
    responses = ["Answer: A", "", "Answer: C", "nonsense", "Answer: D"]
    inputs = [_input(r, "A", index=i) for i, r in enumerate(responses)]
    outcome = await MCQGrader().grade(inputs, CONTEXT)
    assert len(outcome.grades) == len(inputs)
    assert [g.score for g in outcome.grades] == [1.0, 0.0, 0.0, 0.0, 0.0]


async def test_empty_input_gives_an_empty_outcome() -> None:
    outcome = await MCQGrader().grade([], CONTEXT)
    assert outcome.grades == ()
    assert outcome.metrics == {}


def test_identity_names_the_rules_and_letters() -> None:
    gpqa = MCQGrader(GPQA_LETTERS).identity
    mmlu = MCQGrader(MMLU_PRO_LETTERS).identity
    assert gpqa["name"] == mmlu["name"] == "mcq-letter"
    assert gpqa["version"]
    assert gpqa["letters"] == "ABCD"
    assert gpqa != mmlu


@pytest.mark.parametrize("letters", ["", "abcd", "ABCA", "AB1"])
def test_rejects_bad_letter_sets(letters: str) -> None:
    with pytest.raises(ValueError, match="letters"):
        MCQGrader(letters)


def test_for_dataset_knows_only_mcq_builtins() -> None:
    assert MCQGrader.for_dataset("gpqa-diamond").letters == "ABCD"
    assert MCQGrader.for_dataset("mmlu-pro").letters == "ABCDEFGHIJ"
    with pytest.raises(ValueError, match="not a multiple-choice"):
        MCQGrader.for_dataset("math-500")


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("answer " * 30_000, None),
        ("(" * 100_000, None),
        ("**" * 50_000 + "A", "A"),
        ("A.\n" * 30_000, "A"),
        (" " * 200_000 + "C", "C"),
    ],
)
def test_extraction_finishes_on_hostile_input(response: str, letter: str | None) -> None:
    # A safety net against catastrophic backtracking, not a speed target: the extraction
    # takes milliseconds (bench/bench_graders.py prints the figures), a quadratic pattern
    # on these 100-200 kB inputs takes many minutes. The bound is generous so that a loaded
    # machine or mutmut's call recording cannot trip it.
    started = time.monotonic()
    extraction = extract_letter(response)
    assert time.monotonic() - started < HOSTILE_INPUT_SAFETY_NET_SECONDS
    assert extraction.letter == letter
