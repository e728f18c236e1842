"""The one exception type of the datasets package."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._failures import SourceFailure

__all__ = ["DatasetError"]


class DatasetError(ValueError):
    """A dataset could not be loaded, parsed, stored or restored.

    The message names the file, the line (or row) and the field when they are known, then says
    what is wrong in a full sentence, e.g.
    ``data.jsonl, line 3, field 'instruction': The value must be a string, got a number.``

    Attributes:
        path: the file concerned, as given by the caller (``None`` when no file is involved,
            e.g. an unknown built-in name).
        line: 1-based physical line of the file (JSONL line; for CSV the line where the record
            starts, the header being line 1), or ``None``.
        field: the field or column concerned, or ``None``.
        row: 1-based data row (CSV data rows after the header, Parquet rows, items of a JSON
            array), or ``None``.
        detail: the sentence(s) without the location prefix.
        failure: why the source could not be fetched (not found, forbidden, unreachable,
            unavailable) with the server's own words, when a download failed; else ``None``.
    """

    def __init__(
        self,
        detail: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        row: int | None = None,
        failure: SourceFailure | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.row = row
        self.detail = detail
        self.failure = failure
        super().__init__(_format(detail, self.path, line, field, row))


def _format(
    detail: str, path: str | None, line: int | None, field: str | None, row: int | None
) -> str:
    parts: list[str] = []
    if path is not None:
        parts.append(path)
    if line is not None:
        parts.append(f"line {line}" + (f" (data row {row})" if row is not None else ""))
    elif row is not None:
        parts.append(f"row {row}")
    if field is not None:
        parts.append(f"field '{field}'")
    if not parts:
        return detail
    return ", ".join(parts) + ": " + detail


class DatasetUnavailableError(DatasetError):
    """The dataset's source cannot be reached or read now (network, access, gating).

    Unlike other :class:`DatasetError` cases the data may well be fine: trying again later,
    or with a token, can succeed.
    """
