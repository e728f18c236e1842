"""Immutable dataset model: rows, prompts, datasets, and the dataset content hash.

Content hash (``Dataset.sha256``, :func:`dataset_sha256`): the SHA-256 hex digest of the rows'
canonical JSONL form, which is one line per row, in row order, each line being::

    json.dumps({"row_id": ..., "instruction": ..., "ground_truth_response": ...,
                "metadata": {...}},
               sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

followed by a line feed (U+000A), the whole encoded as UTF-8. ``index`` is not part of a
line (it is the line's position). Dataset name, version, source and prompts are not part of
the hash either: two files holding the same rows have the same hash. The form depends only on
the row values, never on the machine, the Python version or the file the rows came from.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "Dataset",
    "Prompts",
    "Row",
    "canonical_jsonl",
    "dataset_sha256",
    "freeze_json",
    "thaw_json",
]


def freeze_json(value: Any, *, where: str = "metadata") -> Any:
    """Return a deeply immutable copy of a JSON-like value.

    Objects become read-only mappings (``MappingProxyType``) and arrays become tuples; strings,
    integers, finite floats, booleans and ``None`` are kept. Anything else (sets, bytes, NaN,
    non-string keys, ...) raises ``TypeError``, so frozen values are always JSON-serialisable.
    """
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(
                f"{where} holds a non-finite number ({value!r}), which JSON cannot hold."
            )
        return value
    if isinstance(value, Mapping):
        frozen: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has a non-string key {key!r}; JSON keys are strings.")
            frozen[key] = freeze_json(item, where=f"{where}.{key}")
        return MappingProxyType(frozen)
    if isinstance(value, list | tuple):
        return tuple(freeze_json(item, where=f"{where}[{i}]") for i, item in enumerate(value))
    raise TypeError(f"{where} holds a {type(value).__name__}, which is not a JSON value.")


def thaw_json(value: Any) -> Any:
    """Return a plain ``dict``/``list`` copy of a value made by :func:`freeze_json`."""
    if isinstance(value, Mapping):
        return {key: thaw_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [thaw_json(item) for item in value]
    return value


@dataclass(frozen=True)
class Row:
    """One question of a dataset.

    Attributes:
        index: 0-based position of the row in its dataset (row order).
        row_id: the row's id: ``external_row_id`` for custom data (sequential ``"1"``,
            ``"2"``, ... when absent), the native id for built-ins (see BUILTINS.md).
        instruction: the prompt sent to the candidate model.
        ground_truth_response: the reference answer the judge compares against.
        metadata: native extras graders need later (read-only, JSON-serialisable; ``{}`` for
            custom rows).
    """

    index: int
    row_id: str
    instruction: str
    ground_truth_response: str
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise TypeError(f"Row.index must be a non-negative integer, got {self.index!r}.")
        for name in ("row_id", "instruction", "ground_truth_response"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Row.{name} must be a string, got {getattr(self, name)!r}.")
        if not isinstance(self.metadata, Mapping):
            raise TypeError(f"Row.metadata must be a mapping, got {self.metadata!r}.")
        object.__setattr__(self, "metadata", freeze_json(self.metadata))

    def canonical_dict(self) -> dict[str, Any]:
        """The row's content as hashed: row_id, instruction, ground_truth_response, metadata."""
        return {
            "row_id": self.row_id,
            "instruction": self.instruction,
            "ground_truth_response": self.ground_truth_response,
            "metadata": thaw_json(self.metadata),
        }


@dataclass(frozen=True)
class Prompts:
    """The two system prompts of a dataset.

    Attributes:
        generation: the generation system prompt sent to the candidate before each instruction.
        judge: the judge prompt, or ``None`` for a custom dataset loaded without one (the judge
            phase then requires it).
        generation_id: the seed id of a built-in's default generation prompt, ``None`` when the
            prompt is custom or overridden.
        judge_id: likewise for the judge prompt.
    """

    generation: str
    judge: str | None
    generation_id: str | None = None
    judge_id: str | None = None


@dataclass(frozen=True)
class Dataset:
    """A named, ordered, immutable question set with its prompts.

    Attributes:
        name: built-in name (e.g. ``"mmlu-pro"``) or custom dataset name (the file stem).
        version: ``"v1"`` for built-ins, ``"custom"`` for custom data.
        builtin: whether this is one of the built-in snapshots.
        rows: the questions in row order; ``rows[i].index == i``.
        prompts: generation and judge prompts.
        sha256: content hash of the rows (:func:`dataset_sha256`).
        source: human-readable origin: a file path or ``hf://<repo>/<file>@<revision>``.
    """

    name: str
    version: str
    builtin: bool
    rows: tuple[Row, ...]
    prompts: Prompts
    sha256: str
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(self.rows))
        for position, row in enumerate(self.rows):
            if row.index != position:
                raise ValueError(
                    f"Row {row.row_id!r} has index {row.index} but sits at position {position}; "
                    "row indexes must follow row order."
                )

    def __len__(self) -> int:
        return len(self.rows)


def _canonical_line(row: Row) -> str:
    return json.dumps(
        row.canonical_dict(),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def canonical_jsonl(rows: Iterable[Row]) -> bytes:
    """The canonical JSONL serialisation of rows that :func:`dataset_sha256` hashes."""
    return "".join(_canonical_line(row) + "\n" for row in rows).encode("utf-8")


def dataset_sha256(rows: Iterable[Row]) -> str:
    """SHA-256 hex digest of the rows' canonical JSONL form (see the module docstring)."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update((_canonical_line(row) + "\n").encode("utf-8"))
    return digest.hexdigest()
