"""``load_dataset``: one entry point for built-in names and custom dataset files."""

from __future__ import annotations

from pathlib import Path

from ._builtin import BUILTIN_DATASETS, BuiltinDataset, load_builtin, unknown_builtin
from ._custom import load_custom
from ._errors import DatasetError
from ._hub import Downloader
from ._io import format_of
from ._model import Dataset, Prompts

__all__ = ["load_dataset"]


def _check_prompt(value: str | None, name: str, path: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise DatasetError(f"The {name} must be a non-empty string.", path=path, field=name)


def _looks_like_path(name: str) -> bool:
    candidate = Path(name)
    return (
        "/" in name
        or "\\" in name
        or bool(candidate.suffix)
        or name.startswith(".")
        or candidate.exists()
    )


def load_dataset(
    name_or_file: str,
    *,
    dataset_file: str | Path | None = None,
    generation_prompt: str | None = None,
    judge_prompt: str | None = None,
    hf_revision: str | None = None,
    downloader: Downloader | None = None,
) -> Dataset:
    """Load a built-in dataset by name, or a custom dataset from a JSONL/CSV file.

    Built-in (``name_or_file`` in :data:`BUILTIN_DATASETS`): rows come from ``dataset_file``
    (the dataset's native schema as published on HuggingFace; .jsonl, .json, .csv or .parquet,
    text formats optionally gzipped) when given, otherwise from the Hub with
    ``huggingface_hub.hf_hub_download`` at ``hf_revision`` (default: main; the token comes
    from HF_TOKEN; ``hf_revision`` cannot be combined with ``dataset_file``). ``downloader``
    replaces the Hub download (tests, mirrors). The v1 rule picks 100 rows (see BUILTINS.md).
    Prompts default to the seed's for that dataset; an explicit ``generation_prompt`` /
    ``judge_prompt`` replaces it and its ``*_id`` is ``None``.

    Anything else is the path of a custom dataset file (``.jsonl`` or ``.csv``, optionally
    ``.gz``): fields ``instruction``, ``ground_truth_response`` and optional
    ``external_row_id``. ``generation_prompt`` is required; ``judge_prompt`` may be omitted
    (the judge phase requires it). The name is the file stem.

    Loading is pure: everything is validated before anything is returned, and nothing touches
    the network except the download of a built-in without ``dataset_file``.

    Raises:
        DatasetError: with ``path``, ``line`` and ``field`` set where they apply.
    """
    if not isinstance(name_or_file, str) or not name_or_file.strip():
        raise DatasetError("The dataset must be a built-in name or a file path, got nothing.")
    spec = BUILTIN_DATASETS.get(name_or_file)
    if spec is not None:
        return _load_named(
            spec,
            dataset_file=dataset_file,
            generation_prompt=generation_prompt,
            judge_prompt=judge_prompt,
            hf_revision=hf_revision,
            downloader=downloader,
        )
    if not _looks_like_path(name_or_file):
        raise unknown_builtin(name_or_file)
    path = Path(name_or_file)
    where = str(path)
    if dataset_file is not None or hf_revision is not None:
        raise DatasetError(
            "dataset_file and hf_revision apply to built-in datasets only; a custom dataset is "
            "read from its own file.",
            path=where,
        )
    if generation_prompt is None:
        raise DatasetError(
            "A custom dataset needs a generation prompt (the system prompt sent to the "
            "candidate before each instruction): give --generation-prompt TEXT or "
            "@FILE on the command line, spec.prompts.generation in a Snapshot, or "
            "generation_prompt= from Python.",
            path=where,
            field="generation_prompt",
        )
    _check_prompt(generation_prompt, "generation_prompt", where)
    _check_prompt(judge_prompt, "judge_prompt", where)
    if format_of(path)[0] not in ("jsonl", "csv"):
        shown = "".join(path.suffixes) or "no suffix"
        raise DatasetError(
            f"A custom dataset must be a .jsonl or .csv file (optionally .gz), not {shown}.",
            path=where,
        )
    return load_custom(path, generation_prompt=generation_prompt, judge_prompt=judge_prompt)


def _load_named(
    spec: BuiltinDataset,
    *,
    dataset_file: str | Path | None,
    generation_prompt: str | None,
    judge_prompt: str | None,
    hf_revision: str | None,
    downloader: Downloader | None,
) -> Dataset:
    """A built-in dataset, its prompts the seed's unless given."""
    if dataset_file is not None and hf_revision is not None:
        raise DatasetError(
            "hf_revision selects what to download; it cannot be combined with dataset_file.",
            path=str(dataset_file),
        )
    _check_prompt(generation_prompt, "generation_prompt", None)
    _check_prompt(judge_prompt, "judge_prompt", None)
    prompts = Prompts(
        generation=spec.generation_prompt if generation_prompt is None else generation_prompt,
        judge=spec.judge_prompt if judge_prompt is None else judge_prompt,
        generation_id=spec.generation_prompt_id if generation_prompt is None else None,
        judge_id=spec.judge_prompt_id if judge_prompt is None else None,
    )
    return load_builtin(
        spec,
        dataset_file=None if dataset_file is None else Path(dataset_file),
        prompts=prompts,
        hf_revision=hf_revision,
        downloader=downloader,
    )
