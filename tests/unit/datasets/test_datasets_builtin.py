from __future__ import annotations

import csv
import hashlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kyai.datasets import (
    BUILTIN_DATASETS,
    GENERATION_PROMPTS,
    JUDGE_PROMPTS,
    DatasetError,
    DatasetUnavailableError,
    builtin_names,
    dataset_sha256,
    get_builtin,
    load_dataset,
)

NATIVE = Path(__file__).parent / "data" / "native"


def rank(name: str, native_id: str) -> str:
    """The documented v1 rank key, computed here independently of the package."""
    return hashlib.sha256(f"kyai/{name}/v1/{native_id}".encode()).hexdigest()


def write_parquet(path: Path, rows: list[dict[str, Any]], schema: pa.Schema | None = None) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def never_download(**kwargs: Any) -> Path:
    raise AssertionError(f"no download expected, got {kwargs}")


MMLU_SCHEMA = pa.schema(
    [
        ("question_id", pa.int64()),
        ("question", pa.string()),
        ("options", pa.list_(pa.string())),
        ("answer", pa.string()),
        ("answer_index", pa.int64()),
        ("cot_content", pa.string()),
        ("category", pa.string()),
        ("src", pa.string()),
    ]
)


def mmlu_row(qid: int, answer_index: int = 2, n_options: int = 10) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question": f"Question number {qid}?",
        "options": [f"option {i}" for i in range(n_options)],
        "answer": "ABCDEFGHIJ"[answer_index],
        "answer_index": answer_index,
        "cot_content": "",
        "category": "physics",
        "src": f"ori_mmlu-{qid}",
    }


# --- the table ------------------------------------------------------------------------------


def test_builtin_table_matches_the_methodology() -> None:
    assert builtin_names() == (
        "mmlu-pro",
        "gpqa-diamond",
        "math-500",
        "python-codes-25k",
        "humaneval",
        "quantum-mechanics",
        "ifeval",
    )
    repos = {name: spec.repo_id for name, spec in BUILTIN_DATASETS.items()}
    assert repos == {
        "mmlu-pro": "TIGER-Lab/MMLU-Pro",
        "gpqa-diamond": "Idavidrein/gpqa",
        "math-500": "HuggingFaceH4/MATH-500",
        "python-codes-25k": "flytech/python-codes-25k",
        "humaneval": "openai/openai_humaneval",
        "quantum-mechanics": "0xZee/dataset-CoT-Quantum-Mechanics-1224",
        "ifeval": "google/IFEval",
    }
    for spec in BUILTIN_DATASETS.values():
        assert spec.version == "v1" and spec.size == 100
        assert spec.license and spec.answer_format and spec.filename
    assert [n for n, s in BUILTIN_DATASETS.items() if s.gated] == ["gpqa-diamond"]
    assert get_builtin("ifeval") is BUILTIN_DATASETS["ifeval"]
    with pytest.raises(DatasetError, match="Did you mean 'ifeval'"):
        get_builtin("ifevl")


# --- each mapping, on small rows in the native schema ----------------------------------------


def test_mmlu_pro_parquet_mapping(tmp_path: Path) -> None:
    row = {
        "question_id": 70,
        "question": "Which gas makes up most of Earth's atmosphere?",
        "options": ["Oxygen", "Nitrogen", "Argon", "Carbon dioxide"],
        "answer": "B",
        "answer_index": 1,
        "cot_content": "A: Let's think step by step.",
        "category": "chemistry",
        "src": "ori_mmlu-high_school_chemistry",
    }
    path = write_parquet(tmp_path / "test-00000-of-00001.parquet", [row], MMLU_SCHEMA)
    ds = load_dataset("mmlu-pro", dataset_file=path, downloader=never_download)
    (only,) = ds.rows
    assert only.row_id == "70"
    assert only.instruction == (
        "Which gas makes up most of Earth's atmosphere?\n\n"
        "A. Oxygen\nB. Nitrogen\nC. Argon\nD. Carbon dioxide"
    )
    assert only.ground_truth_response == "B"
    assert dict(only.metadata) == {
        "choices": ("Oxygen", "Nitrogen", "Argon", "Carbon dioxide"),
        "category": "chemistry",
        "src": "ori_mmlu-high_school_chemistry",
    }
    assert (ds.name, ds.version, ds.builtin, ds.source) == ("mmlu-pro", "v1", True, str(path))
    assert ds.prompts.generation == GENERATION_PROMPTS["mmlu-pro-mcq"]
    assert ds.prompts.judge == JUDGE_PROMPTS["mcq-exact-match-judge"]
    assert (ds.prompts.generation_id, ds.prompts.judge_id) == (
        "mmlu-pro-mcq",
        "mcq-exact-match-judge",
    )


