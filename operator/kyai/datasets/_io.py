"""Reading dataset files into records, with errors that name the file, line/row and field.

Text files must be UTF-8 (a leading UTF-8 byte-order mark is accepted and dropped). A ``.gz``
suffix after the format suffix (``.jsonl.gz``, ``.json.gz``, ``.csv.gz``) is decompressed first.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import DatasetError

__all__ = [
    "Record",
    "describe_type",
    "format_of",
    "read_csv",
    "read_json_array",
    "read_jsonl",
    "read_parquet",
    "read_records",
    "read_text",
]

TEXT_FORMATS = ("jsonl", "json", "csv")
NATIVE_FORMATS = ("jsonl", "json", "csv", "parquet")
_CSV_FIELD_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class Record:
    """One record of a file: its values and where it sits (1-based line and/or data row)."""

    values: Mapping[str, Any]
    line: int | None = None
    row: int | None = None

    def error(self, path: str | Path, detail: str, *, field: str | None = None) -> DatasetError:
        """A :class:`DatasetError` located at this record."""
        return DatasetError(detail, path=path, line=self.line, row=self.row, field=field)

    def where(self) -> str:
        """Human-readable location, e.g. ``line 3`` or ``row 7``."""
        if self.line is not None:
            return f"line {self.line}"
        if self.row is not None:
            return f"row {self.row}"
        return "an unknown position"


def describe_type(value: Any) -> str:
    """The JSON name of a value's type, with an article (for messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return f"a {type(value).__name__}"


def format_of(path: Path) -> tuple[str, bool]:
    """(format, gzipped) from a file name: ``x.jsonl`` -> ("jsonl", False), ``x.csv.gz`` -> ..."""
    suffixes = [s.lower() for s in path.suffixes]
    gzipped = bool(suffixes) and suffixes[-1] == ".gz"
    if gzipped:
        suffixes = suffixes[:-1]
    fmt = suffixes[-1][1:] if suffixes else ""
    return fmt, gzipped


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError("The file does not exist.", path=path) from None
    except IsADirectoryError:
        raise DatasetError("The path is a directory, not a file.", path=path) from None
    except PermissionError:
        raise DatasetError("The file cannot be read: permission denied.", path=path) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise DatasetError(f"The file cannot be read: {reason}.", path=path) from None
    if format_of(path)[1]:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise DatasetError(
                f"The file ends in .gz but cannot be decompressed ({exc}).", path=path
            ) from None
    return data


def read_text(path: Path) -> str:
    """The file's text: UTF-8, BOM dropped, .gz decompressed; errors name file and line."""
    data = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DatasetError(
            f"The file is not valid UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start} cannot be decoded); save it with UTF-8 encoding.",
            path=path,
            line=line,
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise DatasetError("The file is empty.", path=path)
    return text


def read_jsonl(path: Path, text: str) -> list[Record]:
    """JSON Lines: one JSON object per line; blank lines are skipped, line numbers stay true."""
    records: list[Record] = []
    # Split on "\n" only: str.splitlines() would also split on U+2028 and friends, which may
    # legally appear unescaped inside JSON strings.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"The line is not valid JSON: {exc.msg} (column {exc.colno}).",
                path=path,
                line=number,
            ) from None
        if not isinstance(value, dict):
            raise DatasetError(
                f"Each line must hold a JSON object, but this one holds {describe_type(value)}.",
                path=path,
                line=number,
            )
        records.append(Record(values=value, line=number))
    if not records:
        raise DatasetError("The file has no rows (only blank lines).", path=path)
    return records


