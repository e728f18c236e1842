"""The seven built-in KYAI datasets: where they live, their native schema, and the v1 rule.

Each built-in reads the dataset's file exactly as published on the HuggingFace Hub (its
*native* schema) and maps every native row to ``instruction`` / ``ground_truth_response`` /
``row_id`` / ``metadata``. BUILTINS.md documents each mapping for users.

The v1 rule (deterministic, no randomness, no per-run seed): every native row gets a *native
id*, the dataset's id column as a string, or the row's 0-based position in the published file
when the dataset has no id column. Rows are ranked by the SHA-256 hex digest of the UTF-8 bytes
of ``"kyai/<name>/v1/<native id>"`` (ascending, as lowercase hex strings) and the 100 lowest
are kept, in that rank order. A file with fewer than 100 rows keeps all of them, in rank order.
Duplicate native ids are an error. Only the selected rows are mapped (and validated beyond
their id), so an odd row elsewhere in a large upstream file cannot break the snapshot.
A built-in row's ``row_id`` is its native id.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ._errors import DatasetError
from ._hub import Downloader, hf_download, hf_uri, revision_from_cache_path
from ._io import NATIVE_FORMATS, Record, describe_type, format_of, read_records
from ._model import Dataset, Prompts, Row, dataset_sha256
from ._prompts import GENERATION_PROMPTS, JUDGE_PROMPTS

__all__ = [
    "BUILTIN_DATASETS",
    "V1_SIZE",
    "BuiltinDataset",
    "MappedRow",
    "builtin_names",
    "get_builtin",
    "load_builtin",
    "v1_rank_key",
    "v1_select",
]

V1_SIZE = 100
"""Questions in every v1 snapshot."""

LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class MappedRow:
    """What a built-in's mapping makes of one native row."""

    instruction: str
    ground_truth_response: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


Mapper = Callable[["BuiltinDataset", Path, Record], MappedRow]


@dataclass(frozen=True)
class BuiltinDataset:
    """The definition of one built-in dataset (see BUILTINS.md).

    Attributes:
        name: KYAI name, e.g. ``"mmlu-pro"``.
        title: display name from the methodology's table, e.g. ``"MMLU-Pro"``.
        domain: what it measures.
        repo_id: HuggingFace dataset repository.
        filename: path of the native file inside the repository.
        config: HuggingFace config (subset) name the file belongs to.
        split: HuggingFace split the file holds.
        license: licence note (from the dataset card; check it before redistributing).
        gated: whether the Hub requires accepted terms and an HF_TOKEN.
        answer_format: the answer format the generation prompt asks for.
        generation_prompt_id: seed id of the generation system prompt.
        judge_prompt_id: seed id of the judge prompt.
        id_column: native id column, or ``None`` (the 0-based file position is the id).
        columns: native columns the mapping reads; a file missing one is rejected.
        mapping: one-line summary of the mapping, for humans.
        version: snapshot version (``"v1"``).
        size: questions kept by the v1 rule.
        grader: id of its deterministic grader in :mod:`kyai.graders` (``None``: none).
        no_grader_reason: why it has none (the LLM judge scores it).
    """

    name: str
    title: str
    domain: str
    repo_id: str
    filename: str
    config: str
    split: str
    license: str
    gated: bool
    answer_format: str
    generation_prompt_id: str
    judge_prompt_id: str
    id_column: str | None
    columns: tuple[str, ...]
    mapping: str
    mapper: Mapper = field(repr=False, compare=False)
    version: str = "v1"
    size: int = V1_SIZE
    grader: str | None = None
    no_grader_reason: str | None = None

    @property
    def generation_prompt(self) -> str:
        """The seed's generation system prompt for this dataset."""
        return GENERATION_PROMPTS[self.generation_prompt_id]

    @property
    def judge_prompt(self) -> str:
        """The seed's judge prompt for this dataset."""
        return JUDGE_PROMPTS[self.judge_prompt_id]

    def source_uri(self, revision: str | None = None) -> str:
        """``hf://<repo>/<file>@<revision>`` of the native file."""
        return hf_uri(self.repo_id, self.filename, revision)

    def map_row(self, path: Path, record: Record) -> MappedRow:
        """Map one native record (errors name the file, line/row and column)."""
        for column in self.columns:
            if column not in record.values:
                raise record.error(
                    path,
                    f"The native file has no '{column}' column, which the built-in "
                    f"'{self.name}' mapping needs; expected the {self.repo_id} file "
                    f"{self.filename} (columns: {', '.join(self.columns)}).",
                    field=column,
                )
        mapped = self.mapper(self, path, record)
        if not mapped.instruction.strip():
            raise record.error(path, "The mapped instruction is empty.")
        return mapped

    def native_id(self, path: Path, record: Record, position: int) -> str:
        """The row's native id: the id column as a string, or its 0-based position."""
        if self.id_column is None:
            return str(position)
        if self.id_column not in record.values:
            raise record.error(
                path,
                f"The native file has no '{self.id_column}' column, which the built-in "
                f"'{self.name}' uses as row id; expected the {self.repo_id} file {self.filename}.",
                field=self.id_column,
            )
        value = record.values[self.id_column]
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise record.error(
            path,
            f"The row id must be a non-empty string or an integer, got {describe_type(value)}.",
            field=self.id_column,
        )


