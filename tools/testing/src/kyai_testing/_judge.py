"""A scripted judge: scores by substring match, answering in the judge's JSON contract."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kyai_testing._model import ChatRequest


def _tagged(name: str, text: str) -> str | None:
    """The text between ``<name>`` and ``</name>`` (the last such block), or None."""
    found = re.findall(rf"<{name}>(.*?)</{name}>", text, flags=re.DOTALL)
    return found[-1] if found else None


def substring_judge(request: ChatRequest) -> str:
    """Score 1.0 when the ground truth occurs (case-insensitively) in the candidate response.

    Reads the judge's user message (``<instruction>``, ``<ground_truth>`` and
    ``<candidate_response>`` blocks) and returns ``{"score": …, "reasoning": …}`` as JSON
    text. A message without both blocks, or with an empty ground truth, scores 0.0.
    """
    text = request.last_user_message
    truth = _tagged("ground_truth", text)
    response = _tagged("candidate_response", text)
    if truth is None or response is None:
        verdict = {
            "score": 0.0,
            "reasoning": "The judge message has no <ground_truth> or <candidate_response> block.",
        }
    elif not truth.strip():
        verdict = {"score": 0.0, "reasoning": "The ground truth is empty; nothing to match."}
    elif truth.strip().casefold() in response.casefold():
        verdict = {
            "score": 1.0,
            "reasoning": f"The response contains the ground truth {truth.strip()!r}.",
        }
    else:
        verdict = {
            "score": 0.0,
            "reasoning": f"The response does not contain the ground truth {truth.strip()!r}.",
        }
    return json.dumps(verdict)