def test_mmlu_pro_ten_options_use_letters_a_to_j(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "m.parquet", [mmlu_row(1, answer_index=9)], MMLU_SCHEMA)
    (row,) = load_dataset("mmlu-pro", dataset_file=path).rows
    assert row.instruction.splitlines()[-1] == "J. option 9"
    assert row.ground_truth_response == "J"


def test_gpqa_csv_mapping_with_hashed_option_order() -> None:
    path = NATIVE / "gpqa_diamond.csv"
    ds = load_dataset("gpqa-diamond", dataset_file=path, downloader=never_download)
    with path.open(encoding="utf-8", newline="") as handle:
        native = {r["Record ID"]: r for r in csv.DictReader(handle)}
    assert sorted(r.row_id for r in ds.rows) == sorted(native)
    for row in ds.rows:
        record = native[row.row_id]
        correct = record["Correct Answer"].strip()
        options = [
            record[c].strip()
            for c in (
                "Correct Answer",
                "Incorrect Answer 1",
                "Incorrect Answer 2",
                "Incorrect Answer 3",
            )
        ]
        # Documented order: by sha256("kyai/gpqa-diamond/v1/<Record ID>/<option text>").
        expected = sorted(
            options,
            key=lambda o: hashlib.sha256(
                f"kyai/gpqa-diamond/v1/{row.row_id}/{o}".encode()
            ).hexdigest(),
        )
        assert list(row.metadata["choices"]) == expected
        letter = "ABCD"[expected.index(correct)]
        assert row.ground_truth_response == letter
        question, _, listed = row.instruction.partition("\n\n")
        assert question == record["Question"].strip()
        assert listed.split("\n") == [f"{'ABCD'[i]}. {o}" for i, o in enumerate(expected)]
    first = next(r for r in ds.rows if r.row_id == "rec0000000000001")
    assert first.instruction.startswith(
        "A sample of an ideal gas is compressed isothermally to half its volume.\n"
        "By what factor does its pressure change?\n\nA. "
    )
    assert "It halves." in first.metadata["choices"]  # surrounding whitespace removed
    assert "It quadruples." in first.metadata["choices"]
    assert first.metadata["domain"] == "Physics"
    assert first.metadata["subdomain"] == "Physics (general)"
    assert ds.prompts.generation_id == "gpqa-mcq"


def test_math500_jsonl_mapping() -> None:
    ds = load_dataset("math-500", dataset_file=NATIVE / "math500_test.jsonl")
    by_id = {r.row_id: r for r in ds.rows}
    assert set(by_id) == {
        "test/prealgebra/1001.json",
        "test/number_theory/1002.json",
        "test/algebra/1003.json",
    }
    row = by_id["test/number_theory/1002.json"]
    assert row.instruction == "Simplify $\\frac{6}{8}$."
    assert row.ground_truth_response == "\\frac{3}{4}"
    assert dict(row.metadata) == {
        "solution": "Divide by 2: $\\boxed{\\frac{3}{4}}$.",
        "subject": "Number Theory",
        "level": 2,
    }
    assert ds.prompts.judge_id == "math-final-answer-judge"


