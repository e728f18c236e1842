"""The judge-facing copy of a candidate answer: reasoning removed, the raw answer untouched.

KYAI stores every answer verbatim and strips thinking only from the copy the judge sees, so
that MCQ letter extraction and IFEval checks are not contaminated by chain-of-thought.
"""

from __future__ import annotations

import re

#: Tags that reasoning models use to wrap their chain of thought.
THINK_TAGS: tuple[str, ...] = ("think", "thinking", "reasoning")

_BLOCK = re.compile(
    r"<(?P<tag>" + "|".join(THINK_TAGS) + r")>.*?</(?P=tag)>",
    re.DOTALL | re.IGNORECASE,
)
_CLOSE = re.compile(r"</(?:" + "|".join(THINK_TAGS) + r")>", re.IGNORECASE)
_OPEN = re.compile(r"<(?:" + "|".join(THINK_TAGS) + r")>", re.IGNORECASE)


def strip_reasoning(content: str | None) -> str:
    """Return the answer with every thinking block removed.

    - ``<think>…</think>`` (and ``<thinking>``, ``<reasoning>``) blocks are removed wherever
      they stand;
    - a dangling closing tag (templates that open ``<think>`` in the prompt, as DeepSeek-R1's
      does) removes everything before it;
    - a dangling opening tag (an answer cut off while thinking) removes everything after it.

    The result is stripped of surrounding white space; ``None`` becomes ``""``.
    """
    if not content:
        return ""
    text = _BLOCK.sub("", content)
    closes = list(_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text.strip()
