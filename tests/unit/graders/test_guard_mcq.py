"""Guards of MCQ letter extraction (issue 14, survivors of ``make mutation`` in graders/_mcq):
a lowercase letter counts as a choice only when punctuation, a line end or the end of the
answer follows it, never when a word does."""

from __future__ import annotations

import pytest

from kyai.datasets import Row
from kyai.graders import Grade, GradeInput, MCQGrader, extract_letter


@pytest.mark.parametrize(
    ("answer", "letter"),
    [
        ("The answer is c.", "C"),
        ("The answer is c", "C"),
        ("The answer is b ", "B"),
        ("The answer is b\nbecause of the second law.", "B"),
        ("the answer is d)", "D"),
        ("answer: a]", "A"),
        ("The answer is e:", "E"),
    ],
)
def test_a_lowercase_letter_before_punctuation_or_the_end_is_a_choice(
    answer: str, letter: str
) -> None:
    found = extract_letter(answer)
    assert found.letter == letter and found.rule == "statement", found


@pytest.mark.parametrize(
    "answer",
    ["The answer is a good one", "The answer is a bit unclear", "My answer is a guess"],
)
def test_a_lowercase_letter_before_a_word_is_an_article(answer: str) -> None:
    assert extract_letter(answer).letter is None


def test_only_the_mcq_builtins_have_an_mcq_grader() -> None:
    assert MCQGrader.for_dataset("gpqa-diamond").letters == "ABCD"
    with pytest.raises(ValueError) as info:
        MCQGrader.for_dataset("math-500")
    assert str(info.value) == (
        "Dataset 'math-500' is not a multiple-choice built-in; "
        "the MCQ grader serves 'mmlu-pro' and 'gpqa-diamond'."
    )


def row_input(
    response: str, truth: str = "B", *, failed: bool = False, **metadata: object
) -> GradeInput:
    row = Row(index=0, row_id="r", instruction="q", ground_truth_response=truth, metadata=metadata)
    return GradeInput(row=row, response=response, candidate_failed=failed)


def details(rule: str, span: str, allowed: str = "ABCD") -> dict[str, object]:
    return {"rule": rule, "ground_truth": "B", "allowed": allowed, "span": span}


@pytest.mark.parametrize(
    ("item", "grade"),
    [
        (
            row_input("", failed=True),
            Grade(
                0.0,
                error_kind="candidate_error",
                message="The candidate failed on this row; nothing to grade.",
            ),
        ),
        (
            row_input("B", truth="Z"),
            Grade(
                0.0,
                error_kind="grader_invalid_row",
                message="The ground truth 'Z' is not one of the letters ABCD.",
            ),
        ),
        (
            row_input("Paris, so **B** it is"),
            Grade(
                1.0,
                {"accuracy": 1.0},
                message="Extracted letter: B. Ground truth: B.",
                extracted="B",
                details=details("bold", "**B**"),
            ),
        ),
        (
            row_input("A) " + "x" * 300),
            Grade(
                0.0,
                {"accuracy": 0.0},
                message="Extracted letter: A. Ground truth: B.",
                extracted="A",
                details=details("option_line", "A) " + "x" * 197),
            ),
        ),
        (
            row_input("The answer is A or B"),
            Grade(
                0.0,
                {"accuracy": 0.0},
                error_kind="grader_no_answer",
                message="The final answer names several letters.",
                details=details("statement", "answer is A"),
            ),
        ),
        (
            row_input("The answer is D", choices=["a", "b", "c"]),
            Grade(
                0.0,
                {"accuracy": 0.0},
                error_kind="grader_no_answer",
                message="The chosen letter D is not one of ABC.",
                extracted="D",
                details=details("statement", "answer is D", allowed="ABC"),
            ),
        ),
    ],
)
def test_grades_in_full(item: GradeInput, grade: Grade) -> None:
    assert MCQGrader.for_dataset("gpqa-diamond").grade_one(item) == grade


@pytest.mark.parametrize("choices", ["abc", [], None])
def test_choices_that_are_not_a_list_keep_every_letter(choices: object) -> None:
    grade = MCQGrader.for_dataset("gpqa-diamond").grade_one(
        row_input("The answer is D", choices=choices)
    )
    assert grade.ok and grade.details["allowed"] == "ABCD"


def test_no_letter_at_all() -> None:
    grade = MCQGrader.for_dataset("gpqa-diamond").grade_one(row_input("I cannot tell."))
    assert grade == Grade(
        0.0,
        {"accuracy": 0.0},
        error_kind="grader_no_answer",
        message="No clear answer letter was found in the response.",
        details={"rule": None, "ground_truth": "B", "allowed": "ABCD"},
    )