# --- value helpers ------------------------------------------------------------------------


def _text(path: Path, record: Record, column: str) -> str:
    value = record.values[column]
    if not isinstance(value, str):
        raise record.error(
            path, f"The value must be a string, got {describe_type(value)}.", field=column
        )
    return value


def _integer(path: Path, record: Record, column: str) -> int:
    value = record.values[column]
    if isinstance(value, bool) or not isinstance(value, int):
        raise record.error(
            path, f"The value must be an integer, got {describe_type(value)}.", field=column
        )
    return value


def _string_list(path: Path, record: Record, column: str) -> list[str]:
    value = record.values[column]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise record.error(
            path,
            f"The value must be a list of strings, got {describe_type(value)}.",
            field=column,
        )
    return list(value)


def _optional(record: Record, column: str) -> dict[str, Any]:
    value = record.values.get(column)
    return {} if value is None else {column: value}


def lettered(question: str, options: Sequence[str]) -> str:
    """``question``, a blank line, then one ``"A. option"`` line per option."""
    lines = [f"{LETTERS[i]}. {option}" for i, option in enumerate(options)]
    return question + "\n\n" + "\n".join(lines)


# --- mappings -----------------------------------------------------------------------------


def _map_mmlu_pro(spec: BuiltinDataset, path: Path, record: Record) -> MappedRow:
    question = _text(path, record, "question").strip()
    options = [option.strip() for option in _string_list(path, record, "options")]
    if not 2 <= len(options) <= len(LETTERS):
        raise record.error(
            path,
            f"A question needs 2 to {len(LETTERS)} options, this one has {len(options)}.",
            field="options",
        )
    answer = _text(path, record, "answer").strip()
    if len(answer) != 1 or answer not in LETTERS[: len(options)]:
        raise record.error(
            path,
            f"The answer must be one letter among A to {LETTERS[len(options) - 1]}, "
            f"got {answer!r}.",
            field="answer",
        )
    answer_index = record.values.get("answer_index")
    if answer_index is not None and answer_index != LETTERS.index(answer):
        raise record.error(
            path,
            f"The answer letter {answer!r} disagrees with answer_index {answer_index!r}.",
            field="answer_index",
        )
    metadata: dict[str, Any] = {"choices": options}
    metadata |= _optional(record, "category") | _optional(record, "src")
    return MappedRow(lettered(question, options), answer, metadata)


GPQA_OPTION_COLUMNS = (
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
)


def gpqa_option_key(record_id: str, option: str) -> str:
    """Sort key of a GPQA option: sha256 of ``"kyai/gpqa-diamond/v1/<Record ID>/<option>"``."""
    return hashlib.sha256(f"kyai/gpqa-diamond/v1/{record_id}/{option}".encode()).hexdigest()


