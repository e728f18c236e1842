"""Custom datasets: a user's JSONL or CSV file with ``instruction`` and ``ground_truth_response``.

Rules (also in BUILTINS.md, "Custom datasets"):

- ``.jsonl``: one JSON object per line; blank lines are skipped (line numbers stay true).
  ``.csv``: a header row naming the columns, RFC 4180 quoting (quoted fields may hold commas,
  quotes as ``""`` and line breaks). Either may be gzipped (``.jsonl.gz``, ``.csv.gz``).
  UTF-8 only; a UTF-8 byte-order mark is accepted.
- ``instruction`` and ``ground_truth_response`` are required in every row and must be strings
  (a JSON number, boolean, array, object or null is rejected, never converted). The
  instruction must not be empty or whitespace-only; the ground truth may be empty.
- ``external_row_id`` is optional. It may be a string or an integer (integers are written in
  decimal, so a CSV ``17`` and a JSONL ``17`` give the same id). A row without one (field
  absent, JSON ``null``, or an empty CSV cell) gets its sequential id: its 1-based position,
  ``"1"``, ``"2"``, ... Ids must be unique across the file (both lines are named otherwise).
- Other fields/columns are ignored. Values are kept exactly (no whitespace trimming).
- Row order is the file's order. Name = file stem, version ``"custom"``, metadata ``{}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._errors import DatasetError
from ._io import Record, describe_type, read_records
from ._model import Dataset, Prompts, Row, dataset_sha256

__all__ = ["CUSTOM_FORMATS", "custom_row_problems", "dataset_stem", "load_custom"]

CUSTOM_FORMATS = ("jsonl", "csv")
REQUIRED_FIELDS = ("instruction", "ground_truth_response")
ID_FIELD = "external_row_id"


def dataset_stem(path: Path) -> str:
    """The dataset name for a file: its name without the format (and ``.gz``) suffixes."""
    name = path.name
    for suffix in (".gz", ".jsonl", ".csv"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name or path.name


def _string_field(path: Path, record: Record, name: str) -> str:
    if name not in record.values:
        raise record.error(
            path,
            f"The required field '{name}' is missing; every row needs 'instruction' and "
            "'ground_truth_response'.",
            field=name,
        )
    value = record.values[name]
    if not isinstance(value, str):
        raise record.error(
            path,
            f"The value must be a string, got {describe_type(value)}"
            f"{'' if value is None else f' ({_short(value)})'}; quote it in JSON.",
            field=name,
        )
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _row_id(path: Path, record: Record, position: int) -> tuple[str, bool]:
    """(row id, explicit?) for the record at 0-based ``position``."""
    value = record.values.get(ID_FIELD)
    if value is None or value == "":
        return str(position + 1), False
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise record.error(
            path,
            f"The value must be a string or an integer, got {describe_type(value)} "
            f"({_short(value)}).",
            field=ID_FIELD,
        )
    return str(value), True


def read_custom_rows(path: Path) -> tuple[Row, ...]:
    """Parse and validate a custom dataset file into rows (see the module docstring)."""
    records = read_records(path, allowed=CUSTOM_FORMATS, required_csv=REQUIRED_FIELDS)
    rows: list[Row] = []
    seen: dict[str, tuple[Record, bool]] = {}
    for position, record in enumerate(records):
        instruction = _string_field(path, record, "instruction")
        if not instruction.strip():
            raise record.error(path, "The instruction is empty.", field="instruction")
        ground_truth = _string_field(path, record, "ground_truth_response")
        row_id, explicit = _row_id(path, record, position)
        if row_id in seen:
            first, first_explicit = seen[row_id]
            how = "" if explicit else " (assigned sequentially: this row has no external_row_id)"
            first_how = "" if first_explicit else " (assigned sequentially)"
            raise record.error(
                path,
                f"Duplicate row id '{row_id}'{how}: {first.where()} already has this id"
                f"{first_how}; external_row_id values must be unique.",
                field=ID_FIELD,
            )
        seen[row_id] = (record, explicit)
        rows.append(
            Row(
                index=position,
                row_id=row_id,
                instruction=instruction,
                ground_truth_response=ground_truth,
            )
        )
    return tuple(rows)


def custom_row_problems(path: Path) -> list[DatasetError]:
    """Every row's problem with its required fields, in file order.

    :func:`read_custom_rows` stops at the first; this names them all (``kyai run``'s checks
    before anything is sent). The file's own problem alone when it cannot be read; row ids
    are :func:`read_custom_rows`' to check.
    """
    try:
        records = read_records(path, allowed=CUSTOM_FORMATS, required_csv=REQUIRED_FIELDS)
    except DatasetError as exc:
        return [exc]
    problems: list[DatasetError] = []
    for record in records:
        for name in REQUIRED_FIELDS:
            try:
                value = _string_field(path, record, name)
            except DatasetError as exc:
                problems.append(exc)
                continue
            if name == "instruction" and not value.strip():
                problems.append(record.error(path, "The instruction is empty.", field=name))
    return problems


def load_custom(path: Path, *, generation_prompt: str, judge_prompt: str | None) -> Dataset:
    """Load a custom dataset file with the caller's prompts."""
    rows = read_custom_rows(path)
    return Dataset(
        name=dataset_stem(path),
        version="custom",
        builtin=False,
        rows=rows,
        prompts=Prompts(generation=generation_prompt, judge=judge_prompt),
        sha256=dataset_sha256(rows),
        source=str(path),
    )
