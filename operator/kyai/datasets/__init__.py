"""KYAI datasets: the seven built-in v1 snapshots, custom JSONL/CSV datasets, prompts, hashing.

Typical use::

    from kyai.datasets import load_dataset

    ds = load_dataset("mmlu-pro")                        # downloads from HuggingFace
    ds = load_dataset("mmlu-pro", dataset_file="test-00000-of-00001.parquet")  # local copy
    ds = load_dataset("my-questions.jsonl", generation_prompt="...", judge_prompt="...")
    ds.rows[0].instruction, ds.sha256, ds.prompts.judge

See BUILTINS.md beside this file for each built-in's source, native schema, mapping and the
v1 selection rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kyai._lazy import lazy_exports

if TYPE_CHECKING:
    from ._builtin import (
        BUILTIN_DATASETS,
        V1_SIZE,
        BuiltinDataset,
        builtin_names,
        get_builtin,
        v1_rank_key,
    )
    from ._custom import custom_row_problems
    from ._errors import DatasetError, DatasetUnavailableError
    from ._failures import SourceFailure, failure_of, failure_of_status, one_line
    from ._hub import Downloader, hf_cached, hf_download, hub_host, route_hub_logs
    from ._load import load_dataset
    from ._model import Dataset, Prompts, Row, canonical_jsonl, dataset_sha256, thaw_json
    from ._prompts import GENERATION_PROMPTS, JUDGE_PROMPTS
    from ._snapshot import SnapshotFiles, load_snapshot_dir, snapshot_files
    from ._store import dataset_from_dict, dataset_to_dict, read_rows_jsonl, write_rows_jsonl

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._builtin": (
            "BUILTIN_DATASETS",
            "V1_SIZE",
            "BuiltinDataset",
            "builtin_names",
            "get_builtin",
            "v1_rank_key",
        ),
        "._custom": ("custom_row_problems",),
        "._errors": ("DatasetError", "DatasetUnavailableError"),
        "._failures": ("SourceFailure", "failure_of", "failure_of_status", "one_line"),
        "._hub": ("Downloader", "hf_cached", "hf_download", "hub_host", "route_hub_logs"),
        "._load": ("load_dataset",),
        "._model": ("Dataset", "Prompts", "Row", "canonical_jsonl", "dataset_sha256", "thaw_json"),
        "._prompts": ("GENERATION_PROMPTS", "JUDGE_PROMPTS"),
        "._snapshot": ("SnapshotFiles", "load_snapshot_dir", "snapshot_files"),
        "._store": ("dataset_from_dict", "dataset_to_dict", "read_rows_jsonl", "write_rows_jsonl"),
    },
)

__all__ = [
    "BUILTIN_DATASETS",
    "GENERATION_PROMPTS",
    "JUDGE_PROMPTS",
    "V1_SIZE",
    "BuiltinDataset",
    "Dataset",
    "DatasetError",
    "DatasetUnavailableError",
    "Downloader",
    "Prompts",
    "Row",
    "SnapshotFiles",
    "SourceFailure",
    "builtin_names",
    "canonical_jsonl",
    "custom_row_problems",
    "dataset_from_dict",
    "dataset_sha256",
    "dataset_to_dict",
    "failure_of",
    "failure_of_status",
    "get_builtin",
    "hf_cached",
    "hf_download",
    "hub_host",
    "load_dataset",
    "load_snapshot_dir",
    "one_line",
    "read_rows_jsonl",
    "route_hub_logs",
    "snapshot_files",
    "thaw_json",
    "v1_rank_key",
    "write_rows_jsonl",
]