def _map_gpqa(spec: BuiltinDataset, path: Path, record: Record) -> MappedRow:
    record_id = _text(path, record, "Record ID")
    question = _text(path, record, "Question").strip()
    raw = [_text(path, record, column).strip() for column in GPQA_OPTION_COLUMNS]
    # Stable sort by hash; position 0 is the correct answer (ties keep the native order).
    order = sorted(range(4), key=lambda i: gpqa_option_key(record_id, raw[i]))
    options = [raw[i] for i in order]
    answer = LETTERS[order.index(0)]
    metadata: dict[str, Any] = {"choices": options}
    for column, key in (("High-level domain", "domain"), ("Subdomain", "subdomain")):
        value = record.values.get(column)
        if isinstance(value, str) and value.strip():
            metadata[key] = value.strip()
    return MappedRow(lettered(question, options), answer, metadata)


def _map_math500(spec: BuiltinDataset, path: Path, record: Record) -> MappedRow:
    metadata = {
        "solution": _text(path, record, "solution"),
        "subject": _text(path, record, "subject"),
        "level": record.values["level"],
    }
    return MappedRow(_text(path, record, "problem"), _text(path, record, "answer"), metadata)


def _map_python_codes(spec: BuiltinDataset, path: Path, record: Record) -> MappedRow:
    instruction = _text(path, record, "instruction")
    extra = _text(path, record, "input")
    if extra.strip():
        instruction = f"{instruction}\n\n{extra}"
    return MappedRow(instruction, _text(path, record, "output"), {})


def _map_humaneval(spec: BuiltinDataset, path: Path, record: Record) -> MappedRow:
    metadata = {
        column: _text(path, record, column)
        for column in ("prompt", "test", "entry_point", "canonical_solution")
    }
    return MappedRow(metadata["prompt"], metadata["canonical_solution"], metadata)


def _map_quantum(spec: BuiltinDataset, path: Path, record: Record) -> MappedRow:
    return MappedRow(_text(path, record, "question"), _text(path, record, "response"), {})


def ifeval_constraints(ids: Sequence[str], kwargs: Sequence[Mapping[str, Any]]) -> str:
    """IFEval ground truth: one numbered line per constraint with its non-null arguments.

    E.g. ``1. punctuation:no_comma`` and
    ``2. length_constraints:number_words (num_words=300, relation="at least")``: arguments
    sorted by name, values written as JSON.
    """
    lines = []
    for number, (instruction_id, arguments) in enumerate(zip(ids, kwargs, strict=True), start=1):
        shown = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False, sort_keys=True)}"
            for key, value in sorted(arguments.items())
            if value is not None
        )
        lines.append(f"{number}. {instruction_id}" + (f" ({shown})" if shown else ""))
    return "\n".join(lines)


def _map_ifeval(spec: BuiltinDataset, path: Path, record: Record) -> MappedRow:
    ids = _string_list(path, record, "instruction_id_list")
    raw = record.values["kwargs"]
    if not isinstance(raw, list | tuple) or not all(isinstance(k, Mapping) for k in raw):
        raise record.error(
            path, f"The value must be a list of objects, got {describe_type(raw)}.", field="kwargs"
        )
    if len(raw) != len(ids):
        raise record.error(
            path,
            f"kwargs has {len(raw)} entries but instruction_id_list has {len(ids)}; they must "
            "pair up.",
            field="kwargs",
        )
    if not ids:
        raise record.error(path, "The row lists no constraints.", field="instruction_id_list")
    kwargs = [{k: v for k, v in entry.items() if v is not None} for entry in raw]
    metadata = {"instruction_id_list": ids, "kwargs": kwargs}
    return MappedRow(_text(path, record, "prompt"), ifeval_constraints(ids, kwargs), metadata)


# --- the table ----------------------------------------------------------------------------

