r"""Python graders and preprocessors, run in the sandbox (:mod:`kyai.graders._sandbox`).

The seed's three contracts: ``sample``, ``batch`` and ``model_backed``.

The declaration is the seed's, as written there, with ``file`` (a path, relative to
``base_dir``) in place of ``file_id``::

    {"grader": {"type": "python", "contract": "sample", "metric_id": "score",
                "source": "def grade(sample, item):\\n    return 1.0\\n",
                "timeout_seconds": 120},
     "preprocess": {"type": "python", "contract": "batch", "file": "prep.py"}}

(the inner ``grader`` object alone is accepted too, and ``preprocess`` may sit inside it).

What the code sees, mapped from KYAI rows:

- ``sample`` (``grade``): ``output_text`` (the judge-facing copy of the answer),
  ``extracted_output`` (the same, stripped of surrounding whitespace), ``model`` (the
  candidate), ``prompt`` (the row's instruction), ``task_id`` (the dataset name), ``run_id``,
  ``sample_id`` (the row id).
- ``item``: the row's metadata flattened in, then ``instruction``, ``ground_truth_response``,
  ``external_row_id`` (the row id), and the convenience fields ``prompt``, ``target`` and
  ``reference_answer`` (the ground truth), ``choices`` (the metadata's, or ``[]``),
  ``task_id``.
- batch samples (``grade_batch``): ``sample_id``, ``task_id``, ``model``, ``prompt``,
  ``target``, ``output_text``, ``extracted_output``, ``dataset_row`` (the row's fields and
  metadata), ``response_id`` (None), ``scores`` (``{}``), ``judge`` (None).
- preprocessor rows (``transform`` / ``transform_batch``): the row's metadata flattened in,
  then ``instruction``, ``ground_truth_response``, ``external_row_id``. What comes back
  becomes the rows: those three keys give the row's fields (``external_row_id`` its id), every
  other key its metadata.

Return handling, exactly as the seed says:

- a finite number (not a boolean) → ``scores[metric_id]``;
- a dict with a ``scores`` object → its finite numbers (booleans are not numbers; other values
  are dropped and listed in ``details["dropped_scores"]``), plus the optional ``judge``
  payload (kept in ``details["judge"]``);
- anything else is invalid and scores 0 with ``error_kind`` ``grader_invalid_result``:
  NaN/Infinity, booleans, strings, lists, ``None``, dicts without a finite score; the raw value
  and the error go to ``details["judge"]`` (``invalid_result``, ``error``).

A row's KYAI score (``Grade.score``) is ``scores[metric_id]`` when present; otherwise, when the
grader returned exactly one metric, that one; otherwise the first declared metric (``metrics``)
it returned; otherwise the first key it returned. A KYAI score must lie in [0, 1]: one outside
scores 0 with ``grader_score_out_of_range`` (``scores`` still hold the value).

Failures (the row scores 0, ``details["judge"]["error"]`` says why): ``grader_exception``
(the code raised; the traceback is kept), ``grader_timeout`` (``timeout_seconds`` of wall clock
or the CPU limit), ``grader_memory_limit``, ``grader_crash`` (the process died),
``grader_output_limit``, ``grader_sandbox_error``; ``candidate_error`` when the candidate failed
on the row (a per-sample grader is not run then).

Execution: ``per_sample`` runs ``grade`` once per row, each in its own sandbox (timeout and
``max_model_calls`` per row), at most ``context.concurrency`` at a time; run-level metrics are
the mean of each returned metric over the rows that returned it. ``aggregate`` runs
``grade_batch`` once over all rows; its ``metrics`` are the run-level metrics (undeclared ids
dropped when ``metrics`` are declared) and its ``samples`` updates give per-row ``scores``,
``judge`` and ``extracted_output``; a row without an update's score gets 0 (no error: the
grader only reports aggregates). Model calls (``ctx.responses_create`` /
``ctx.embeddings_create``) go to :attr:`GradingContext.bridge` with ``stream``, ``store`` and
``background`` removed; the bridge picks the run's judge / embedding model for ``model="auto"``
or none; every call is logged in ``details["model_calls"]``.

This module reads what the code returns and grades rows; the declarations are
:mod:`~kyai.graders._python_declaration`, the rows as the code sees them
:mod:`~kyai.graders._python_rows`, the sandboxed program :mod:`~kyai.graders._python_program`
and preprocessors :mod:`~kyai.graders._python_preprocess`.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from ._python_declaration import (
    _VERSION,
    GraderDeclaration,
    GraderDeclarationError,
    PreprocessDeclaration,
    PreprocessError,
    _default_execution,
    _model_access,
    _parse_declaration,
    _read_source,
    _require,
    _top_level_names,
)
from ._python_preprocess import PythonPreprocessor
from ._python_program import _bridge_handler, _Program
from ._python_rows import _describe, batch_sample_dict, item_dict, sample_dict
from ._sandbox import BridgeHandler, SandboxLimits, SandboxResult
from ._types import CANDIDATE_ERROR, Grade, GradeInput, GradingContext, GradingOutcome

__all__ = [
    "GraderDeclaration",
    "GraderDeclarationError",
    "PreprocessDeclaration",
    "PreprocessError",
    "PythonGrader",
    "PythonPreprocessor",
    "batch_sample_dict",
    "interpret_result",
    "item_dict",
    "primary_score",
    "sample_dict",
]

#: Largest raw payload kept in a grade's details, as JSON text.
_MAX_RAW_CHARS = 16_384


def _finite_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _clip_raw(value: Any) -> Any:
    """The raw payload as kept in details: itself, or its JSON text cut short when huge."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)[:_MAX_RAW_CHARS]
    if len(text) <= _MAX_RAW_CHARS:
        return value
    return text[:_MAX_RAW_CHARS] + "…"