def read_json_array(path: Path, text: str) -> list[Record]:
    """A JSON document holding an array of objects; ``row`` is the 1-based item number."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"The file is not valid JSON: {exc.msg} (column {exc.colno}).",
            path=path,
            line=exc.lineno,
        ) from None
    if not isinstance(value, list):
        raise DatasetError(
            f"A .json dataset file must hold an array of objects, but it holds "
            f"{describe_type(value)}.",
            path=path,
        )
    records: list[Record] = []
    for number, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            raise DatasetError(
                f"Each array item must be a JSON object, but this one is {describe_type(item)}.",
                path=path,
                row=number,
            )
        records.append(Record(values=item, row=number))
    if not records:
        raise DatasetError("The file has no rows (an empty array).", path=path)
    return records


def read_csv(path: Path, text: str, *, required: Sequence[str] = ()) -> list[Record]:
    """CSV with a header row (RFC 4180 quoting; quoted fields may span lines).

    Header names are stripped of surrounding whitespace. Blank lines are skipped. Each record
    carries the line it starts on (the header is line 1 when it is the first line) and its
    1-based data row number. A header lacking a ``required`` column is an error naming it.
    """
    # Code answers can exceed the csv module's default 128 KiB field limit; raise it (only up).
    csv.field_size_limit(max(csv.field_size_limit(), _CSV_FIELD_LIMIT))
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    header_line = 0
    records: list[Record] = []
    data_row = 0
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise DatasetError(
                f"The CSV is malformed: {exc}. Quote fields that contain commas, quotes or line "
                'breaks, and double any quote inside a quoted field ("").',
                path=path,
                line=start,
                row=None if header is None else data_row + 1,
            ) from None
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue
        if header is None:
            header = [name.strip() for name in fields]
            header_line = start
            seen: set[str] = set()
            for name in header:
                if name in seen:
                    raise DatasetError(
                        f"The header names the column '{name}' twice.", path=path, line=start
                    )
                seen.add(name)
            missing = [name for name in required if name not in seen]
            if missing:
                names = ", ".join(f"'{name}'" for name in missing)
                raise DatasetError(
                    f"The CSV header has no {names} column"
                    f"{'s' if len(missing) > 1 else ''}; the header has: "
                    f"{', '.join(repr(h) for h in header)}.",
                    path=path,
                    line=start,
                    field=missing[0],
                )
            continue
        data_row += 1
        if len(fields) != len(header):
            raise DatasetError(
                f"The row has {len(fields)} fields but the header (line {header_line}) has "
                f"{len(header)} columns; quote fields that contain commas.",
                path=path,
                line=start,
                row=data_row,
            )
        records.append(
            Record(values=dict(zip(header, fields, strict=True)), line=start, row=data_row)
        )
    if header is None:
        raise DatasetError("The file is empty.", path=path)
    if not records:
        raise DatasetError("The CSV file has a header but no data rows.", path=path)
    return records


def read_parquet(path: Path) -> list[Record]:
    """A Parquet file, read whole with pyarrow; ``row`` is the 1-based row number."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.exists():
        raise DatasetError("The file does not exist.", path=path)
    if path.is_dir():
        raise DatasetError("The path is a directory, not a file.", path=path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"The file cannot be read as Parquet: {exc}.", path=path) from None
    rows = table.to_pylist()
    if not rows:
        raise DatasetError("The Parquet file has no rows.", path=path)
    return [Record(values=values, row=number) for number, values in enumerate(rows, start=1)]


def read_records(
    path: Path, *, allowed: Sequence[str], required_csv: Sequence[str] = ()
) -> list[Record]:
    """Read a file in one of the ``allowed`` formats, chosen by its suffix."""
    fmt, gzipped = format_of(path)
    if fmt not in allowed or (gzipped and fmt not in TEXT_FORMATS):
        kinds = ", ".join(f".{kind}" for kind in allowed)
        shown = "".join(path.suffixes) or "no suffix"
        raise DatasetError(
            f"Unsupported file type ({shown}); use one of: {kinds}"
            f"{' (text formats may be gzipped: .gz)' if 'jsonl' in allowed else ''}.",
            path=path,
        )
    if fmt == "parquet":
        return read_parquet(path)
    text = read_text(path)
    if fmt == "jsonl":
        return read_jsonl(path, text)
    if fmt == "json":
        return read_json_array(path, text)
    return read_csv(path, text, required=required_csv)