_SPECS = (
    BuiltinDataset(
        name="mmlu-pro",
        title="MMLU-Pro",
        domain="Academic reasoning (14 disciplines)",
        repo_id="TIGER-Lab/MMLU-Pro",
        filename="data/test-00000-of-00001.parquet",
        config="default",
        split="test",
        license="MIT (dataset card)",
        gated=False,
        answer_format="Answer: X (single letter A to J)",
        generation_prompt_id="mmlu-pro-mcq",
        judge_prompt_id="mcq-exact-match-judge",
        id_column="question_id",
        columns=("question_id", "question", "options", "answer"),
        mapping="question + lettered options -> instruction; answer letter -> ground truth",
        mapper=_map_mmlu_pro,
        grader="mcq-a-j",
    ),
    BuiltinDataset(
        name="gpqa-diamond",
        title="GPQA Diamond",
        domain="Graduate-level expert science MCQ",
        repo_id="Idavidrein/gpqa",
        filename="gpqa_diamond.csv",
        config="gpqa_diamond",
        split="train",
        license="CC BY 4.0 (gated: accept the terms on the Hub, set HF_TOKEN)",
        gated=True,
        answer_format="Answer: X (single letter A to D)",
        generation_prompt_id="gpqa-mcq",
        judge_prompt_id="mcq-exact-match-judge",
        id_column="Record ID",
        columns=("Record ID", "Question", *GPQA_OPTION_COLUMNS),
        mapping="Question + 4 options in hashed order -> instruction; letter of the correct one",
        mapper=_map_gpqa,
        grader="mcq-a-d",
    ),
    BuiltinDataset(
        name="math-500",
        title="MATH-500",
        domain="Competition mathematics",
        repo_id="HuggingFaceH4/MATH-500",
        filename="test.jsonl",
        config="default",
        split="test",
        license="none declared on the dataset card; problems from openai/prm800k (MIT)",
        gated=False,
        answer_format="Final answer: <answer>",
        generation_prompt_id="math-500-answer",
        judge_prompt_id="math-final-answer-judge",
        id_column="unique_id",
        columns=("problem", "solution", "answer", "subject", "level", "unique_id"),
        mapping="problem -> instruction; answer -> ground truth",
        mapper=_map_math500,
        grader="math",
    ),
    BuiltinDataset(
        name="python-codes-25k",
        title="Python Codes 25K",
        domain="Practical Python generation",
        repo_id="flytech/python-codes-25k",
        filename="python-codes-25k.jsonl",
        config="default",
        split="train",
        license="MIT (dataset card)",
        gated=False,
        answer_format="Valid Python, no fences",
        generation_prompt_id="code-python",
        judge_prompt_id="code-python-judge",
        id_column=None,
        columns=("instruction", "input", "output"),
        mapping="instruction (+ input when non-blank) -> instruction; output -> ground truth",
        mapper=_map_python_codes,
        no_grader_reason="its tasks have no tests to run and many correct programs",
    ),
    BuiltinDataset(
        name="humaneval",
        title="HumanEval",
        domain="Python function completion",
        repo_id="openai/openai_humaneval",
        filename="openai_humaneval/test-00000-of-00001.parquet",
        config="openai_humaneval",
        split="test",
        license="MIT",
        gated=False,
        answer_format="Indented function body only",
        generation_prompt_id="humaneval-code",
        judge_prompt_id="humaneval-code-judge",
        id_column="task_id",
        columns=("task_id", "prompt", "canonical_solution", "test", "entry_point"),
        mapping="prompt -> instruction; canonical_solution -> ground truth",
        mapper=_map_humaneval,
        grader="humaneval",
    ),
    BuiltinDataset(
        name="quantum-mechanics",
        title="Quantum Mechanics",
        domain="Physics chain-of-thought",
        repo_id="0xZee/dataset-CoT-Quantum-Mechanics-1224",
        filename="data/train-00000-of-00001.parquet",
        config="default",
        split="train",
        license=(
            "none declared on the dataset card; rows derive from EricLu/SCP-116K (CC BY-NC-SA 4.0)"
        ),
        gated=False,
        answer_format="Step-by-step + final answer",
        generation_prompt_id="quantum-mechanics-reasoning",
        judge_prompt_id="physics-reasoning-judge",
        id_column=None,
        columns=("question", "response"),
        mapping="question -> instruction; response (reference solution) -> ground truth",
        mapper=_map_quantum,
        no_grader_reason="its answers are free-form physics with equivalent forms",
    ),
    BuiltinDataset(
        name="ifeval",
        title="IFEval",
        domain="Instruction-following precision",
        repo_id="google/IFEval",
        filename="ifeval_input_data.jsonl",
        config="default",
        split="train",
        license="Apache 2.0",
        gated=False,
        answer_format="Satisfies all stated constraints",
        generation_prompt_id="ifeval-instruction",
        judge_prompt_id="ifeval-constraint-judge",
        id_column="key",
        columns=("key", "prompt", "instruction_id_list", "kwargs"),
        mapping="prompt -> instruction; numbered constraint list -> ground truth",
        mapper=_map_ifeval,
        grader="ifeval",
    ),
)