def interpret_result(
    value: Any, *, metric_id: str
) -> tuple[dict[str, float], Any, dict[str, Any], str | None]:
    """Read a ``grade`` return value as the seed says.

    Returns ``(scores, judge, dropped, error)``: the finite scores kept, the ``judge``
    payload (or None), the score entries dropped (not finite numbers) and, for an invalid
    result, a sentence saying why (then ``scores`` is empty).
    """
    if _finite_number(value):
        return {metric_id: float(value)}, None, {}, None
    if not isinstance(value, dict) or set(value) == {"$unserializable", "repr"}:
        return (
            {},
            None,
            {},
            (
                f"The grader returned {_describe(value)}; it must return a finite number or a "
                "dict with finite numeric 'scores'."
            ),
        )
    raw_scores = value.get("scores")
    judge = value.get("judge")
    if not isinstance(raw_scores, dict):
        return (
            {},
            judge,
            {},
            (
                "The grader returned a dict without a 'scores' object; put the numbers in "
                "{'scores': {...}}."
            ),
        )
    scores: dict[str, float] = {}
    dropped: dict[str, Any] = {}
    for key, score in raw_scores.items():
        if _finite_number(score):
            scores[str(key)] = float(score)
        else:
            dropped[str(key)] = _clip_raw(score)
    if not scores:
        return (
            {},
            judge,
            dropped,
            (
                "The grader returned no finite numeric score (booleans, strings, NaN and "
                "Infinity do not count)."
            ),
        )
    return scores, judge, dropped, None


def primary_score(
    scores: Mapping[str, float], *, metric_id: str, declared: Sequence[str] | None
) -> float | None:
    """The row's KYAI score among its scores (see the module docstring), or None."""
    if metric_id in scores:
        return scores[metric_id]
    if len(scores) == 1:
        return next(iter(scores.values()))
    for metric in declared or ():
        if metric in scores:
            return scores[metric]
    return next(iter(scores.values()), None)


_FAILURE_KINDS = {
    "timeout": "grader_timeout",
    "cpu_limit": "grader_timeout",
    "memory": "grader_memory_limit",
    "exception": "grader_exception",
    "syntax": "grader_exception",
    "unserializable": "grader_invalid_result",
    "crash": "grader_crash",
    "output_limit": "grader_output_limit",
    "protocol": "grader_sandbox_error",
    "sandbox_error": "grader_sandbox_error",
}


def _failure(result: SandboxResult) -> tuple[str, str, dict[str, Any]]:
    """(error_kind, message, judge payload) for a failed sandbox run."""
    kind = _FAILURE_KINDS.get(result.error_kind or "", "grader_sandbox_error")
    message = result.message or kind
    error: dict[str, Any] = {"kind": kind, "message": message}
    if result.traceback:
        error["traceback"] = result.traceback
    return kind, message, {"error": error}


#: Error kinds of a row whose grader returned something unusable (counted as invalid).
_INVALID_KINDS = frozenset({"grader_invalid_result", "grader_score_out_of_range"})


