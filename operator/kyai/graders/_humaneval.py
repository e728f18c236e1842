"""The HumanEval grader: run the answer against the problem's tests in the sandbox.

Each row's answer (the judge-facing copy) is completed into a program as
:mod:`kyai.graders._humaneval_child` describes (fences, whole functions and bodies are
accepted; see its docstring), the row's ``test`` code is run and ``check(<entry_point>)`` is
called, in a fresh sandboxed interpreter per row (:func:`kyai.graders._sandbox.run_sandboxed`).

Passing scores 1. Anything else scores 0 with an ``error_kind``:

- ``grader_syntax_error``: no reading of the answer compiles;
- ``grader_assertion``: a test assertion failed;
- ``grader_timeout``: the tests did not finish in time (wall clock or CPU);
- ``grader_crash``: any other exception (``NameError``, ``MemoryError``, ...), the process
  died, or the sandbox failed;
- ``grader_bad_row``: the row lacks HumanEval's ``test`` / ``entry_point`` metadata;
- ``candidate_error``: the candidate failed on this row (nothing is run).

``Grade.details`` keep the form the answer was read in (``function``, ``body``, ...), the
failing test line and the tail of what the program printed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._sandbox import SandboxLimits, SandboxResult, run_sandboxed
from ._types import CANDIDATE_ERROR, Grade, GradeInput, GradingContext, GradingOutcome

__all__ = ["HumanEvalGrader"]

_HARNESS = Path(__file__).with_name("_humaneval_child.py")
_VERSION = "1"


class HumanEvalGrader:
    """Execute HumanEval's tests on each answer; pass → 1, anything else → 0.

    Args:
        timeout_seconds: wall-clock limit per problem (HumanEval's own harness uses 3 s; the
            default leaves room for a loaded machine).
        memory_bytes: address-space limit per problem.
    """

    name = "humaneval-exec"

    def __init__(self, *, timeout_seconds: float = 10.0, memory_bytes: int = 1024**3) -> None:
        self._limits = SandboxLimits(timeout_seconds=timeout_seconds, memory_bytes=memory_bytes)

    @property
    def identity(self) -> Mapping[str, Any]:
        """Name, rule version and the limits that can change a grade."""
        return {
            "name": self.name,
            "version": _VERSION,
            "timeout_seconds": self._limits.timeout_seconds,
            "memory_bytes": self._limits.memory_bytes,
        }

    async def grade(self, inputs: Sequence[GradeInput], context: GradingContext) -> GradingOutcome:
        """Grade every answer, at most ``context.concurrency`` sandboxes at a time."""
        gate = asyncio.Semaphore(max(1, context.concurrency))

        async def one(item: GradeInput) -> Grade:
            async with gate:
                return await self.grade_one(item)

        grades = await asyncio.gather(*(one(item) for item in inputs))
        passed = sum(1 for grade in grades if grade.score == 1.0)
        metrics = {"pass_at_1": passed / len(grades)} if grades else {}
        return GradingOutcome(grades=tuple(grades), metrics=metrics)

    async def grade_one(self, item: GradeInput) -> Grade:
        """Grade one answer (never raises)."""
        if item.candidate_failed:
            return Grade(
                score=0.0,
                error_kind=CANDIDATE_ERROR,
                message="The candidate failed on this row; nothing was run.",
            )
        metadata = item.row.metadata
        test = metadata.get("test")
        entry_point = metadata.get("entry_point")
        prompt = metadata.get("prompt", item.row.instruction)
        if not isinstance(test, str) or not isinstance(entry_point, str) or not entry_point:
            return Grade(
                score=0.0,
                error_kind="grader_bad_row",
                message=f"Row {item.row.row_id!r} has no HumanEval 'test' and 'entry_point' "
                "metadata; the humaneval grader cannot run it.",
            )
        payload = {
            "prompt": str(prompt),
            "completion": item.response,
            "test": test,
            "entry_point": entry_point,
        }
        result = await run_sandboxed("run", payload, module_file=_HARNESS, limits=self._limits)
        return _grade(result)


def _grade(result: SandboxResult) -> Grade:
    details: dict[str, Any] = {"output_tail": result.output_tail[-2000:]}
    if result.notes:
        details["sandbox_notes"] = list(result.notes)
    if not result.ok:
        if result.error_kind in ("timeout", "cpu_limit"):
            kind = "grader_timeout"
        else:
            kind = "grader_crash"
        if result.traceback:
            details["traceback"] = result.traceback
        return Grade(score=0.0, error_kind=kind, message=result.message, details=details)
    value = result.value if isinstance(result.value, dict) else {}
    status = value.get("status")
    details["form"] = value.get("form")
    if status == "passed":
        return Grade(score=1.0, scores={"pass": 1.0}, details=details)
    if status == "syntax_error":
        return Grade(
            score=0.0,
            scores={"pass": 0.0},
            error_kind="grader_syntax_error",
            message=str(value.get("message")),
            details=details,
        )
    if status == "failed":
        exception_type = value.get("exception_type")
        where = value.get("where") or ""
        details["where"] = where
        details["traceback"] = value.get("traceback")
        message = str(value.get("message"))
        if where:
            message = f"{message} ({where})"
        return Grade(
            score=0.0,
            scores={"pass": 0.0},
            error_kind="grader_assertion" if exception_type == "AssertionError" else "grader_crash",
            message=message,
            details=details,
        )
    if status == "bad_test":
        return Grade(
            score=0.0,
            error_kind="grader_bad_row",
            message=f"The row's test code does not compile: {value.get('message')}",
            details=details,
        )
    return Grade(
        score=0.0,
        error_kind="grader_crash",
        message="The HumanEval harness returned an unexpected result.",
        details={**details, "raw_result": value},
    )
