"""Rows as Python graders and preprocessors see them, and rows as preprocessors give back.

See :mod:`kyai.graders._python` for the mapping of KYAI rows onto the seed's ``sample``,
``item`` and batch samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kyai.datasets import Row, thaw_json

from ._python_declaration import PreprocessError
from ._types import GradeInput, GradingContext


def _row_fields(row: Row) -> dict[str, Any]:
    fields: dict[str, Any] = dict(thaw_json(row.metadata))
    fields.update(
        instruction=row.instruction,
        ground_truth_response=row.ground_truth_response,
        external_row_id=row.row_id,
    )
    return fields


def sample_dict(item: GradeInput, context: GradingContext) -> dict[str, Any]:
    """The seed's ``sample`` for one row."""
    return {
        "output_text": item.response,
        "extracted_output": item.response.strip(),
        "model": context.candidate_model,
        "prompt": item.row.instruction,
        "task_id": context.dataset,
        "run_id": context.run_id,
        "sample_id": item.row.row_id,
    }


def item_dict(row: Row, context: GradingContext) -> dict[str, Any]:
    """The seed's ``item`` for one row: its fields plus the convenience fields."""
    item = _row_fields(row)
    choices = item.get("choices")
    item.update(
        prompt=row.instruction,
        target=row.ground_truth_response,
        reference_answer=row.ground_truth_response,
        choices=list(choices) if isinstance(choices, list) else [],
        task_id=context.dataset,
    )
    return item


def batch_sample_dict(item: GradeInput, context: GradingContext) -> dict[str, Any]:
    """The seed's batch sample for one row."""
    return {
        "sample_id": item.row.row_id,
        "task_id": context.dataset,
        "model": context.candidate_model,
        "prompt": item.row.instruction,
        "target": item.row.ground_truth_response,
        "output_text": item.response,
        "extracted_output": item.response.strip(),
        "dataset_row": _row_fields(item.row),
        "response_id": None,
        "scores": {},
        "judge": None,
    }


def _row_from_dict(data: Any, position: int, rows: Sequence[Row], mode: str) -> Row:
    where = f"The preprocessor's row {position}"
    if not isinstance(data, dict):
        raise PreprocessError(f"{where} is {_describe(data)}, not a dict; {mode} must return rows.")
    fields = dict(data)
    fallback = rows[position] if mode == "transform" and position < len(rows) else None
    row_id = fields.pop("external_row_id", fallback.row_id if fallback else None)
    instruction = fields.pop("instruction", None)
    ground_truth = fields.pop("ground_truth_response", None)
    if isinstance(row_id, int) and not isinstance(row_id, bool):
        row_id = str(row_id)
    if not isinstance(row_id, str):
        raise PreprocessError(f"{where} has no string 'external_row_id'.")
    for name, text in (("instruction", instruction), ("ground_truth_response", ground_truth)):
        if not isinstance(text, str):
            raise PreprocessError(f"{where} ({row_id!r}) has no string {name!r}.")
    assert isinstance(instruction, str) and isinstance(ground_truth, str)
    odd = _unserializable(fields)
    if odd is not None:
        raise PreprocessError(f"{where} ({row_id!r}) is not a valid row: it holds {odd}.")
    try:
        return Row(
            index=position,
            row_id=row_id,
            instruction=instruction,
            ground_truth_response=ground_truth,
            metadata=fields,
        )
    except TypeError as exc:
        raise PreprocessError(f"{where} ({row_id!r}) is not a valid row: {exc}") from exc


def _unserializable(value: Any) -> str | None:
    """Describe the first value the child could not send as JSON, if any."""
    if isinstance(value, dict):
        if set(value) == {"$unserializable", "repr"}:
            return _describe(value)
        for item in value.values():
            found = _unserializable(item)
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _unserializable(item)
            if found is not None:
                return found
    return None


def _describe(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"$unserializable", "repr"}:
        return f"a {value['$unserializable']} ({value['repr'][:80]})"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, float):
        return f"a non-finite number ({value})"
    if value is None:
        return "None"
    return f"a {type(value).__name__}"
