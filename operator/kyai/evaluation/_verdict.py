"""Parsing a judge's reply into a score, fail-closed.

The judge must answer ``{"score": 0..1, "reasoning": "..."}``. Replies that wrap the JSON in
prose or code fences are tolerated; anything else scores 0 with the reason recorded.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from kyai.evaluation._reasoning import strip_reasoning

#: Error kinds a judge reply can produce (each scores 0).
UNPARSEABLE = "judge_unparseable"
SCORE_MISSING = "judge_score_missing"
SCORE_INVALID = "judge_score_invalid"
SCORE_OUT_OF_RANGE = "judge_score_out_of_range"
AMBIGUOUS = "judge_ambiguous"


@dataclass(frozen=True)
class Verdict:
    """A judge's parsed reply: a score in [0, 1], or 0 with the error kind and message."""

    score: float
    reasoning: str | None
    error_kind: str | None = None
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the reply held a valid score."""
        return self.error_kind is None


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object that can be decoded starting at some ``{`` of ``text``."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    position = text.find("{")
    while position != -1:
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
            position = text.find("{", end)
        else:  # pragma: no cover - raw_decode at "{" only yields dicts
            position = text.find("{", position + 1)
    return found


def _score_key(value: Any) -> str:
    """Equal for equal scores (``1`` and ``1.0`` alike), whatever their JSON type."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(float(value))
    return json.dumps(value, sort_keys=True)


def parse_verdict(reply: str | None) -> Verdict:
    """Parse a judge reply; every failure scores 0 with its reason.

    Every embedded JSON object (the whole reply, or objects in prose or code fences) is
    considered. When several carry a ``score`` key they must agree: replies whose objects give
    different scores are ambiguous and fail closed (``judge_ambiguous``); repeated objects
    with the same score are accepted (the last one gives the reasoning).
    """
    text = strip_reasoning(reply)
    if not text:
        return Verdict(0.0, None, UNPARSEABLE, "The judge's reply was empty.")
    objects = _json_objects(text)
    if not objects:
        return Verdict(0.0, None, UNPARSEABLE, "The judge's reply held no JSON object.")
    with_score = [obj for obj in objects if "score" in obj]
    distinct = {_score_key(obj["score"]) for obj in with_score}
    if len(distinct) > 1:
        shown = ", ".join(sorted(json.dumps(obj["score"]) for obj in with_score))[:120]
        return Verdict(
            0.0,
            None,
            AMBIGUOUS,
            f"The judge's reply held {len(with_score)} JSON objects with different scores "
            f"({shown}); it is ambiguous.",
        )
    chosen = with_score[-1] if with_score else objects[-1]
    reasoning_value = chosen.get("reasoning")
    reasoning = reasoning_value if isinstance(reasoning_value, str) else None
    if "score" not in chosen:
        return Verdict(0.0, reasoning, SCORE_MISSING, "The judge's JSON had no 'score' field.")
    raw = chosen["score"]
    if raw is None:
        return Verdict(0.0, reasoning, SCORE_MISSING, "The judge's score was null.")
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return Verdict(
            0.0,
            reasoning,
            SCORE_INVALID,
            f"The judge's score was not a number: {json.dumps(raw)[:80]}.",
        )
    score = float(raw)
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        return Verdict(
            0.0,
            reasoning,
            SCORE_OUT_OF_RANGE,
            f"The judge's score {raw!r} is outside [0, 1].",
        )
    return Verdict(score, reasoning)
