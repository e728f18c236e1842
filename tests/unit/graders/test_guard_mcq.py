"""Guards of MCQ letter extraction (issue 14, survivors of ``make mutation`` in graders/_mcq):
a lowercase letter counts as a choice only when punctuation, a line end or the end of the
answer follows it, never when a word does."""

from __future__ import annotations

import pytest

from kyai.datasets import Row
from kyai.graders import Grade, GradeInput, GradingContext, MCQGrader, extract_letter


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


# --- Second pass (make mutation, graders-mcq): which rule found the letter, and where --------
# The rule and the span go into every row's details (the audit of a score): each form names
# its own rule and the text it read.


@pytest.mark.parametrize(
    ("answer", "letter", "rule", "span"),
    [
        ("so we get \\boxed{C} here", "C", "boxed", "\\boxed{C}"),
        ("Reasoning\n**C**", "C", "lone_line", "C"),
        ("After checking, (B) is the correct answer.", "B", "statement", "(B) is the correct"),
        # A letter on its own line that the next line declares correct: one statement.
        ("C\nis correct", "C", "statement", "C\nis correct"),
        # Markdown before a lone letter: a quote, a heading, a bullet.
        ("Reasoning.\n> C", "C", "lone_line", "C"),
        ("Reasoning.\n### B", "B", "lone_line", "B"),
        ("Reasoning.\n- D", "D", "lone_line", "D"),
        # Any letter alone on its line is read (the caller checks the range), X too.
        ("Hmm.\nX", "X", "lone_line", "X"),
        # Wrapped in \text{...}, a lowercase letter is a choice whatever follows.
        ("The answer is \\text{b} here", "B", "statement", "answer is \\text{b"),
        # Three blanks after a lowercase letter end the statement: it is a choice.
        ("the answer is b   c", "B", "statement", "answer is b"),
    ],
)
def test_each_form_names_its_rule_and_span(answer: str, letter: str, rule: str, span: str) -> None:
    found = extract_letter(answer)
    assert (found.letter, found.rule, found.span, found.ambiguous) == (letter, rule, span, False)


@pytest.mark.parametrize(
    ("answer", "letter"),
    [
        # The later of a statement and a lone line wins, wherever the lines start.
        ("x" * 100 + "\nAnswer: C\nok\nB\n", "B"),
        ("ok\n" * 20 + "Answer: C\nB", "B"),
        # LaTeX dollars before a lone line do not move the statement after it.
        ("With $a$, $b$, $c$, $d$, $e$, $f$, $g$ and $h$:\nB\nFinal answer: C", "C"),
        # A trailing statement after an answer statement wins.
        ("Answer: A\nOn reflection, B is correct.", "B"),
        # A lowercase word after "answer is" is skipped; the later statement still counts.
        ("the answer is a mixture. Final answer: C", "C"),
        # The letters of the next line are not part of the statement.
        ("Final answer: C\nand D.\nok", "C"),
    ],
)
def test_the_last_form_in_the_text_wins(answer: str, letter: str) -> None:
    found = extract_letter(answer)
    assert found.letter == letter and not found.ambiguous, found


def test_several_letters_on_a_later_line_of_the_answer_are_ambiguous() -> None:
    found = extract_letter("Thinking.\nFinal answer: A, B\n")
    assert (found.letter, found.rule, found.ambiguous) == (None, "statement", True)


def test_option_lines_naming_several_letters_are_ambiguous() -> None:
    found = extract_letter("A. one\nB. two")
    assert (found.letter, found.rule, found.ambiguous) == (None, "option_line", True)


def test_every_upper_case_letter_up_to_z_is_a_valid_letter_set() -> None:
    assert MCQGrader("ABCDEFGHIJKLMNOPQRSTUVWXYZ").letters == "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    assert MCQGrader("WXYZ").letters == "WXYZ"
    with pytest.raises(ValueError) as info:
        MCQGrader("abcd")
    assert str(info.value) == (
        "MCQ letters must be upper-case ASCII letters, got 'abcd'; use e.g. 'ABCD' or 'ABCDEFGHIJ'."
    )


async def test_a_row_the_grader_fails_on_scores_zero_and_the_others_are_graded() -> None:
    row = Row(index=0, row_id="r0", instruction="q", ground_truth_response="B", metadata={})
    broken = GradeInput(row=row, response=None)  # type: ignore[arg-type]  # breaks the grader
    outcome = await MCQGrader.for_dataset("gpqa-diamond").grade(
        [broken, GradeInput(row=row, response="Answer: B")],
        GradingContext(dataset="gpqa-diamond", candidate_model="m", run_id="r"),
    )
    failed, graded = outcome.grades
    assert failed.score == 0.0
    assert failed.error_kind == "grader_error"
    assert (failed.message or "").startswith("The MCQ grader failed on this row: TypeError(")
    assert graded.score == 1.0 and graded.ok
    assert outcome.metrics == {"accuracy": 0.5, "no_answer_rate": 0.0}
