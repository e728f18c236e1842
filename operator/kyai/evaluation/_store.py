"""The output directory of a run: append-only JSONL logs and small JSON documents.

Layout (one directory per run):

- ``run.json``: what was generated — the dataset (name, version, sha256, prompts), the
  candidate (endpoint, model, context window) and the generation phase's times;
- ``dataset.jsonl``: the rows exactly as sent, so that judging needs nothing else;
- ``generations.jsonl``: one record per answered row, appended as each finishes;
- ``judge.json``: the judge configuration of the judgements beside it;
- ``judgements.jsonl``: one record per judged row, appended as each finishes;
- ``summary.json``: the scores.

Appends are flushed line by line, so a killed process loses at most the line it was
writing; a torn last line is cut off when the log is opened again.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

RUN = "run.json"
DATASET = "dataset.jsonl"
GENERATIONS = "generations.jsonl"
JUDGE = "judge.json"
JUDGEMENTS = "judgements.jsonl"
SUMMARY = "summary.json"


class RunDirectoryError(ValueError):
    """A run directory is missing, incomplete or holds an incompatible run."""


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON: the one serialisation of every stored record."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def write_json(path: Path, value: Any) -> None:
    """Write a JSON document atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(value, handle, ensure_ascii=False, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON document that must hold an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RunDirectoryError(f"{path} does not exist.") from exc
    except json.JSONDecodeError as exc:
        raise RunDirectoryError(f"{path} is not valid JSON (line {exc.lineno}).") from exc
    if not isinstance(value, dict):
        raise RunDirectoryError(f"{path} does not hold a JSON object.")
    return value


class JsonlLog:
    """An append-only JSONL file of records, each flushed as soon as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    def read(self) -> list[dict[str, Any]]:
        """Every complete record; a torn last line (the process died mid-write) is cut off."""
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        records: list[dict[str, Any]] = []
        good_end = 0
        for number, line in enumerate(_lines(raw), start=1):
            end, text, complete = line
            if not text.strip():
                good_end = end
                continue
            try:
                record = json.loads(text)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                if not complete:
                    break  # torn tail: truncated below
                raise RunDirectoryError(
                    f"{self.path} line {number} is not valid JSON: {exc}."
                ) from exc
            if not isinstance(record, dict):
                raise RunDirectoryError(f"{self.path} line {number} is not a JSON object.")
            if not complete:
                break  # parsed, but without its newline: rewrite it whole
            records.append(record)
            good_end = end
        if good_end < len(raw):
            log.warning(
                "%s ended in an incomplete record (%d bytes); it is dropped and will be redone.",
                self.path,
                len(raw) - good_end,
            )
            with self.path.open("r+b") as handle:
                handle.truncate(good_end)
        return records

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record and flush it to the operating system."""
        if self._handle is None:
            self._handle = self.path.open("a", encoding="utf-8")
        self._handle.write(dumps(record) + "\n")
        self._handle.flush()

    def close(self) -> None:
        """Flush to disk and close."""
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None


def _lines(raw: bytes) -> Iterator[tuple[int, str, bool]]:
    """``(end offset, text, ends with newline)`` for each line of ``raw``."""
    start = 0
    while start < len(raw):
        newline = raw.find(b"\n", start)
        complete = newline != -1
        end = newline + 1 if complete else len(raw)
        yield end, raw[start:end].decode("utf-8"), complete
        start = end


def latest_by_row(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The last record of each row (a redone row appends a newer record)."""
    latest: dict[int, dict[str, Any]] = {}
    for record in records:
        index = record.get("row_index")
        if isinstance(index, int):
            latest[index] = record
    return latest
