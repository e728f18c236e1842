"""Guards of the judge-reply parser (issue 14, survivors of ``make mutation``): which JSON
object of a reply counts, that a broken ``{`` does not hide the verdict after it, that the
judge's reasoning is kept on every failure, and the exact reasons recorded."""

from __future__ import annotations

import pytest

from kyai.evaluation import Verdict, parse_verdict


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # The same score repeated: the last object with a score is the verdict.
        ('Example: {"score": 0.9}. Mine: {"score": 0.9, "reasoning": "close"}', 0.9),
        # A later object without a score (a note) does not replace the verdict.
        ('{"score": 0.75, "reasoning": "ok"} and a note {"comment": "n/a"}', 0.75),
        # Stray or broken braces before the verdict are skipped, not fatal.
        ('Scoring {as asked} {"score": 1.0}', 1.0),
        ('{{ "score": 0.25}', 0.25),
        ('{ oops {"score": 0.5, "reasoning": "half"} {"x": 1}', 0.5),
        # Every object after a decoded one is considered, not only the last one.
        ('{"a": 1} {"score": 0.4} {"note": "x"}', 0.4),
    ],
)
def test_the_last_object_with_a_score_is_the_verdict(reply: str, score: float) -> None:
    verdict = parse_verdict(reply)
    assert verdict.ok, verdict
    assert verdict.score == score


def test_the_reasoning_of_the_chosen_object_is_kept() -> None:
    verdict = parse_verdict('{"score": 1.0, "reasoning": "ex"} {"score": 1, "reasoning": "r"}')
    assert verdict == Verdict(1.0, "r")
    ambiguous = parse_verdict('{"score": 0.2, "reasoning": "ex"} {"score": 1, "reasoning": "r"}')
    assert (ambiguous.score, ambiguous.error_kind) == (0.0, "judge_ambiguous")
    assert parse_verdict('{"score": 1, "reasoning": 5}') == Verdict(1.0, None)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (None, Verdict(0.0, None, "judge_unparseable", "The judge's reply was empty.")),
        (
            "<think>hmm</think>   ",
            Verdict(0.0, None, "judge_unparseable", "The judge's reply was empty."),
        ),
        (
            "Full marks.",
            Verdict(0.0, None, "judge_unparseable", "The judge's reply held no JSON object."),
        ),
        (
            '{"verdict": "right", "reasoning": "why"}',
            Verdict(0.0, "why", "judge_score_missing", "The judge's JSON had no 'score' field."),
        ),
        (
            '{"score": null, "reasoning": "unsure"}',
            Verdict(0.0, "unsure", "judge_score_missing", "The judge's score was null."),
        ),
        (
            '{"score": "high", "reasoning": "good"}',
            Verdict(
                0.0,
                "good",
                "judge_score_invalid",
                'The judge\'s score was not a number: "high".',
            ),
        ),
        (
            '{"score": true, "reasoning": "yes"}',
            Verdict(0.0, "yes", "judge_score_invalid", "The judge's score was not a number: true."),
        ),
        (
            '{"score": 7, "reasoning": "7/10"}',
            Verdict(
                0.0, "7/10", "judge_score_out_of_range", "The judge's score 7 is outside [0, 1]."
            ),
        ),
        (
            '{"score": -0.5}',
            Verdict(
                0.0, None, "judge_score_out_of_range", "The judge's score -0.5 is outside [0, 1]."
            ),
        ),
    ],
)
def test_failures_score_zero_with_their_reason_and_the_reasoning(
    reply: str | None, expected: Verdict
) -> None:
    assert parse_verdict(reply) == expected


def test_a_long_invalid_score_is_quoted_cut_to_80_characters() -> None:
    verdict = parse_verdict('{"score": "' + "x" * 200 + '"}')
    assert verdict.error_kind == "judge_score_invalid"
    assert verdict.error_message == "The judge's score was not a number: " + '"' + "x" * 79 + "."


@pytest.mark.parametrize("edge", [0, 1, 0.0, 1.0])
def test_the_range_is_closed(edge: float) -> None:
    verdict = parse_verdict(f'{{"score": {edge}}}')
    assert verdict.ok and verdict.score == float(edge)


# Survivors of the complete `evaluation-scoring` run (second pass): the ambiguity check for
# scores that are not numbers, and the message that shows the disagreeing scores.


def test_different_scores_that_are_not_numbers_are_ambiguous() -> None:
    verdict = parse_verdict('{"score": "high"} and then {"score": "low"}')
    assert (verdict.score, verdict.error_kind) == (0.0, "judge_ambiguous")


def test_the_same_object_score_in_another_key_order_is_not_ambiguous() -> None:
    verdict = parse_verdict('{"score": {"a": 1, "b": 2}} {"score": {"b": 2, "a": 1}}')
    assert (verdict.score, verdict.error_kind) == (0.0, "judge_score_invalid")


def test_an_ambiguous_reply_shows_its_scores_sorted() -> None:
    verdict = parse_verdict('{"score": 1} {"score": 0.5} {"score": 0}')
    assert verdict.error_message == (
        "The judge's reply held 3 JSON objects with different scores (0, 0.5, 1); it is ambiguous."
    )


def test_the_scores_shown_for_an_ambiguous_reply_are_cut_to_120_characters() -> None:
    reply = " ".join(f'{{"score": 0.{index:04d}}}' for index in range(1, 41))
    message = parse_verdict(reply).error_message or ""
    shown = message.split("(", 1)[1].rsplit("); it is ambiguous.", 1)[0]
    full = ", ".join(f"0.{index:04d}".rstrip("0") for index in range(1, 41))
    assert len(full) > 120
    assert shown == full[:120]
