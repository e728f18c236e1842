r"""MCQ letter match: the deterministic grader for MMLU-Pro (A–J) and GPQA Diamond (A–D).

It follows the seed's ``mcq-exact-match-judge`` prompt: extract the single letter the candidate
chose as its *final* answer, compare it with the ground-truth letter, 1.0 on a match, else 0.0;
no clear letter scores 0 (fail-closed).

Extraction rules (:func:`extract_letter`), applied to the judge-facing copy of the answer:

1. **Strong forms**, the last one in the text wins:

   - an answer statement: ``Answer: C``, ``Final answer - C``, ``The answer is (C)``,
     ``The answer to this question is C``,
     ``the correct answer is option C``, ``The best choice is C``, ``Option: C``,
     ``I choose C`` / ``I'd go with C``, and the letter first: ``B is correct``,
     ``(B) is the correct answer`` (keywords in any case, Markdown emphasis ignored);
   - a line that holds only the letter: ``C``, ``(C)``, ``C.``, ``C)``, ``**C**``,
     ``Option C``, ``$\boxed{C}$``;
   - ``\boxed{C}`` anywhere.

2. **An option line**, when no strong form exists: a line starting ``C. text``, ``C) text`` or
   ``(C) text``, used only when every such line names the same letter (a response that
   restates the options names several and gives no answer).
3. **Bold**, when nothing above matched: the last ``**C**`` / ``__C__`` in prose.

Letter case: after an answer keyword or on a line of its own a capital letter is taken when it
is not glued to a word (``Answer: A-level`` is not an answer). A *lowercase* letter is taken
only when it cannot be an English word: alone on its line, in brackets or bold, or followed by
``.``, ``)``, ``:`` or the end of the line; so "the answer is a mixture" names no letter, while
``answer: c`` does. Prose outside these forms is never read, so the article "A" in a sentence
is not a choice.

A statement that names several letters (``Answer: A or B``, ``A, C``, ``A/B``) names no clear
letter. When the final form names a letter outside the allowed range (``Answer: K`` on a
four-option question) the row scores 0 with ``error_kind`` ``grader_no_answer`` and the letter
in ``Grade.extracted``, as it does when no letter is found.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kyai.graders._types import (
    CANDIDATE_ERROR,
    INVALID_ROW,
    NO_ANSWER,
    Grade,
    GradeInput,
    GradingContext,
    GradingOutcome,
)

__all__ = [
    "GPQA_LETTERS",
    "MMLU_PRO_LETTERS",
    "LetterExtraction",
    "MCQGrader",
    "extract_letter",
]

#: The option letters of MMLU-Pro (up to ten options).
MMLU_PRO_LETTERS: Final = "ABCDEFGHIJ"
#: The option letters of GPQA Diamond.
GPQA_LETTERS: Final = "ABCD"

#: Error kinds this grader records (each scores 0).

#: Bumped whenever the extraction rules change (it is part of the comparison key).
RULES_VERSION: Final = "1"

# A letter that is not glued to a following word: not followed by a letter or digit, nor by an
# apostrophe or hyphen that starts one ("A's", "A-level").
_AFTER_LETTER = r"(?![A-Za-z0-9])(?!['’\-][A-Za-z0-9])"
# What may stand between an answer keyword and the letter (a line break only after a colon or
# after "is": "Final answer\n\nA cat..." names no letter).
_SEP = (
    r"(?:\s*[:：=\-–—]\s*"
    r"|[ \t]+(?:(?:is|would\s+be|will\s+be|should\s+be)\b\s*[:：=\-–—]?\s*)?)"
)
_LEADS = (
    # "answer: C", "final answer is C", "the correct answer would be option C", "Answer C"
    r"\banswer"
    # "the answer to this question is C", "the answer here is C"
    r"(?:[ \t]+(?:to|for|of|here|in)\b[^.,;\n:]{0,40}?(?=[ \t]+(?:is|would|will|should)\b))?"
    + _SEP
    + r"(?:(?:option|choice|letter)\s*)?",
    # "the correct option is C", "best choice: C", "Option: C", "my selection is C"
    r"\b(?:(?:correct|right|best|final|my)\s+)?(?:option|choice|selection)\s*"
    r"(?:is|would\s+be|:|：|=)\s*(?:(?:option|choice|letter)\s*)?",
    # "I choose C", "I'd go with option C", "I will select C"
    r"\bI\s*(?:would|will|'d|’d|'ll|’ll)?\s*(?:choose|select|pick|go\s+with)\s+"
    r"(?:(?:option|choice|letter)\s*)?",
)
_STATEMENT = re.compile(
    r"(?:" + "|".join(_LEADS) + r")"
    r"(?P<open>\\boxed\{\s*|\\text(?:bf)?\{\s*|[(\[]\s*)?"
    r"(?P<letter>[A-Za-z])" + _AFTER_LETTER,
    re.IGNORECASE,
)
# "B is correct", "(B) is the correct answer", "Option B is the best choice" (capital only).
_TRAILING_STATEMENT = re.compile(
    r"(?<![A-Za-z0-9'’])(?:(?i:option|choice)\s+)?[(\[]?(?P<letter>[A-Z])[)\]]?"
    r"\s+(?i:is\s+(?:the\s+)?(?:correct|right|best|final)\b)"
)
_LONE_LINE = re.compile(
    r"^(?:(?:option|choice|letter)\s+)?"
    r"(?:\\boxed\{\s*(?:\\text(?:bf)?\{)?|\\text(?:bf)?\{)?"
    r"[(\[]?\s*(?P<letter>[A-Za-z])\s*[)\]]?"
    r"\}?\}?\s*[.:)]?$",
    re.IGNORECASE,
)
_BOXED = re.compile(r"\\boxed\{\s*(?:\\text(?:bf)?\{\s*)?\(?(?P<letter>[A-Za-z])\)?\s*\}")
_OPTION_LINE = re.compile(r"^\s*(?:\((?P<p>[A-Z])\)|(?P<l>[A-Z])[.)])\s+\S")
_BOLD = re.compile(r"(?:\*\*|__)\s*[(\[]?(?P<letter>[A-Za-z])[)\]]?\s*[.:]?\s*(?:\*\*|__)")
# Decorations removed (replaced by spaces, so positions are kept) before statements are read.
_DECORATION = re.compile(r"\*|__|`|\$")
# Several letters in one statement: "A or B", "A, C", "A/B", "A and C" (ending the clause).
_SEVERAL = re.compile(
    r"\s*[)\]]?\s*(?:,|/|\bor\b|\band\b|&)\s*[(\[]?\s*[A-Z][)\]]?(?=\s*(?:$|[.,;:)\]\n]))"
)


@dataclass(frozen=True)
class LetterExtraction:
    """The outcome of :func:`extract_letter`.

    ``letter`` is the final chosen letter (upper case) or None; ``rule`` names the rule that
    found it (``statement``, ``lone_line``, ``boxed``, ``option_line``, ``bold``) and
    ``ambiguous`` is True when the final statement names several letters (``letter`` is then
    None).
    """

    letter: str | None
    rule: str | None = None
    ambiguous: bool = False
    span: str | None = None


@dataclass(frozen=True)
class _Candidate:
    position: int
    letter: str | None
    rule: str
    span: str
    ambiguous: bool = False


def _lowercase_ok(text: str, end: int, *, wrapped: bool) -> bool:
    """Whether a lowercase letter ending at ``end`` is clearly a choice, not a word."""
    if wrapped:
        return True
    rest = text[end : end + 3]
    return rest == "" or rest[0] in ".):\n]" or rest.strip() == ""


def _statements(text: str) -> list[_Candidate]:
    cleaned = _DECORATION.sub(lambda m: " " * len(m.group(0)), text)
    found: list[_Candidate] = []
    for match in _STATEMENT.finditer(cleaned):
        letter = match.group("letter")
        wrapped = match.group("open") is not None
        if letter.islower() and not _lowercase_ok(cleaned, match.end(), wrapped=wrapped):
            continue
        line_end = cleaned.find("\n", match.end())
        tail = cleaned[match.end() : line_end if line_end != -1 else len(cleaned)]
        ambiguous = _SEVERAL.match(tail) is not None
        found.append(
            _Candidate(
                position=match.start(),
                letter=None if ambiguous else letter.upper(),
                rule="statement",
                span=match.group(0).strip(),
                ambiguous=ambiguous,
            )
        )
    for match in _TRAILING_STATEMENT.finditer(cleaned):
        found.append(
            _Candidate(match.start(), match.group("letter"), "statement", match.group(0).strip())
        )
    return found


def _lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    position = 0
    for line in text.splitlines(keepends=True):
        out.append((position, line.rstrip("\r\n")))
        position += len(line)
    return out


def _strip_line(line: str) -> str:
    # Markdown around a lone answer: "**C**", "> C", "- C", "### C", "`C`", "$C$".
    stripped = line.strip()
    stripped = re.sub(r"^(?:[>#]+\s*|[-•]\s+)", "", stripped)
    return stripped.strip(" \t*_`$").strip()


def _lone_lines(text: str) -> list[_Candidate]:
    found: list[_Candidate] = []
    for position, line in _lines(text):
        core = _strip_line(line)
        match = _LONE_LINE.match(core)
        if match is not None:
            found.append(_Candidate(position, match.group("letter").upper(), "lone_line", core))
    return found


def _boxed(text: str) -> list[_Candidate]:
    return [
        _Candidate(m.start(), m.group("letter").upper(), "boxed", m.group(0))
        for m in _BOXED.finditer(text)
    ]


def _option_lines(text: str) -> list[_Candidate]:
    found: list[_Candidate] = []
    for position, line in _lines(text):
        match = _OPTION_LINE.match(_strip_line(line))
        if match is not None:
            letter = match.group("p") or match.group("l")
            found.append(_Candidate(position, letter, "option_line", line.strip()))
    return found


def _bold(text: str) -> list[_Candidate]:
    return [
        _Candidate(m.start(), m.group("letter").upper(), "bold", m.group(0))
        for m in _BOLD.finditer(text)
    ]


def extract_letter(text: str) -> LetterExtraction:
    """Extract the final chosen letter from a candidate's answer (see the module docstring).

    The letter is returned in upper case whatever its range; the caller checks it against the
    question's letters.
    """
    strong = _statements(text) + _lone_lines(text) + _boxed(text)
    if strong:
        final = max(strong, key=lambda c: (c.position, c.rule == "statement"))
        return LetterExtraction(final.letter, final.rule, final.ambiguous, final.span)
    options = _option_lines(text)
    if options:
        letters = {c.letter for c in options}
        if len(letters) == 1:
            final = options[-1]
            return LetterExtraction(final.letter, final.rule, span=final.span)
        return LetterExtraction(None, "option_line", ambiguous=True)
    bold = _bold(text)
    if bold:
        final = bold[-1]
        return LetterExtraction(final.letter, final.rule, span=final.span)
    return LetterExtraction(None)


def _validate_letters(letters: str) -> str:
    if not letters or not all("A" <= ch <= "Z" for ch in letters):
        raise ValueError(
            f"MCQ letters must be upper-case ASCII letters, got {letters!r}; "
            "use e.g. 'ABCD' or 'ABCDEFGHIJ'."
        )
    if len(set(letters)) != len(letters):
        raise ValueError(f"MCQ letters must not repeat, got {letters!r}.")
    return letters


class MCQGrader:
    """Letter match for multiple-choice datasets (MMLU-Pro: ``"ABCDEFGHIJ"``, GPQA: ``"ABCD"``).

    The allowed letters of a row are the grader's ``letters``, narrowed to the first
    ``len(metadata["choices"])`` when the row lists its choices (MMLU-Pro questions may have
    fewer than ten options).
    """

    name = "mcq-letter"

    def __init__(self, letters: str = GPQA_LETTERS) -> None:
        self.letters = _validate_letters(letters)

    @classmethod
    def for_dataset(cls, dataset: str) -> MCQGrader:
        """The grader for a built-in MCQ dataset (``mmlu-pro`` or ``gpqa-diamond``)."""
        if dataset == "mmlu-pro":
            return cls(MMLU_PRO_LETTERS)
        if dataset == "gpqa-diamond":
            return cls(GPQA_LETTERS)
        raise ValueError(
            f"Dataset {dataset!r} is not a multiple-choice built-in; "
            "the MCQ grader serves 'mmlu-pro' and 'gpqa-diamond'."
        )

    @property
    def identity(self) -> Mapping[str, Any]:
        """Name, rules version and allowed letters."""
        return {"name": self.name, "version": RULES_VERSION, "letters": self.letters}

    def _row_letters(self, metadata: Mapping[str, Any]) -> str:
        choices = metadata.get("choices")
        if isinstance(choices, Sequence) and not isinstance(choices, str) and choices:
            return self.letters[: len(choices)]
        return self.letters

    def grade_one(self, item: GradeInput) -> Grade:
        """Grade one input (pure and fast; :meth:`grade` runs it off the event loop)."""
        if item.candidate_failed:
            return Grade(
                score=0.0,
                error_kind=CANDIDATE_ERROR,
                message="The candidate failed on this row; nothing to grade.",
            )
        allowed = self._row_letters(item.row.metadata)
        truth = item.row.ground_truth_response.strip().upper()
        if len(truth) != 1 or truth not in allowed:
            return Grade(
                score=0.0,
                error_kind=INVALID_ROW,
                message=(
                    f"The ground truth {item.row.ground_truth_response!r} is not one of the "
                    f"letters {allowed}."
                ),
            )
        found = extract_letter(item.response)
        details: dict[str, Any] = {
            "rule": found.rule,
            "ground_truth": truth,
            "allowed": allowed,
        }
        if found.span is not None:
            details["span"] = found.span[:200]
        if found.letter is None:
            message = (
                "The final answer names several letters."
                if found.ambiguous
                else "No clear answer letter was found in the response."
            )
            return Grade(
                score=0.0,
                scores={"accuracy": 0.0},
                error_kind=NO_ANSWER,
                message=message,
                details=details,
            )
        if found.letter not in allowed:
            return Grade(
                score=0.0,
                scores={"accuracy": 0.0},
                error_kind=NO_ANSWER,
                message=f"The chosen letter {found.letter} is not one of {allowed}.",
                extracted=found.letter,
                details=details,
            )
        score = 1.0 if found.letter == truth else 0.0
        return Grade(
            score=score,
            scores={"accuracy": score},
            extracted=found.letter,
            message=f"Extracted letter: {found.letter}. Ground truth: {truth}.",
            details=details,
        )

    def _grade_all(self, inputs: Sequence[GradeInput]) -> list[Grade]:
        grades: list[Grade] = []
        for item in inputs:
            try:
                grades.append(self.grade_one(item))
            except Exception as exc:  # a grader bug must not lose the row
                grades.append(
                    Grade(
                        score=0.0,
                        error_kind="grader_error",
                        message=f"The MCQ grader failed on this row: {exc!r}.",
                    )
                )
        return grades

    async def grade(self, inputs: Sequence[GradeInput], context: GradingContext) -> GradingOutcome:
        """Grade every input (one worker thread: extraction is cheap regex work)."""
        grades = await asyncio.to_thread(self._grade_all, list(inputs))
        count = len(grades)
        metrics: dict[str, float] = {}
        if count:
            metrics["accuracy"] = sum(g.score for g in grades) / count
            metrics["no_answer_rate"] = sum(g.error_kind == NO_ANSWER for g in grades) / count
        return GradingOutcome(grades=tuple(grades), metrics=metrics)