def test_python_codes_mapping_uses_position_ids_and_appends_input() -> None:
    ds = load_dataset("python-codes-25k", dataset_file=NATIVE / "python-codes-25k.jsonl")
    by_id = {r.row_id: r for r in ds.rows}
    assert set(by_id) == {"0", "1"}  # no id column: the 0-based position in the file
    assert by_id["0"].instruction == "Write a function that reverses a string"
    assert by_id["0"].ground_truth_response == "```python\ndef reverse(s):\n    return s[::-1]\n```"
    assert by_id["1"].instruction == "Sum the numbers in the given list\n\n[1, 2, 3]"
    assert dict(by_id["1"].metadata) == {}


def test_python_codes_json_array_file_gives_the_same_rows(tmp_path: Path) -> None:
    lines = (NATIVE / "python-codes-25k.jsonl").read_text(encoding="utf-8").splitlines()
    array = tmp_path / "python-codes-25k.json"
    array.write_text(json.dumps([json.loads(line) for line in lines]), encoding="utf-8")
    a = load_dataset("python-codes-25k", dataset_file=NATIVE / "python-codes-25k.jsonl")
    b = load_dataset("python-codes-25k", dataset_file=array)
    assert a.rows == b.rows and a.sha256 == b.sha256


HUMANEVAL_ROWS = [
    {
        "task_id": "HumanEval/0",
        "prompt": (
            'def add(a: int, b: int) -> int:\n    """Return a + b.\n'
            '    >>> add(1, 2)\n    3\n    """\n'
        ),
        "canonical_solution": "    return a + b\n",
        "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
        "entry_point": "add",
    },
    {
        "task_id": "HumanEval/1",
        "prompt": 'def neg(x: int) -> int:\n    """Return -x."""\n',
        "canonical_solution": "    return -x\n",
        "test": "def check(candidate):\n    assert candidate(2) == -2\n",
        "entry_point": "neg",
    },
]


def test_humaneval_parquet_and_jsonl_give_the_same_dataset(tmp_path: Path) -> None:
    parquet = write_parquet(tmp_path / "test-00000-of-00001.parquet", HUMANEVAL_ROWS)
    lines = write_jsonl(tmp_path / "HumanEval.jsonl", HUMANEVAL_ROWS)
    a = load_dataset("humaneval", dataset_file=parquet)
    b = load_dataset("humaneval", dataset_file=lines)
    assert a.rows == b.rows and a.sha256 == b.sha256
    row = next(r for r in a.rows if r.row_id == "HumanEval/0")
    assert row.instruction == HUMANEVAL_ROWS[0]["prompt"]
    assert row.ground_truth_response == "    return a + b\n"
    assert dict(row.metadata) == {
        key: HUMANEVAL_ROWS[0][key]
        for key in ("prompt", "test", "entry_point", "canonical_solution")
    }


def test_quantum_mechanics_parquet_mapping(tmp_path: Path) -> None:
    rows = [
        {
            "question": "What is the ground-state energy of a particle in a 1D box of width L?",
            "response": "E_1 = \\pi^2 \\hbar^2 / (2 m L^2)",
            "CoT": "Okay, so the allowed wavenumbers are k = n pi / L...",
        }
    ]
    path = write_parquet(tmp_path / "train-00000-of-00001.parquet", rows)
    (row,) = load_dataset("quantum-mechanics", dataset_file=path).rows
    assert row.row_id == "0"
    assert row.instruction == rows[0]["question"]
    assert row.ground_truth_response == rows[0]["response"]
    assert dict(row.metadata) == {}


def test_ifeval_mapping_lists_constraints_with_non_null_kwargs() -> None:
    ds = load_dataset("ifeval", dataset_file=NATIVE / "ifeval_input_data.jsonl")
    by_id = {r.row_id: r for r in ds.rows}
    assert set(by_id) == {"9001", "9002", "9003"}
    assert by_id["9001"].ground_truth_response == "1. punctuation:no_comma"
    assert by_id["9002"].ground_truth_response == (
        '1. length_constraints:number_words (num_words=300, relation="at least")\n'
        "2. detectable_format:number_highlighted_sections (num_highlights=2)"
    )
    assert by_id["9003"].ground_truth_response == (
        '1. keywords:existence (keywords=["apple", "pear"])'
    )
    assert by_id["9003"].instruction.startswith("List three fruits.")
    meta = by_id["9003"].metadata
    assert list(meta["instruction_id_list"]) == ["keywords:existence"]
    assert [dict(k) for k in meta["kwargs"]] == [{"keywords": ("apple", "pear")}]
    assert ds.prompts.judge_id == "ifeval-constraint-judge"


