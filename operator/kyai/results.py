"""Finished runs' per-question results, read from their files, and whether two may be compared.

A directory written by ``kyai run`` or ``kyai judge`` holds ``summary.json`` (the
``comparison_key``, the ``dataset_sha256``, ``count`` and the per-question ``scores`` in row
order, errors already 0) and ``judgements.jsonl`` (one record per row with its ``row_index``
and ``row_id``). A directory judged by several judges keeps the first judge's judgements,
whose figures its ``summary.json`` holds, in ``judges/<name>/``.

Two results are compared only when they answer the same questions in the same order: equal
comparison keys (the key hashes the dataset's content, row ids included, with both prompts,
the judge and the scoring method), equal row counts and equal row identities — the ``row_id``
of every ``row_index`` in both ``judgements.jsonl`` files (where a directory has none, the
dataset's sha256, which hashes every row id in order, stands for them). Anything else is
refused with :class:`ResultsError`, which names both runs and both values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kyai._json import loads

SUMMARY = "summary.json"
JUDGEMENTS = "judgements.jsonl"


class ResultsError(ValueError):
    """A run's files cannot be read, or two runs cannot be compared; the message says which."""


@dataclass(frozen=True)
class RunResults:
    """One finished run as a comparison needs it."""

    #: The run's ``summary.json``.
    path: Path
    #: The run's name: the folder holding ``summary.json``.
    name: str
    model: str
    dataset: str
    comparison_key: str
    dataset_sha256: str | None
    avg_score: float
    #: Per-question scores in row order.
    scores: tuple[float, ...] = field(repr=False)
    #: ``row_id`` of each row in row order, from ``judgements.jsonl``; None without one.
    row_ids: tuple[str, ...] | None = field(default=None, repr=False)
    #: The ``judgements.jsonl`` the row ids come from.
    row_ids_from: Path | None = None


def summary_path(path: Path) -> Path:
    """``path`` itself when it is a file, ``path/summary.json`` when it is a run directory."""
    if path.is_dir():
        found = path / SUMMARY
        if not found.is_file():
            raise ResultsError(
                f"{path}: no {SUMMARY} (not a finished `kyai run` / `kyai judge` directory)"
            )
        return found
    if path.is_file():
        return path
    raise ResultsError(f"{path}: no such file or directory")


def read_summary(path: Path) -> dict[str, Any]:
    """A ``summary.json`` as a JSON object."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: not a readable JSON file: {exc}") from exc
    if not isinstance(summary, dict):
        raise ResultsError(f"{path}: expected a JSON object")
    return summary


def scores_of(summary: Mapping[str, Any], path: Path) -> tuple[float, ...] | None:
    """The summary's per-question ``scores`` (None when it has none), checked against ``count``."""
    scores = summary.get("scores")
    if scores is None:
        return None
    if not isinstance(scores, list):
        raise ResultsError(f"{path}: field 'scores' is not a list")
    for index, score in enumerate(scores):
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise ResultsError(f"{path}: scores[{index}] is {score!r}, not a number in [0, 1]")
    count = summary.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count != len(scores):
        raise ResultsError(f"{path}: 'count' is {count} but 'scores' holds {len(scores)} scores")
    return tuple(float(score) for score in scores)


def judgements_path(path: Path, summary: Mapping[str, Any]) -> Path | None:
    """The ``judgements.jsonl`` whose scores ``summary.json`` holds, if there is one."""
    beside = path.parent / JUDGEMENTS
    if beside.is_file():
        return beside
    judges = summary.get("judges")
    if isinstance(judges, list) and judges and isinstance(judges[0], Mapping):
        first = path.parent / "judges" / str(judges[0].get("name", "")) / JUDGEMENTS
        if first.is_file():
            return first
    return None


def read_row_ids(path: Path, rows: int) -> tuple[str, ...]:
    """The ``row_id`` of rows 0 … rows-1 in a ``judgements.jsonl`` (the latest record of each)."""
    found: dict[int, str] = {}
    try:
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = loads(line)
                except (ValueError, UnicodeDecodeError) as exc:
                    raise ResultsError(f"{path}, line {number}: not JSON: {exc}") from exc
                index = record.get("row_index") if isinstance(record, dict) else None
                row_id = record.get("row_id") if isinstance(record, dict) else None
                if isinstance(index, bool) or not isinstance(index, int) or row_id is None:
                    raise ResultsError(f"{path}, line {number}: no 'row_index' and 'row_id'")
                found[index] = str(row_id)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read: {exc}") from exc
    if set(found) != set(range(rows)):
        missing = sorted(set(range(rows)) - set(found))[:5]
        extra = sorted(set(found) - set(range(rows)))[:5]
        raise ResultsError(
            f"{path}: its rows do not match the summary's {rows} scores "
            f"(missing row_index {missing}, unexpected row_index {extra})"
        )
    return tuple(found[index] for index in range(rows))


def load(path: Path) -> RunResults:
    """A run directory (or its ``summary.json``) with its per-question scores and row ids."""
    where = summary_path(path)
    summary = read_summary(where)
    key = summary.get("comparison_key")
    if not isinstance(key, str) or not key:
        raise ResultsError(f"{where}: field 'comparison_key' is missing or not a string")
    scores = scores_of(summary, where)
    if scores is None:
        raise ResultsError(f"{where}: no per-question 'scores'; a comparison needs them")
    source = judgements_path(where, summary)
    sha = summary.get("dataset_sha256")
    return RunResults(
        path=where,
        name=where.parent.name,
        model=str(summary.get("candidate_model") or ""),
        dataset=str(summary.get("dataset") or ""),
        comparison_key=key,
        dataset_sha256=sha if isinstance(sha, str) else None,
        avg_score=sum(scores) / len(scores) if scores else 0.0,
        scores=scores,
        row_ids=None if source is None else read_row_ids(source, len(scores)),
        row_ids_from=source,
    )


def check_comparable(baseline: RunResults, candidate: RunResults) -> None:
    """Refuse (:class:`ResultsError`) unless both runs answered the same rows in one order."""
    pair = f"baseline {baseline.path.parent}, candidate {candidate.path.parent}"
    if baseline.comparison_key != candidate.comparison_key:
        raise ResultsError(
            f"the comparison keys differ ({pair}): {baseline.comparison_key!r} and "
            f"{candidate.comparison_key!r}; results with different keys answer different "
            "questions (dataset, prompts, judge or scoring) and are never compared"
        )
    if len(baseline.scores) != len(candidate.scores):
        raise ResultsError(
            f"the row counts differ ({pair}): {len(baseline.scores)} and "
            f"{len(candidate.scores)} per-question scores"
        )
    shas = (baseline.dataset_sha256, candidate.dataset_sha256)
    if None not in shas and shas[0] != shas[1]:
        raise ResultsError(
            f"the datasets differ ({pair}): dataset_sha256 {baseline.dataset_sha256!r} and "
            f"{candidate.dataset_sha256!r}"
        )
    if baseline.row_ids is not None and candidate.row_ids is not None:
        for index, (one, other) in enumerate(zip(baseline.row_ids, candidate.row_ids, strict=True)):
            if one != other:
                raise ResultsError(
                    f"the row identities differ ({pair}): row {index} is row_id {one!r} in "
                    f"{baseline.row_ids_from} and {other!r} in {candidate.row_ids_from}"
                )
