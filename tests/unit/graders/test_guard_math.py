"""Guards of the math grader (issue 14, survivors of ``make mutation``, group graders-math):
what text goes to math-verify. Already-delimited math (paired ``$``, ``\\(``, ``\\[``, a box)
is passed as is; anything else is wrapped in ``$...$`` with its lone dollars escaped (``$7``
is money), the raw text kept as a fallback. The verdicts rarely differ either way (the
fallback catches most), so the rule is checked where it is decided."""

from __future__ import annotations

import pytest

from kyai.graders import _math


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