class PythonGrader:
    """A user's Python grader (the seed's contracts) run in the sandbox."""

    def __init__(
        self,
        declaration: GraderDeclaration,
        program: _Program,
        *,
        execution: Literal["per_sample", "aggregate"],
        preprocessor: PythonPreprocessor | None,
    ) -> None:
        self.declaration = declaration
        self.execution = execution
        #: The grader's preprocessor, when the declaration has one (the engine runs it).
        self.preprocessor = preprocessor
        #: Whether ``ctx.responses_create`` / ``ctx.embeddings_create`` reach the bridge.
        self.model_access = _model_access(declaration)
        self.name = f"python:{declaration.contract}"
        self._program = program

    @classmethod
    def from_declaration(
        cls,
        decl: Mapping[str, Any],
        *,
        base_dir: str | Path | None = None,
        limits: SandboxLimits | None = None,
    ) -> PythonGrader:
        """Build from the seed's declaration (``{"grader": {...}}`` or the inner object).

        ``file`` paths are relative to ``base_dir`` (default: the working directory);
        ``limits`` sets the sandbox's other limits (memory, ...), while ``timeout_seconds``
        and ``max_model_calls`` come from the declaration. Raises
        :class:`GraderDeclarationError` naming the field at fault.
        """
        if not isinstance(decl, Mapping):
            raise GraderDeclarationError(
                f"A grader declaration is a JSON object, got {type(decl).__name__}."
            )
        declaration, sibling_preprocess = _parse_declaration(decl)
        if declaration.preprocess is not None and sibling_preprocess is not None:
            raise GraderDeclarationError(
                "preprocess: declared both inside 'grader' and beside it; keep one."
            )
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        source, filename = _read_source(declaration.source, declaration.file, base, "grader")
        names = _top_level_names(source, filename, "grader")
        execution = declaration.execution or _default_execution(declaration.contract, names)
        function = "grade" if execution == "per_sample" else "grade_batch"
        _require(names, function, "grader", f"execution {execution!r}")
        model_access = _model_access(declaration)
        sandbox = replace(
            limits or SandboxLimits(),
            timeout_seconds=declaration.timeout_seconds,
            max_calls=declaration.max_model_calls if model_access else 0,
        )
        preprocess_decl = declaration.preprocess or sibling_preprocess
        preprocessor = (
            PythonPreprocessor.from_declaration(preprocess_decl, base_dir=base, limits=limits)
            if preprocess_decl is not None
            else None
        )
        return cls(
            declaration,
            _Program(source, filename, sandbox),
            execution=execution,
            preprocessor=preprocessor,
        )

    @classmethod
    def from_file(cls, path: str | Path, *, limits: SandboxLimits | None = None) -> PythonGrader:
        """Read a JSON declaration file; ``file`` paths in it are relative to its directory."""
        path = Path(path)
        try:
            decl = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise GraderDeclarationError(
                f"Cannot read the grader declaration {str(path)!r}: {exc}"
            ) from exc
        return cls.from_declaration(decl, base_dir=path.parent, limits=limits)

    @property
    def identity(self) -> Mapping[str, Any]:
        """Everything that changes the grades: contract, settings and the source's hash."""
        decl = self.declaration
        return {
            "name": self.name,
            "version": _VERSION,
            "contract": decl.contract,
            "execution": self.execution,
            "model_access": "mka1" if self.model_access else "none",
            "metric_id": decl.metric_id,
            "metrics": list(decl.metrics) if decl.metrics is not None else None,
            "timeout_seconds": decl.timeout_seconds,
            "max_model_calls": decl.max_model_calls,
            "source_sha256": self._program.sha256,
            "preprocess": dict(self.preprocessor.identity) if self.preprocessor else None,
        }

    async def grade(self, inputs: Sequence[GradeInput], context: GradingContext) -> GradingOutcome:
        """Grade every input; a row's failure scores it 0 (never raises for a row)."""
        if self.execution == "aggregate":
            return await self._grade_batch(inputs, context)
        gate = asyncio.Semaphore(max(1, context.concurrency))

        async def one(item: GradeInput) -> Grade:
            async with gate:
                return await self._grade_sample(item, context)

        grades = tuple(await asyncio.gather(*(one(item) for item in inputs)))
        return GradingOutcome(grades=grades, metrics=self._sample_metrics(grades))

    def _sample_metrics(self, grades: Sequence[Grade]) -> dict[str, float]:
        """Run-level means over every row: an invalid or errored row counts 0 for each metric.

        The seed's contract ("invalid results score zero") applies to the run metrics too:
        dividing by the rows that returned the key would let 2 valid rows of 6 read 1.0.
        ``invalid_rows`` / ``errored_rows`` say how many rows counted 0 that way (present
        only when not zero, so a clean run's metrics are the grader's own keys).
        """
        totals: dict[str, float] = {}
        invalid = errored = 0
        for grade in grades:
            if grade.error_kind in _INVALID_KINDS:
                invalid += 1
            elif grade.error_kind is not None:
                errored += 1
            for key, value in grade.scores.items():
                totals[key] = totals.get(key, 0.0) + (value if grade.ok else 0.0)
        declared = self.declaration.metrics
        rows = max(1, len(grades))
        metrics = {
            key: total / rows
            for key, total in totals.items()
            if declared is None or key in declared
        }
        for key, count in (("invalid_rows", invalid), ("errored_rows", errored)):
            if count:
                metrics[key] = float(count)
        return metrics

    def _bridge(self, context: GradingContext, log: list[dict[str, Any]]) -> BridgeHandler | None:
        return _bridge_handler(context.bridge, log) if self.model_access else None

    async def _grade_sample(self, item: GradeInput, context: GradingContext) -> Grade:
        if item.candidate_failed:
            return Grade(
                score=0.0,
                error_kind=CANDIDATE_ERROR,
                message="The candidate failed on this row; the grader was not run.",
            )
        log: list[dict[str, Any]] = []
        sample = sample_dict(item, context)
        payload = {
            "mode": "grade",
            "sample": sample,
            "item": item_dict(item.row, context),
            "model_access": self.model_access,
            "max_model_calls": self.declaration.max_model_calls,
        }
        result = await self._program.run(payload, bridge=self._bridge(context, log))
        details: dict[str, Any] = {}
        if log:
            details["model_calls"] = log
        if result.output_tail:
            details["output_tail"] = result.output_tail[-2000:]
        if result.notes:
            details["sandbox_notes"] = list(result.notes)
        extracted: str = sample["extracted_output"]
        if not result.ok:
            kind, message, judge = _failure(result)
            return Grade(
                score=0.0,
                error_kind=kind,
                message=message,
                extracted=extracted,
                details={**details, "judge": judge},
            )
        scores, judge, dropped, error = interpret_result(
            result.value, metric_id=self.declaration.metric_id
        )
        if dropped:
            details["dropped_scores"] = dropped
        if error is not None:
            return Grade(
                score=0.0,
                error_kind="grader_invalid_result",
                message=error,
                extracted=extracted,
                details={
                    **details,
                    "judge": {
                        "invalid_result": _clip_raw(result.value),
                        "error": {"kind": "grader_invalid_result", "message": error},
                    },
                },
            )
        if judge is not None:
            details["judge"] = _clip_raw(judge)
        return self._scored(scores, extracted=extracted, details=details)

    def _scored(
        self,
        scores: dict[str, float],
        *,
        extracted: str | None,
        details: dict[str, Any],
        error_kind: str | None = None,
        message: str | None = None,
    ) -> Grade:
        decl = self.declaration
        primary = primary_score(scores, metric_id=decl.metric_id, declared=decl.metrics)
        if primary is None:
            return Grade(
                score=0.0,
                scores=scores,
                error_kind=error_kind,
                message=message,
                extracted=extracted,
                details=details,
            )
        if error_kind is None and not 0.0 <= primary <= 1.0:
            return Grade(
                score=0.0,
                scores=scores,
                error_kind="grader_score_out_of_range",
                message=f"The row's score {primary!r} is outside [0, 1]; it counts as 0.",
                extracted=extracted,
                details=details,
            )
        return Grade(
            score=primary if error_kind is None else 0.0,
            scores=scores,
            error_kind=error_kind,
            message=message,
            extracted=extracted,
            details=details,
        )

    async def _grade_batch(
        self, inputs: Sequence[GradeInput], context: GradingContext
    ) -> GradingOutcome:
        log: list[dict[str, Any]] = []
        samples = [batch_sample_dict(item, context) for item in inputs]
        payload = {
            "mode": "grade_batch",
            "samples": samples,
            "model_access": self.model_access,
            "max_model_calls": self.declaration.max_model_calls,
        }
        result = await self._program.run(payload, bridge=self._bridge(context, log))
        shared: dict[str, Any] = {}
        if log:
            shared["model_calls"] = log
        if result.output_tail:
            shared["output_tail"] = result.output_tail[-2000:]
        if result.notes:
            shared["sandbox_notes"] = list(result.notes)
        if not result.ok:
            kind, message, judge = _failure(result)
            return self._all_failed(inputs, samples, kind, message, {**shared, "judge": judge})
        metrics, updates, notes, error = self._read_batch(result.value)
        if error is not None:
            judge = {
                "invalid_result": _clip_raw(result.value),
                "error": {"kind": "grader_invalid_result", "message": error},
            }
            return self._all_failed(
                inputs, samples, "grader_invalid_result", error, {**shared, "judge": judge}
            )
        if notes:
            shared["batch_notes"] = notes
        grades = []
        for item, sample in zip(inputs, samples, strict=True):
            grades.append(self._batch_grade(item, sample, updates.get(sample["sample_id"]), shared))
        return GradingOutcome(grades=tuple(grades), metrics=metrics)

    def _all_failed(
        self,
        inputs: Sequence[GradeInput],
        samples: Sequence[Mapping[str, Any]],
        kind: str,
        message: str,
        details: dict[str, Any],
    ) -> GradingOutcome:
        grades = tuple(
            Grade(
                score=0.0,
                error_kind=CANDIDATE_ERROR if item.candidate_failed else kind,
                message=message,
                extracted=sample["extracted_output"],
                details=details,
            )
            for item, sample in zip(inputs, samples, strict=True)
        )
        return GradingOutcome(grades=grades)

    def _read_batch(
        self, value: Any
    ) -> tuple[dict[str, float], dict[str, dict[str, Any]], list[str], str | None]:
        """(metrics, updates by sample id, notes, error) from a ``grade_batch`` value."""
        if not isinstance(value, dict) or set(value) == {"$unserializable", "repr"}:
            return (
                {},
                {},
                [],
                (
                    f"grade_batch returned {_describe(value)}; it must return a dict with "
                    "'metrics' and/or 'samples'."
                ),
            )
        notes: list[str] = []
        metrics: dict[str, float] = {}
        raw_metrics = value.get("metrics", {})
        if not isinstance(raw_metrics, dict):
            notes.append(f"'metrics' is {_describe(raw_metrics)}, not an object; ignored.")
            raw_metrics = {}
        declared = self.declaration.metrics
        for key, metric in raw_metrics.items():
            if not _finite_number(metric):
                notes.append(f"metric {key!r} dropped: {_describe(metric)} is not a finite number.")
            elif declared is not None and key not in declared:
                notes.append(f"metric {key!r} dropped: it is not among the declared metrics.")
            else:
                metrics[str(key)] = float(metric)
        updates: dict[str, dict[str, Any]] = {}
        raw_updates = value.get("samples", [])
        if not isinstance(raw_updates, list):
            notes.append(f"'samples' is {_describe(raw_updates)}, not a list; ignored.")
            raw_updates = []
        any_score = False
        for position, update in enumerate(raw_updates):
            if not isinstance(update, dict) or not isinstance(update.get("sample_id"), str):
                notes.append(f"samples[{position}] has no 'sample_id'; ignored.")
                continue
            merged = updates.setdefault(update["sample_id"], {"scores": {}, "dropped": {}})
            raw_scores = update.get("scores", {})
            if isinstance(raw_scores, dict):
                for key, score in raw_scores.items():
                    if _finite_number(score):
                        merged["scores"][str(key)] = float(score)
                        any_score = True
                    else:
                        merged["dropped"][str(key)] = _clip_raw(score)
            if "judge" in update:
                merged["judge"] = update["judge"]
            if "extracted_output" in update and (
                update["extracted_output"] is None or isinstance(update["extracted_output"], str)
            ):
                merged["extracted_output"] = update["extracted_output"]
        if not metrics and not any_score:
            return {}, {}, notes, ("grade_batch returned no finite numeric metric or sample score.")
        return metrics, updates, notes, None

    def _batch_grade(
        self,
        item: GradeInput,
        sample: Mapping[str, Any],
        update: Mapping[str, Any] | None,
        shared: Mapping[str, Any],
    ) -> Grade:
        details: dict[str, Any] = dict(shared)
        extracted: str | None = sample["extracted_output"]
        scores: dict[str, float] = {}
        if update is not None:
            scores = dict(update["scores"])
            if update["dropped"]:
                details["dropped_scores"] = update["dropped"]
            if update.get("judge") is not None:
                details["judge"] = _clip_raw(update["judge"])
            if "extracted_output" in update:
                extracted = update["extracted_output"]
        if item.candidate_failed:
            return self._scored(
                scores,
                extracted=extracted,
                details=details,
                error_kind=CANDIDATE_ERROR,
                message="The candidate failed on this row.",
            )
        if not scores:
            details["note"] = "grade_batch returned no score for this sample; see the metrics."
        return self._scored(scores, extracted=extracted, details=details)