def test_ifeval_parquet_with_hub_style_null_struct_fields(tmp_path: Path) -> None:
    # The Hub's Parquet conversion unifies kwargs into one struct type with nulls.
    native = [
        json.loads(line)
        for line in (NATIVE / "ifeval_input_data.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    kwargs_type = pa.list_(
        pa.struct(
            [
                ("num_words", pa.int64()),
                ("relation", pa.string()),
                ("num_highlights", pa.int64()),
                ("keywords", pa.list_(pa.string())),
            ]
        )
    )
    schema = pa.schema(
        [
            ("key", pa.int64()),
            ("prompt", pa.string()),
            ("instruction_id_list", pa.list_(pa.string())),
            ("kwargs", kwargs_type),
        ]
    )
    parquet = write_parquet(tmp_path / "0000.parquet", native, schema)
    a = load_dataset("ifeval", dataset_file=parquet)
    b = load_dataset("ifeval", dataset_file=NATIVE / "ifeval_input_data.jsonl")
    assert a.rows == b.rows and a.sha256 == b.sha256


# --- native schema errors -------------------------------------------------------------------


def test_native_file_missing_a_column_is_named(tmp_path: Path) -> None:
    rows = [{k: v for k, v in mmlu_row(1).items() if k != "options"}]
    path = write_parquet(tmp_path / "m.parquet", rows)
    with pytest.raises(DatasetError) as info:
        load_dataset("mmlu-pro", dataset_file=path)
    err = info.value
    assert (err.path, err.row, err.field) == (str(path), 1, "options")
    assert "no 'options' column" in str(err) and "row 1" in str(err)


def test_gpqa_csv_missing_column_is_named_at_the_header(tmp_path: Path) -> None:
    path = tmp_path / "gpqa_diamond.csv"
    text = (NATIVE / "gpqa_diamond.csv").read_text(encoding="utf-8")
    path.write_text(text.replace('"Correct Answer"', '"Right Answer"', 1), encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_dataset("gpqa-diamond", dataset_file=path)
    assert (info.value.line, info.value.field) == (1, "Correct Answer")
    assert "'Correct Answer'" in str(info.value)


@pytest.mark.parametrize(
    ("name", "rows", "field", "fragment"),
    [
        ("mmlu-pro", [mmlu_row(1, n_options=4) | {"answer": "E"}], "answer", "A to D"),
        ("mmlu-pro", [mmlu_row(1) | {"answer_index": 5}], "answer_index", "disagrees"),
        ("mmlu-pro", [mmlu_row(1) | {"options": "A;B"}], "options", "list of strings"),
        ("mmlu-pro", [mmlu_row(1), mmlu_row(1)], "question_id", "Duplicate row id '1'"),
        ("humaneval", [HUMANEVAL_ROWS[0] | {"task_id": None}], "task_id", "non-empty string"),
        (
            "ifeval",
            [
                {
                    "key": 1,
                    "prompt": "p",
                    "instruction_id_list": ["a:b", "c:d"],
                    "kwargs": [{}],
                }
            ],
            "kwargs",
            "must pair up",
        ),
        (
            "math-500",
            [
                {
                    "problem": "p",
                    "solution": "s",
                    "answer": 5,
                    "subject": "x",
                    "level": 1,
                    "unique_id": "u",
                }
            ],
            "answer",
            "must be a string",
        ),
    ],
    ids=[
        "answer-out-of-range",
        "answer-index-mismatch",
        "options-not-list",
        "duplicate-id",
        "null-id",
        "ifeval-kwargs-length",
        "math-answer-number",
    ],
)
def test_native_value_errors_name_line_and_field(
    tmp_path: Path, name: str, rows: list[dict[str, Any]], field: str, fragment: str
) -> None:
    path = write_jsonl(tmp_path / "native.jsonl", rows)
    with pytest.raises(DatasetError) as info:
        load_dataset(name, dataset_file=path)
    err = info.value
    assert err.path == str(path) and err.field == field and err.line is not None
    assert f"line {err.line}" in str(err) and f"field '{field}'" in str(err)
    assert fragment in str(err)


def test_unreadable_and_unsupported_native_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"definitely not parquet")
    with pytest.raises(DatasetError, match="cannot be read as Parquet"):
        load_dataset("humaneval", dataset_file=broken)
    with pytest.raises(DatasetError, match="Unsupported file type"):
        load_dataset("humaneval", dataset_file=tmp_path / "x.xlsx")
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("humaneval", dataset_file=tmp_path / "missing.parquet")


# --- the v1 rule ----------------------------------------------------------------------------


def math_rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "problem": f"Problem {i}",
            "solution": f"Solution {i}",
            "answer": str(i),
            "subject": "Algebra",
            "level": 1 + i % 5,
            "unique_id": f"test/algebra/{i}.json",
        }
        for i in range(count)
    ]


