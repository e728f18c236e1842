"""Keeping a dataset beside its generations: rows as JSONL, everything else as a manifest dict.

``rows.jsonl`` format (:func:`write_rows_jsonl`): one line per row in row order, each a compact
JSON object with sorted keys ``ground_truth_response``, ``index``, ``instruction``,
``metadata``, ``row_id``; UTF-8, each line ending in a line feed. :func:`read_rows_jsonl`
gives back equal :class:`Row` objects. The manifest (:func:`dataset_to_dict`) holds name,
version, builtin, source, sha256, row_count and prompts; :func:`dataset_from_dict` checks that
the rows it is given have that count and that hash.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kyai._json import record_line

from ._errors import DatasetError
from ._io import Record, describe_type, read_jsonl, read_text
from ._model import Dataset, Prompts, Row, dataset_sha256, thaw_json

__all__ = ["dataset_from_dict", "dataset_to_dict", "read_rows_jsonl", "write_rows_jsonl"]

_ROW_FIELDS = ("index", "row_id", "instruction", "ground_truth_response", "metadata")


def _row_value(row: Row) -> dict[str, Any]:
    return {
        "index": row.index,
        "row_id": row.row_id,
        "instruction": row.instruction,
        "ground_truth_response": row.ground_truth_response,
        "metadata": thaw_json(row.metadata),
    }


def _row_line(row: Row) -> str:
    return json.dumps(
        _row_value(row), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _row_bytes(row: Row) -> bytes:
    """:func:`_row_line` and its line feed in UTF-8, through orjson (several times faster).

    Rows hold JSON-safe values by construction (finite floats, string keys); what orjson
    refuses (lone surrogates, integers beyond 64 bits) takes the standard library's way.
    """
    return record_line(_row_value(row))


def write_rows_jsonl(path: str | Path, rows: Iterable[Row]) -> None:
    """Write rows to ``path`` atomically (a temporary file in the same folder, then rename)."""
    target = Path(path)
    data = b"".join(_row_bytes(row) for row in rows)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _row_from_record(path: Path, record: Record, position: int) -> Row:
    values = record.values
    for name in _ROW_FIELDS:
        if name not in values:
            raise record.error(path, f"The stored row has no '{name}' field.", field=name)
    for name in ("row_id", "instruction", "ground_truth_response"):
        if not isinstance(values[name], str):
            raise record.error(
                path,
                f"The value must be a string, got {describe_type(values[name])}.",
                field=name,
            )
    index = values["index"]
    if isinstance(index, bool) or not isinstance(index, int) or index != position:
        raise record.error(
            path,
            f"The index must be {position} (the row's position in the file), got {index!r}.",
            field="index",
        )
    if not isinstance(values["metadata"], dict):
        raise record.error(
            path,
            f"The value must be an object, got {describe_type(values['metadata'])}.",
            field="metadata",
        )
    return Row(
        index=index,
        row_id=values["row_id"],
        instruction=values["instruction"],
        ground_truth_response=values["ground_truth_response"],
        metadata=values["metadata"],
    )


def read_rows_jsonl(path: str | Path) -> tuple[Row, ...]:
    """Read rows written by :func:`write_rows_jsonl`; errors name the file, line and field."""
    source = Path(path)
    records = read_jsonl(source, read_text(source))
    return tuple(_row_from_record(source, record, i) for i, record in enumerate(records))


def dataset_to_dict(dataset: Dataset) -> dict[str, Any]:
    """The dataset's manifest: everything except the rows (JSON-serialisable)."""
    return {
        "name": dataset.name,
        "version": dataset.version,
        "builtin": dataset.builtin,
        "source": dataset.source,
        "sha256": dataset.sha256,
        "row_count": len(dataset.rows),
        "prompts": {
            "generation": dataset.prompts.generation,
            "judge": dataset.prompts.judge,
            "generation_id": dataset.prompts.generation_id,
            "judge_id": dataset.prompts.judge_id,
        },
    }


def _get(mapping: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in mapping:
        raise DatasetError(f"The dataset manifest has no '{key}' field.", field=where + key)
    value = mapping[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DatasetError(
            f"The manifest value must be {_kind_name(kind)}, got {describe_type(value)}.",
            field=where + key,
        )
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", bool: "a boolean", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else names.get(k, k.__name__) for k in kinds)


def dataset_from_dict(data: Mapping[str, Any], rows: Iterable[Row]) -> Dataset:
    """Rebuild a dataset from its manifest and its rows; the rows must match the manifest."""
    if not isinstance(data, Mapping):
        raise DatasetError(f"The dataset manifest must be an object, got {describe_type(data)}.")
    prompts = _get(data, "prompts", dict, "")
    row_tuple = tuple(rows)
    count = _get(data, "row_count", int, "")
    if count != len(row_tuple):
        raise DatasetError(
            f"The manifest says {count} rows but {len(row_tuple)} were given.", field="row_count"
        )
    digest = _get(data, "sha256", str, "")
    actual = dataset_sha256(row_tuple)
    if digest != actual:
        raise DatasetError(
            f"The rows do not match the manifest: their sha256 is {actual}, the manifest says "
            f"{digest}.",
            field="sha256",
        )
    optional = (str, type(None))
    return Dataset(
        name=_get(data, "name", str, ""),
        version=_get(data, "version", str, ""),
        builtin=_get(data, "builtin", bool, ""),
        rows=row_tuple,
        prompts=Prompts(
            generation=_get(prompts, "generation", str, "prompts."),
            judge=_get(prompts, "judge", optional, "prompts."),
            generation_id=_get(prompts, "generation_id", optional, "prompts."),
            judge_id=_get(prompts, "judge_id", optional, "prompts."),
        ),
        sha256=digest,
        source=_get(data, "source", str, ""),
    )
