"""The output directory of a run: append-only JSONL logs and small JSON documents.

Layout (one directory per run):

- ``run.json``: what was generated — the dataset (name, version, sha256, prompts), the
  candidate (endpoint, model, context window) and the generation phase's times;
- ``dataset.jsonl``: the rows exactly as sent, so that judging needs nothing else;
- ``generations.jsonl``: one record per answered row, appended as each finishes;
- ``judge.json``: the judge configuration of the judgements beside it;
- ``judgements.jsonl``: one record per judged row, appended as each finishes;
- ``summary.json``: the scores.

Appends reach the operating system before the event loop's next turn (one write per loop
iteration), so a killed process loses at most the records of the rows finished in that
iteration, which are redone when it runs again. A damaged tail (a line cut inside a
multi-byte character or inside its JSON, or a record without its final newline) is ignored
when read, so that its row is redone; the writer
of a log cuts that tail off before appending, and an append never glues onto a line without
its newline. Readers of another phase's log (``kyai judge`` reading ``generations.jsonl``)
never modify it. When a phase finishes, its log is rewritten atomically in row order (the
latest record of each row), so that equal inputs give byte-equal files.

Every line and document written here passes :func:`kyai.evaluation._redact.redact`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from kyai._json import record_line
from kyai.evaluation._redact import redact, redact_bytes

log = logging.getLogger(__name__)

RUN = "run.json"
DATASET = "dataset.jsonl"
GENERATIONS = "generations.jsonl"
JUDGE = "judge.json"
JUDGEMENTS = "judgements.jsonl"
SUMMARY = "summary.json"


class RunDirectoryError(ValueError):
    """A run directory is missing, incomplete or holds an incompatible run."""


class UnsoundRecordError(ValueError):
    """A generation record that holds neither a finished answer nor an error: never stored."""


#: The error kind that a stored generation record without an answer or an error is read
#: with: written by a ``kyai`` that took a cut stream for an empty answer.
NO_ANSWER = "candidate_no_answer"

_ANSWER_FIELDS = ("content", "reasoning_content", "reasoning")


def answer_problem(record: Mapping[str, Any]) -> str | None:
    """Why a generation record is not sound, or None when it is.

    A sound record holds an error, or an answer: content or reasoning (a string, possibly
    empty) and, when it was streamed, the ``finish_reason`` that said the answer was finished.
    """
    if record.get("error"):
        return None
    if not any(isinstance(record.get(key), str) for key in _ANSWER_FIELDS):
        return "it holds neither an answer (content or reasoning) nor an error"
    if record.get("streamed") and record.get("finish_reason") is None:
        return (
            "its stream never said how the answer finished (no finish_reason) and it holds no error"
        )
    return None


def check_generation(record: Mapping[str, Any]) -> None:
    """Refuse (:class:`UnsoundRecordError`) a record that :func:`answer_problem` faults."""
    problem = answer_problem(record)
    if problem is not None:
        raise UnsoundRecordError(
            f"Refusing to store the answer of row {record.get('row_index')!r}: {problem}. "
            "This is a bug in kyai: please report it."
        )


def read_as_error(record: dict[str, Any]) -> dict[str, Any]:
    """A stored generation record as the judge must read it: an unsound one as an error.

    A record that holds neither a finished answer nor an error (written before the fix for
    cut streams) is scored 0 and counted as the error :data:`NO_ANSWER`, never judged as an
    empty answer.
    """
    problem = answer_problem(record)
    if problem is None:
        return record
    return {
        **record,
        "error": {
            "kind": NO_ANSWER,
            "message": f"The stored answer is unsound: {problem}. Run `kyai generate` on this "
            "directory again: it asks such rows again.",
            "status": None,
        },
    }


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON: the serialisation of every stored record (as text)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def line(record: Mapping[str, Any]) -> bytes:
    """The redacted JSONL line of ``record``: :func:`dumps` and a newline, in UTF-8."""
    return redact_bytes(record_line(record))


def write_json(path: Path, value: Any) -> None:
    """Write a JSON document atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    _write_atomically(path, redact(text))