def test_v1_keeps_the_100_lowest_ranked_rows_in_rank_order(tmp_path: Path) -> None:
    rows = math_rows(150)
    ds = load_dataset("math-500", dataset_file=write_jsonl(tmp_path / "test.jsonl", rows))
    expected = sorted((r["unique_id"] for r in rows), key=lambda u: rank("math-500", u))[:100]
    assert [r.row_id for r in ds.rows] == expected
    assert [r.index for r in ds.rows] == list(range(100))
    assert len({r.row_id for r in ds.rows}) == 100
    # Each kept row carries its own native content.
    for row in ds.rows:
        number = row.row_id.removeprefix("test/algebra/").removesuffix(".json")
        assert row.instruction == f"Problem {number}" and row.ground_truth_response == number


def test_v1_selection_does_not_depend_on_file_order_or_runs(tmp_path: Path) -> None:
    rows = math_rows(150)
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    a = load_dataset("math-500", dataset_file=write_jsonl(tmp_path / "a.jsonl", rows))
    b = load_dataset("math-500", dataset_file=write_jsonl(tmp_path / "b.jsonl", shuffled))
    c = load_dataset("math-500", dataset_file=tmp_path / "a.jsonl")
    assert a.rows == b.rows == c.rows
    assert a.sha256 == b.sha256 == c.sha256 == dataset_sha256(a.rows)


def test_v1_rank_is_namespaced_by_dataset_name(tmp_path: Path) -> None:
    rows = [
        {"instruction": f"task {i}", "input": "", "output": f"print({i})", "text": ""}
        for i in range(150)
    ]
    ds = load_dataset("python-codes-25k", dataset_file=write_jsonl(tmp_path / "p.jsonl", rows))
    positions = [str(i) for i in range(150)]
    expected = sorted(positions, key=lambda p: rank("python-codes-25k", p))[:100]
    assert [r.row_id for r in ds.rows] == expected
    assert [r.instruction for r in ds.rows] == [f"task {p}" for p in expected]
    other = sorted(positions, key=lambda p: rank("quantum-mechanics", p))[:100]
    assert expected != other


def test_v1_keeps_all_rows_of_a_small_file_in_rank_order(tmp_path: Path) -> None:
    rows = math_rows(7)
    ds = load_dataset("math-500", dataset_file=write_jsonl(tmp_path / "t.jsonl", rows))
    expected = sorted((r["unique_id"] for r in rows), key=lambda u: rank("math-500", u))
    assert [r.row_id for r in ds.rows] == expected
    bigger = load_dataset("math-500", dataset_file=write_jsonl(tmp_path / "u.jsonl", math_rows(8)))
    assert bigger.sha256 != ds.sha256


# --- prompts --------------------------------------------------------------------------------


