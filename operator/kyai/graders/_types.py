"""The vocabulary every grader shares: a row's grade, a run's outcome, the grader protocol.

A grader turns the judge-facing copy of each answer (reasoning stripped) into a score in the
KYAI sense: fail-closed, every failure scores 0 with an ``error_kind`` and a message, and no
row is ever dropped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kyai.datasets import Row

#: Error kinds every grader shares (each scores the row 0). Graders add their own.
CANDIDATE_ERROR = "candidate_error"
"""The candidate failed on the row: nothing to grade."""
NO_ANSWER = "grader_no_answer"
"""No answer could be extracted from the response."""
INVALID_ROW = "grader_invalid_row"
"""The row lacks what the grader needs (a ground truth, its instruction arguments...)."""
TIMEOUT = "grader_timeout"
"""The grading of the row ran out of time."""
GRADER_ERROR = "grader_error"
"""The grader itself failed on the row."""


@dataclass(frozen=True)
class Grade:
    """One row's grade.

    ``score`` is the row's KYAI score (the grader's primary metric), 0.0 whenever the row
    could not be graded; ``scores`` holds every finite metric the grader produced for the row
    (Python graders may return several); ``details`` is the grader's payload kept for audit
    (the extracted answer, per-instruction results, the raw invalid result, ...).
    """

    score: float
    scores: Mapping[str, float] = field(default_factory=dict)
    error_kind: str | None = None
    message: str | None = None
    extracted: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the row was graded without error."""
        return self.error_kind is None


@dataclass(frozen=True)
class GradingOutcome:
    """A whole run's grades, one per input in input order, plus run-level metrics."""

    grades: tuple[Grade, ...]
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GradeInput:
    """What a grader gets for one row."""

    row: Row
    #: The judge-facing copy of the answer: ``<think>`` blocks and reasoning fields removed.
    response: str
    #: The answer exactly as the candidate returned it (``content``), or None.
    raw_response: str | None = None
    #: True when the candidate failed on this row: the engine scores it 0 whatever the
    #: grader says, but batch graders still see it (as an empty response).
    candidate_failed: bool = False


#: ``ctx.responses_create`` / ``ctx.embeddings_create`` as the engine provides them to
#: model-backed graders: keyword arguments of the OpenAI Responses / Embeddings request in,
#: the response body as a dict out (``output_text`` filled for responses).
ModelCall = Callable[..., Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ModelBridge:
    """The model calls a model-backed grader may make, routed to the judge endpoint."""

    responses_create: ModelCall
    embeddings_create: ModelCall


@dataclass(frozen=True)
class GradingContext:
    """What the engine tells every grader about the run."""

    dataset: str
    candidate_model: str
    run_id: str
    #: Rows graded at the same time at most (processes, threads or requests).
    concurrency: int = 2
    #: Present when the grader may call models (the seed's ``model_access: mka1``).
    bridge: ModelBridge | None = None


class Grader(Protocol):
    """What the engine calls."""

    #: A short stable name, e.g. ``mcq-letter``, ``math-verify``, ``python:sample``.
    name: str

    @property
    def identity(self) -> Mapping[str, Any]:
        """Everything that changes the grades (name, version, settings, source hash...).

        It goes into the comparison key: two runs are comparable only when it is equal.
        """
        ...

    async def grade(self, inputs: Sequence[GradeInput], context: GradingContext) -> GradingOutcome:
        """Grade every input; never raise for a row's failure (score it 0 instead)."""
        ...
