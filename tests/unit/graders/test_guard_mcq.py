"""Guards of MCQ letter extraction (issue 14, survivors of ``make mutation`` in graders/_mcq):
a lowercase letter counts as a choice only when punctuation, a line end or the end of the
answer follows it, never when a word does."""

from __future__ import annotations

import pytest

from kyai.graders import MCQGrader, extract_letter


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