def test_explicit_prompts_override_the_seed_ones() -> None:
    path = NATIVE / "math500_test.jsonl"
    ds = load_dataset("math-500", dataset_file=path, generation_prompt="Answer tersely.")
    assert ds.prompts.generation == "Answer tersely." and ds.prompts.generation_id is None
    assert ds.prompts.judge == JUDGE_PROMPTS["math-final-answer-judge"]
    assert ds.prompts.judge_id == "math-final-answer-judge"
    ds = load_dataset("math-500", dataset_file=path, judge_prompt="Score it.")
    assert ds.prompts.judge == "Score it." and ds.prompts.judge_id is None
    assert ds.prompts.generation_id == "math-500-answer"
    with pytest.raises(DatasetError, match="judge_prompt must be a non-empty string"):
        load_dataset("math-500", dataset_file=path, judge_prompt="")


# --- the Hub path, with a fake downloader ---------------------------------------------------


class FakeHub:
    def __init__(self, file: Path) -> None:
        self.file = file
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *, repo_id: str, filename: str, revision: str | None) -> str:
        self.calls.append({"repo_id": repo_id, "filename": filename, "revision": revision})
        return str(self.file)


def test_hub_download_path_with_fake_downloader() -> None:
    fake = FakeHub(NATIVE / "ifeval_input_data.jsonl")
    ds = load_dataset("ifeval", downloader=fake)
    assert fake.calls == [
        {"repo_id": "google/IFEval", "filename": "ifeval_input_data.jsonl", "revision": None}
    ]
    assert ds.source == "hf://google/IFEval/ifeval_input_data.jsonl@main"
    local = load_dataset("ifeval", dataset_file=NATIVE / "ifeval_input_data.jsonl")
    assert ds.rows == local.rows and ds.sha256 == local.sha256


def test_hub_source_records_the_cached_commit(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    cached = tmp_path / "datasets--google--IFEval" / "snapshots" / commit
    cached.mkdir(parents=True)
    shutil.copy(NATIVE / "ifeval_input_data.jsonl", cached / "ifeval_input_data.jsonl")
    fake = FakeHub(cached / "ifeval_input_data.jsonl")
    ds = load_dataset("ifeval", downloader=fake, hf_revision="v1.0")
    assert fake.calls[0]["revision"] == "v1.0"
    assert ds.source == f"hf://google/IFEval/ifeval_input_data.jsonl@{commit}"


def test_default_downloader_calls_hf_hub_download_for_a_dataset_repo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub

    calls: list[dict[str, Any]] = []

    def fake_hf_hub_download(**kwargs: Any) -> str:
        calls.append(kwargs)
        return str(NATIVE / "gpqa_diamond.csv")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_hf_hub_download)
    ds = load_dataset("gpqa-diamond", hf_revision="abc123")
    assert calls == [
        {
            "repo_id": "Idavidrein/gpqa",
            "filename": "gpqa_diamond.csv",
            "repo_type": "dataset",
            "revision": "abc123",
        }
    ]
    assert "token" not in calls[0]  # huggingface_hub reads HF_TOKEN itself
    assert ds.source == "hf://Idavidrein/gpqa/gpqa_diamond.csv@abc123"


def test_hub_errors_become_dataset_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError

    def gated(**kwargs: Any) -> str:
        error = GatedRepoError.__new__(GatedRepoError)
        Exception.__init__(error, "403 gated")
        raise error

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", gated)
    with pytest.raises(DatasetUnavailableError, match="HF_TOKEN") as info:
        load_dataset("gpqa-diamond")
    assert info.value.path == "hf://Idavidrein/gpqa/gpqa_diamond.csv@main"

    def offline(**kwargs: Any) -> str:
        raise LocalEntryNotFoundError("no connection")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(DatasetUnavailableError, match="--dataset-file"):
        load_dataset("humaneval")


def test_builtin_with_dataset_file_never_downloads() -> None:
    ds = load_dataset(
        "math-500", dataset_file=str(NATIVE / "math500_test.jsonl"), downloader=never_download
    )
    assert len(ds.rows) == 3
    with pytest.raises(DatasetError, match="cannot be combined with dataset_file"):
        load_dataset("math-500", dataset_file=NATIVE / "math500_test.jsonl", hf_revision="x")
