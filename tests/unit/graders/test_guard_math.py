"""Guards of the math grader (issue 14, survivors of ``make mutation``, group graders-math):
what text goes to math-verify. Already-delimited math (paired ``$``, ``\\(``, ``\\[``, a box)
is passed as is; anything else is wrapped in ``$...$`` with its lone dollars escaped (``$7``
is money), the raw text kept as a fallback. The verdicts rarely differ either way (the
fallback catches most), so the rule is checked where it is decided."""

from __future__ import annotations

import pytest

from kyai.datasets import Row
from kyai.graders import GradeInput, GradingContext, MathGrader, _math


@pytest.mark.parametrize(
    "answer",
    ["\\(x\\)", "\\[x\\]", "\\boxed{3}", "$x$", "$a$ and $b$", "$a$, $b$ and $c$"],
)
def test_delimited_math_is_passed_as_is(answer: str) -> None:
    assert _math._for_math_verify(answer) == (answer, None)


@pytest.mark.parametrize(
    ("answer", "wrapped"),
    [
        ("3/4", "$3/4$"),
        ("$7", "$\\$7$"),  # a lone dollar is currency
        ("$a$ and $b", "$\\$a\\$ and \\$b$"),  # three dollars: not paired
    ],
)
def test_other_text_is_wrapped_with_the_raw_text_as_fallback(answer: str, wrapped: str) -> None:
    assert _math._for_math_verify(answer) == (wrapped, answer)


@pytest.mark.parametrize(
    ("gold", "source"),
    [
        # A reference stated like an answer is read like one: its box or final-answer line.
        ("The answer is \\boxed{3}.", ("$3$", "3")),
        ("Final answer: 7", ("$7$", "7")),
        ("Final answer: $\\frac{1}{2}$", ("$\\frac{1}{2}$", "\\frac{1}{2}")),
        # Nothing after the marker: the reference is passed whole.
        ("Final answer:", ("Final answer:", None)),
        # A plain reference is wrapped like a candidate's answer.
        ("x + 1", ("$x + 1$", "x + 1")),
    ],
)
def test_what_of_the_reference_goes_to_math_verify(
    gold: str, source: tuple[str, str | None]
) -> None:
    assert _math._gold_source(gold) == source


async def test_the_extracted_answer_is_what_a_rule_found_or_what_math_verify_read() -> None:
    def item(index: int, response: str) -> GradeInput:
        row = Row(index=index, row_id=f"r{index}", instruction="q", ground_truth_response="2")
        return GradeInput(row=row, response=response)

    context = GradingContext(dataset="math-500", candidate_model="m", run_id="r", concurrency=1)
    outcome = await MathGrader(timeout_seconds=1.0).grade(
        [
            item(0, "Final answer: 2"),
            # No final-answer line, no box: the whole response goes to math-verify, and the
            # grade shows what it read, not the whole response.
            item(1, "The result is 2 apples"),
            # A comparison that is interrupted still records the extracted answer.
            item(2, "Final answer: $9^{9^{9}}$"),
        ],
        context,
    )
    assert [g.score for g in outcome.grades] == [1.0, 1.0, 0.0]
    assert [g.extracted for g in outcome.grades] == ["2", "2", "9^{9^{9}}"]
    assert outcome.grades[2].error_kind == "grader_timeout"
    # The audit of each grade: the rule that found the answer and the reference as parsed.
    rules = [g.details["rule"] for g in outcome.grades]
    assert rules == ["final_answer", "last_result", "final_answer"]
    assert {g.details["gold_source"] for g in outcome.grades} == {"$2$"}
    compared = outcome.grades[0].details
    assert (compared["gold_parsed"], compared["answer_parsed"]) == ("2", "2")