def _write_atomically(path: Path, text: str | bytes) -> None:
    data = text.encode("utf-8") if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
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
    except UnicodeDecodeError as exc:
        raise RunDirectoryError(f"{path} is not UTF-8 text ({exc.reason}).") from exc
    except OSError as exc:
        raise RunDirectoryError(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    except json.JSONDecodeError as exc:
        raise RunDirectoryError(f"{path} is not valid JSON (line {exc.lineno}).") from exc
    if not isinstance(value, dict):
        raise RunDirectoryError(f"{path} does not hold a JSON object.")
    return value


class JsonlLog:
    """An append-only JSONL file of records, each flushed as soon as it is written.

    ``repair=False`` opens another phase's log for reading only: a damaged tail is ignored
    but the file is left exactly as it is.
    """

    def __init__(self, path: Path, *, repair: bool = True) -> None:
        self.path = path
        self.repair = repair
        self._handle: IO[bytes] | None = None
        self._pending: list[bytes] = []
        self._scheduled = False
        # The line written for each row's latest appended record, reused by rewrite().
        self._written: dict[int, tuple[Mapping[str, Any], bytes]] = {}

    def read(self) -> list[dict[str, Any]]:
        """Every complete record; a damaged last line (the process died mid-write) is ignored."""
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        records: list[dict[str, Any]] = []
        good_end = 0
        for number, (end, data, complete) in enumerate(_lines(raw), start=1):
            try:
                text = data.decode("utf-8")
                record = json.loads(text) if text.strip() else None
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                if not complete or end == len(raw):
                    break  # damaged tail: ignored, its row is redone
                raise RunDirectoryError(
                    f"{self.path} line {number} is not valid JSON: {exc}."
                ) from None
            if record is None:
                if complete:
                    good_end = end
                continue
            if not isinstance(record, dict):
                raise RunDirectoryError(f"{self.path} line {number} is not a JSON object.")
            if not complete:
                break  # parsed, but without its newline: redo it whole
            records.append(record)
            good_end = end
        if good_end < len(raw):
            if self.repair:
                log.warning(
                    "%s ended in an incomplete record (%d bytes); it is dropped and will be "
                    "redone.",
                    self.path,
                    len(raw) - good_end,
                )
                with self.path.open("r+b") as handle:
                    handle.truncate(good_end)
            else:
                log.warning(
                    "%s ends in an incomplete record (%d bytes); it is ignored (the file is "
                    "left as it is).",
                    self.path,
                    len(raw) - good_end,
                )
        return records

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record; it reaches the operating system before the event loop's next turn.

        Inside a running event loop the records of one loop iteration are written with one
        system call (at concurrency 256 a write per record costs more than the requests);
        outside one, each record is written at once.
        """
        if self._handle is None:
            handle = self.path.open("ab", buffering=0)
            if handle.tell() > 0:
                with self.path.open("rb") as reader:
                    reader.seek(-1, os.SEEK_END)
                    if reader.read(1) != b"\n":
                        handle.write(b"\n")  # never glue a record onto a damaged line
            self._handle = handle
        data = line(record)
        self._pending.append(data)
        index = record.get("row_index")
        if isinstance(index, int):
            self._written[index] = (record, data)
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write_pending()
            return
        self._scheduled = True
        loop.call_soon(self._write_pending)

    def _write_pending(self) -> None:
        self._scheduled = False
        if self._pending and self._handle is not None:
            data = b"".join(self._pending)
            self._pending.clear()
            view = memoryview(data)
            while view:
                written = self._handle.write(view)
                view = view[written or 0 :]

    def close(self, *, sync: bool = True) -> None:
        """Write what is pending, flush to disk (unless ``sync`` is false) and close.

        ``sync=False`` suits a log that :meth:`rewrite` replaces next (the new file is synced).
        """
        if self._handle is not None:
            self._write_pending()
            if sync:
                os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None

    def rewrite(self, records: Mapping[int, Mapping[str, Any]]) -> None:
        """Replace the log atomically by ``records`` in row order (one line per row)."""
        self.close(sync=False)  # the file is replaced by one that is synced
        lines = []
        for index in sorted(records):
            record = records[index]
            cached = self._written.get(index)
            if cached is not None and cached[0] is record:
                lines.append(cached[1])
            else:
                lines.append(line(record))
        self._written.clear()
        _write_atomically(self.path, b"".join(lines))


def _lines(raw: bytes) -> Iterator[tuple[int, bytes, bool]]:
    """``(end offset, bytes, ends with newline)`` for each line of ``raw``."""
    start = 0
    while start < len(raw):
        newline = raw.find(b"\n", start)
        complete = newline != -1
        end = newline + 1 if complete else len(raw)
        yield end, raw[start:end], complete
        start = end


def latest_by_row(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The last record of each row (a redone row appends a newer record)."""
    latest: dict[int, dict[str, Any]] = {}
    for record in records:
        index = record.get("row_index")
        if isinstance(index, int):
            latest[index] = record
    return latest
