"""A resolved snapshot as files: what a Snapshot's ConfigMap holds and a Job mounts.

- ``snapshot.json``: the dataset's manifest (name, version, sha256, prompts, row count);
- ``rows.jsonl``: the rows, one JSON object per line, or ``rows.jsonl.gz`` (gzip) when they
  are large — a ConfigMap carries that one under ``binaryData``.

Loading checks the rows against the manifest's sha256, so a mounted snapshot is exactly the
one the operator resolved.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kyai.datasets._errors import DatasetError
from kyai.datasets._model import Dataset
from kyai.datasets._store import _row_line, dataset_from_dict, dataset_to_dict, read_rows_jsonl

MANIFEST = "snapshot.json"
ROWS = "rows.jsonl"
ROWS_GZ = "rows.jsonl.gz"


@dataclass(frozen=True)
class SnapshotFiles:
    """The files of a resolved snapshot: text files and binary (compressed) files."""

    text: dict[str, str]
    binary: dict[str, bytes]

    @property
    def size(self) -> int:
        """Bytes the files take (binary ones base64-encoded, as a ConfigMap stores them)."""
        text = sum(len(value.encode("utf-8")) + len(key) for key, value in self.text.items())
        binary = sum((len(value) + 2) // 3 * 4 + len(key) for key, value in self.binary.items())
        return text + binary


def snapshot_files(dataset: Dataset, *, compress_over: int = 256 * 1024) -> SnapshotFiles:
    """The files of ``dataset``; the rows are gzip-compressed when larger than ``compress_over``."""
    manifest = json.dumps(dataset_to_dict(dataset), ensure_ascii=False, indent=2, sort_keys=True)
    rows = "".join(_row_line(row) + "\n" for row in dataset.rows)
    encoded = rows.encode("utf-8")
    if len(encoded) > compress_over:
        return SnapshotFiles({MANIFEST: manifest}, {ROWS_GZ: gzip.compress(encoded, mtime=0)})
    return SnapshotFiles({MANIFEST: manifest, ROWS: rows}, {})


def load_snapshot_dir(path: str | Path) -> Dataset:
    """Load a resolved snapshot from a folder (a mounted ConfigMap)."""
    folder = Path(path)
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(
            f"{folder} is not a resolved snapshot: it has no {MANIFEST}.", path=manifest_path
        ) from None
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{MANIFEST} is not valid JSON: {exc.msg}.", path=manifest_path, line=exc.lineno
        ) from exc
    if (folder / ROWS).exists():
        rows = read_rows_jsonl(folder / ROWS)
    elif (folder / ROWS_GZ).exists():
        try:
            data = gzip.decompress((folder / ROWS_GZ).read_bytes())
        except (OSError, EOFError) as exc:
            raise DatasetError(
                f"{ROWS_GZ} is not valid gzip: {exc}.", path=folder / ROWS_GZ
            ) from exc
        with tempfile.TemporaryDirectory() as scratch:
            unpacked = Path(scratch) / ROWS
            unpacked.write_bytes(data)
            rows = read_rows_jsonl(unpacked)
    else:
        raise DatasetError(f"{folder} has neither {ROWS} nor {ROWS_GZ}.", path=folder / ROWS)
    return dataset_from_dict(manifest, rows)