BUILTIN_DATASETS: Mapping[str, BuiltinDataset] = MappingProxyType({s.name: s for s in _SPECS})
"""The built-in datasets by name, in the methodology's table order."""


def builtin_names() -> tuple[str, ...]:
    """Names of the built-in datasets, in the methodology's table order."""
    return tuple(BUILTIN_DATASETS)


def unknown_builtin(name: str) -> DatasetError:
    """The error for a name that is neither a built-in nor a custom dataset file."""
    wanted = name.strip().lower().replace("_", "-").replace(" ", "-")
    close = difflib.get_close_matches(wanted, builtin_names(), n=1, cutoff=0.6)
    if not close:
        close = [known for known in builtin_names() if wanted and wanted in known][:1]
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return DatasetError(
        f"Unknown built-in dataset '{name}'.{hint} The built-ins are: "
        f"{', '.join(builtin_names())}; a custom dataset is a path to a .jsonl or .csv file."
    )


def get_builtin(name: str) -> BuiltinDataset:
    """The built-in named ``name``; :class:`DatasetError` with a suggestion otherwise."""
    try:
        return BUILTIN_DATASETS[name]
    except KeyError:
        raise unknown_builtin(name) from None


# --- the v1 rule --------------------------------------------------------------------------


def v1_rank_key(name: str, native_id: str) -> str:
    """sha256 hex of ``"kyai/<name>/v1/<native id>"``: the v1 rank of a native row."""
    return hashlib.sha256(f"kyai/{name}/v1/{native_id}".encode()).hexdigest()


def v1_select(
    spec: BuiltinDataset, path: Path, records: Sequence[Record]
) -> list[tuple[str, Record]]:
    """(native id, record) of the rows the v1 rule keeps, in rank order (module docstring)."""
    seen: dict[str, Record] = {}
    for position, record in enumerate(records):
        native = spec.native_id(path, record, position)
        if native in seen:
            raise record.error(
                path,
                f"Duplicate row id {native!r}: {seen[native].where()} has the same id.",
                field=spec.id_column,
            )
        seen[native] = record
    ranked = sorted(seen, key=lambda native: v1_rank_key(spec.name, native))
    return [(native, seen[native]) for native in ranked[: spec.size]]


def load_builtin(
    spec: BuiltinDataset,
    *,
    dataset_file: Path | None,
    prompts: Prompts,
    hf_revision: str | None,
    downloader: Downloader | None,
) -> Dataset:
    """Read the native file (local or downloaded), apply the v1 rule and the mapping."""
    if dataset_file is not None:
        path = dataset_file
        source = str(dataset_file)
    else:
        fetch = downloader if downloader is not None else hf_download
        path = Path(fetch(repo_id=spec.repo_id, filename=spec.filename, revision=hf_revision))
        source = spec.source_uri(revision_from_cache_path(path) or hf_revision)
    records = read_records(path, allowed=NATIVE_FORMATS, required_csv=_csv_columns(spec, path))
    rows = []
    for index, (native, record) in enumerate(v1_select(spec, path, records)):
        mapped = spec.map_row(path, record)
        try:
            row = Row(
                index=index,
                row_id=native,
                instruction=mapped.instruction,
                ground_truth_response=mapped.ground_truth_response,
                metadata=mapped.metadata,
            )
        except TypeError as exc:
            raise record.error(path, f"The row cannot be stored as JSON: {exc}") from None
        rows.append(row)
    return Dataset(
        name=spec.name,
        version=spec.version,
        builtin=True,
        rows=tuple(rows),
        prompts=prompts,
        sha256=dataset_sha256(rows),
        source=source,
    )


def _csv_columns(spec: BuiltinDataset, path: Path) -> tuple[str, ...]:
    if format_of(path)[0] != "csv":
        return ()
    id_columns = (
        () if spec.id_column is None or spec.id_column in spec.columns else (spec.id_column,)
    )
    return id_columns + spec.columns
