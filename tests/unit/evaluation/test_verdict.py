import math

import pytest

from kyai.evaluation import parse_verdict


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"score": 1.0, "reasoning": "Extracted letter: C. Ground truth: C."}', 1.0),
        ('{"score": 0, "reasoning": "wrong"}', 0.0),
        ('{"score": 0.5, "reasoning": "partial"}', 0.5),
        ('{"score": 1}', 1.0),
        ('Here is my verdict:\n```json\n{"score": 0.75, "reasoning": "ok"}\n```', 0.75),
        ('Sure. {"score": 1.0, "reasoning": "fine"} Hope this helps.', 1.0),
        ('<think>{"score": 0.0}</think>{"score": 1.0, "reasoning": "r"}', 1.0),
        # The same verdict twice (a judge repeating itself) is not ambiguous.
        ('{"score": 1, "reasoning": "a"} So: {"score": 1.0, "reasoning": "b"}', 1.0),
        ('{"reasoning": {"nested": true}, "score": 0.25}', 0.25),
    ],
)
def test_valid_scores(reply: str, score: float) -> None:
    verdict = parse_verdict(reply)
    assert verdict.ok, verdict
    assert verdict.score == score


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ("", "judge_unparseable"),
        (None, "judge_unparseable"),
        ("The answer is correct, score 1.0", "judge_unparseable"),
        ('{"score": 1.0, "reasoning": "unterminated', "judge_unparseable"),
        ("[1.0]", "judge_unparseable"),
        ('{"score": null, "reasoning": "no idea"}', "judge_score_missing"),
        ('{"reasoning": "forgot the score"}', "judge_score_missing"),
        ('{"score": 1.5, "reasoning": "too generous"}', "judge_score_out_of_range"),
        ('{"score": -0.1, "reasoning": "negative"}', "judge_score_out_of_range"),
        ('{"score": 10, "reasoning": "out of ten"}', "judge_score_out_of_range"),
        ('{"score": NaN, "reasoning": "nan"}', "judge_score_out_of_range"),
        ('{"score": Infinity}', "judge_score_out_of_range"),
        ('{"score": "1.0", "reasoning": "string"}', "judge_score_invalid"),
        ('{"score": true, "reasoning": "boolean"}', "judge_score_invalid"),
        ('{"score": [1.0]}', "judge_score_invalid"),
        ('<think>{"score": 1.0}</think>', "judge_unparseable"),
    ],
)
def test_fail_closed(reply: str | None, kind: str) -> None:
    verdict = parse_verdict(reply)
    assert not verdict.ok
    assert verdict.error_kind == kind
    assert verdict.score == 0.0
    assert verdict.error_message
    assert not math.isnan(verdict.score)


def test_reasoning_kept() -> None:
    verdict = parse_verdict('{"score": 0.0, "reasoning": "Extracted letter: B. Ground truth: C."}')
    assert verdict.reasoning == "Extracted letter: B. Ground truth: C."


@pytest.mark.parametrize(
    "reply",
    [
        # An example quoted before the verdict: which one is meant cannot be told (issue 8).
        'Format {"score": 0.0, "reasoning": "x"}; my answer: {"score": 1.0, "reasoning": "y"}',
        '{"score": 1.0, "reasoning": "a"}\n{"score": 0.5, "reasoning": "b"}',
        '```json\n{"score": 0}\n```\n```json\n{"score": "1"}\n```',
    ],
)
def test_different_scores_are_ambiguous(reply: str) -> None:
    verdict = parse_verdict(reply)
    assert verdict.error_kind == "judge_ambiguous"
    assert verdict.score == 0.0
    assert verdict.error_message is not None and "different scores" in verdict.error_message
