from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kyai.datasets import DatasetError, load_dataset

GEN = "You are a helpful assistant."


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def jsonl(*objects: object) -> str:
    return "".join(json.dumps(o) + "\n" for o in objects)


def ok(instruction: str = "Q", ground: str = "A", **extra: object) -> dict[str, object]:
    return {"instruction": instruction, "ground_truth_response": ground, **extra}


# --- happy paths ----------------------------------------------------------------------------


def test_jsonl_rows_in_order_with_sequential_ids_and_blank_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path / "my-set.jsonl", jsonl(ok("one", "1")) + "\n   \n" + jsonl(ok("two", "2"))
    )
    ds = load_dataset(str(path), generation_prompt=GEN, judge_prompt="Judge it.")
    assert ds.name == "my-set" and ds.version == "custom" and not ds.builtin
    assert ds.source == str(path)
    assert [(r.index, r.row_id, r.instruction, r.ground_truth_response) for r in ds.rows] == [
        (0, "1", "one", "1"),
        (1, "2", "two", "2"),
    ]
    assert all(dict(r.metadata) == {} for r in ds.rows)
    assert ds.prompts.generation == GEN and ds.prompts.judge == "Judge it."
    assert ds.prompts.generation_id is None and ds.prompts.judge_id is None


def test_judge_prompt_may_be_omitted_at_load_time(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", jsonl(ok()))
    assert load_dataset(str(path), generation_prompt=GEN).prompts.judge is None


def test_external_row_ids_kept_and_integers_written_in_decimal(tmp_path: Path) -> None:
    rows = [ok("a", external_row_id="case-7"), ok("b", external_row_id=17), ok("c")]
    ds = load_dataset(str(write(tmp_path / "d.jsonl", jsonl(*rows))), generation_prompt=GEN)
    # The third row has no id: it gets its 1-based position.
    assert [r.row_id for r in ds.rows] == ["case-7", "17", "3"]


def test_values_are_kept_exactly_and_extra_fields_ignored(tmp_path: Path) -> None:
    row = ok("  spaced\ttext \n", "", note="ignored", external_row_id=None)
    ds = load_dataset(str(write(tmp_path / "d.jsonl", jsonl(row))), generation_prompt=GEN)
    assert ds.rows[0].instruction == "  spaced\ttext \n"
    assert ds.rows[0].ground_truth_response == ""
    assert ds.rows[0].row_id == "1"


def test_csv_quoting_multiline_fields_and_crlf(tmp_path: Path) -> None:
    content = (
        "external_row_id,instruction,ground_truth_response\r\n"
        'r1,"Say ""hello"", then stop.","hello"\r\n'
        'r2,"Line one\r\nLine two, with comma",plain\r\n'
        "r3,last,ok\r\n"
    )
    ds = load_dataset(str(write(tmp_path / "d.csv", content)), generation_prompt=GEN)
    assert [(r.row_id, r.instruction, r.ground_truth_response) for r in ds.rows] == [
        ("r1", 'Say "hello", then stop.', "hello"),
        ("r2", "Line one\r\nLine two, with comma", "plain"),
        ("r3", "last", "ok"),
    ]


def test_csv_line_numbers_stay_true_after_multiline_fields(tmp_path: Path) -> None:
    content = 'instruction,ground_truth_response\n"a\nb\nc",x\n" ",y\n'
    with pytest.raises(DatasetError) as info:
        load_dataset(str(write(tmp_path / "d.csv", content)), generation_prompt=GEN)
    err = info.value
    assert (err.line, err.row, err.field) == (5, 2, "instruction")
    assert "line 5 (data row 2)" in str(err)


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_utf8_bom_is_accepted(tmp_path: Path, suffix: str) -> None:
    body = jsonl(ok("é", "ü")) if suffix == "jsonl" else "instruction,ground_truth_response\né,ü\n"
    path = write(tmp_path / f"d.{suffix}", b"\xef\xbb\xbf" + body.encode())
    ds = load_dataset(str(path), generation_prompt=GEN)
    assert (ds.rows[0].instruction, ds.rows[0].ground_truth_response) == ("é", "ü")


def test_jsonl_and_csv_with_the_same_content_give_the_same_dataset(tmp_path: Path) -> None:
    records = [
        {
            "external_row_id": "x1",
            "instruction": 'Quote "this", please',
            "ground_truth_response": "ok",
        },
        {"external_row_id": 2, "instruction": "Multi\nline ☃", "ground_truth_response": "a,b"},
        {"instruction": "No id", "ground_truth_response": ""},
    ]
    (tmp_path / "j").mkdir()
    (tmp_path / "c").mkdir()
    a = write(tmp_path / "j" / "same.jsonl", jsonl(*records))
    csv_text = (
        "instruction,ground_truth_response,external_row_id\n"
        '"Quote ""this"", please",ok,x1\n'
        '"Multi\nline ☃","a,b",2\n'
        "No id,,\n"
    )
    b = write(tmp_path / "c" / "same.csv", csv_text)
    ds_a = load_dataset(str(a), generation_prompt=GEN, judge_prompt="J")
    ds_b = load_dataset(str(b), generation_prompt=GEN, judge_prompt="J")
    assert ds_a.rows == ds_b.rows
    assert ds_a.sha256 == ds_b.sha256
    assert (ds_a.name, ds_a.prompts) == (ds_b.name, ds_b.prompts)
    assert ds_a.source != ds_b.source


def test_csv_fields_larger_than_the_csv_module_default_limit(tmp_path: Path) -> None:
    big = "x = 1\n" * 40_000  # 240 kB, past the csv module's 128 KiB default
    content = f'instruction,ground_truth_response\nWrite code,"{big}"\n'
    ds = load_dataset(str(write(tmp_path / "big.csv", content)), generation_prompt=GEN)
    assert ds.rows[0].ground_truth_response == big


def test_gzipped_custom_file(tmp_path: Path) -> None:
    plain = load_dataset(str(write(tmp_path / "g.jsonl", jsonl(ok()))), generation_prompt=GEN)
    path = write(tmp_path / "g.jsonl.gz", gzip.compress(jsonl(ok()).encode()))
    ds = load_dataset(str(path), generation_prompt=GEN)
    assert ds.name == "g" and ds.sha256 == plain.sha256


def test_accepts_a_path_object_string_with_directories(tmp_path: Path) -> None:
    sub = tmp_path / "deep" / "er"
    sub.mkdir(parents=True)
    path = write(sub / "set.v2.jsonl", jsonl(ok()))
    assert load_dataset(str(path), generation_prompt=GEN).name == "set.v2"


# --- errors ---------------------------------------------------------------------------------

ERROR_CASES: list[tuple[str, str, bytes | str, int | None, str | None, str]] = [
    # id, file name, content, expected line, expected field, message fragment
    ("empty-file", "d.jsonl", "", None, None, "empty"),
    ("only-blank-lines", "d.jsonl", "\n  \n\n", None, None, "empty"),
    ("invalid-json", "d.jsonl", jsonl(ok()) + '{"instruction": "x",\n', 2, None, "not valid JSON"),
    ("not-an-object", "d.jsonl", jsonl(ok()) + "\n" + '["a", "b"]\n', 3, None, "an array"),
    (
        "missing-instruction",
        "d.jsonl",
        jsonl({"ground_truth_response": "x"}),
        1,
        "instruction",
        "missing",
    ),
    (
        "missing-ground-truth",
        "d.jsonl",
        jsonl(ok(), {"instruction": "x"}),
        2,
        "ground_truth_response",
        "missing",
    ),
    (
        "number-instruction",
        "d.jsonl",
        jsonl({"instruction": 42, "ground_truth_response": "x"}),
        1,
        "instruction",
        "got a number",
    ),
    (
        "null-ground-truth",
        "d.jsonl",
        jsonl({"instruction": "q", "ground_truth_response": None}),
        1,
        "ground_truth_response",
        "got null",
    ),
    (
        "number-ground-truth",
        "d.jsonl",
        jsonl({"instruction": "q", "ground_truth_response": 4}),
        1,
        "ground_truth_response",
        "must be a string",
    ),
    (
        "float-row-id",
        "d.jsonl",
        jsonl(ok(external_row_id=1.5)),
        1,
        "external_row_id",
        "string or an integer",
    ),
    (
        "bool-row-id",
        "d.jsonl",
        jsonl(ok(external_row_id=True)),
        1,
        "external_row_id",
        "got a boolean",
    ),
    (
        "duplicate-row-id",
        "d.jsonl",
        jsonl(ok(external_row_id="a"), ok(external_row_id="b"), ok(external_row_id="a")),
        3,
        "external_row_id",
        "line 1 already has this id",
    ),
    (
        "duplicate-with-sequential-id",
        "d.jsonl",
        jsonl(ok(external_row_id="2"), ok()),
        2,
        "external_row_id",
        "assigned sequentially",
    ),
    ("empty-instruction", "d.jsonl", jsonl(ok(), ok("")), 2, "instruction", "empty"),
    ("blank-instruction", "d.jsonl", jsonl(ok(" \n\t")), 1, "instruction", "empty"),
    (
        "not-utf8",
        "d.jsonl",
        jsonl(ok()).encode()
        + '{"instruction": "caf\xe9", "ground_truth_response": "x"}\n'.encode("latin-1"),
        2,
        None,
        "not valid UTF-8",
    ),
    (
        "csv-missing-column",
        "d.csv",
        "instruction,answer\nq,a\n",
        1,
        "ground_truth_response",
        "no 'ground_truth_response' column",
    ),
    ("csv-header-only", "d.csv", "instruction,ground_truth_response\n", None, None, "no data rows"),
    (
        "csv-too-many-fields",
        "d.csv",
        "instruction,ground_truth_response\nq,a\nq, a, b\n",
        3,
        None,
        "3 fields but the header",
    ),
    (
        "csv-bad-quoting",
        "d.csv",
        'instruction,ground_truth_response\nq,a\n"q"x,a\n',
        3,
        None,
        "malformed",
    ),
    (
        "csv-empty-instruction",
        "d.csv",
        "instruction,ground_truth_response\nq,a\n,a\n",
        3,
        "instruction",
        "empty",
    ),
    (
        "csv-duplicate-row-id",
        "d.csv",
        "external_row_id,instruction,ground_truth_response\n7,q,a\n8,q,a\n7,q,a\n",
        4,
        "external_row_id",
        "line 2 already has this id",
    ),
    (
        "csv-duplicate-header",
        "d.csv",
        "instruction,instruction,ground_truth_response\nq,q,a\n",
        1,
        None,
        "twice",
    ),
    (
        "csv-not-utf8",
        "d.csv",
        b"instruction,ground_truth_response\nq,a\nna\xefve,b\n",
        3,
        None,
        "not valid UTF-8",
    ),
    ("unsupported-suffix", "d.txt", "instruction\n", None, None, ".jsonl or .csv"),
]


@pytest.mark.parametrize(
    ("name", "content", "line", "field", "fragment"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_error_names_file_line_and_field(
    tmp_path: Path,
    name: str,
    content: str | bytes,
    line: int | None,
    field: str | None,
    fragment: str,
) -> None:
    path = write(tmp_path / name, content)
    with pytest.raises(DatasetError) as info:
        load_dataset(str(path), generation_prompt=GEN)
    err = info.value
    message = str(err)
    assert isinstance(err, ValueError)
    assert err.path == str(path) and message.startswith(str(path))
    assert err.line == line
    assert err.field == field
    if line is not None:
        assert f"line {line}" in message
    if field is not None:
        assert f"field '{field}'" in message
    assert fragment in message
    assert message.rstrip().endswith((".", "?", ")"))


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.jsonl"
    with pytest.raises(DatasetError, match="does not exist") as info:
        load_dataset(str(path), generation_prompt=GEN)
    assert info.value.path == str(path) and info.value.line is None


def test_directory_instead_of_file(tmp_path: Path) -> None:
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    with pytest.raises(DatasetError, match="directory"):
        load_dataset(str(folder), generation_prompt=GEN)


def test_generation_prompt_is_required_and_checked_first(tmp_path: Path) -> None:
    path = tmp_path / "absent.jsonl"  # not even created: the prompt check comes first
    with pytest.raises(DatasetError, match="generation prompt") as info:
        load_dataset(str(path))
    assert info.value.field == "generation_prompt"
    with pytest.raises(DatasetError, match="non-empty"):
        load_dataset(str(path), generation_prompt="   ")


def test_builtin_only_options_are_rejected_for_custom_files(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", jsonl(ok()))
    with pytest.raises(DatasetError, match="built-in datasets only"):
        load_dataset(str(path), generation_prompt=GEN, dataset_file=path)
    with pytest.raises(DatasetError, match="built-in datasets only"):
        load_dataset(str(path), generation_prompt=GEN, hf_revision="abc")


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("mmlu_pro", "mmlu-pro"), ("MATH-500", "math-500"), ("gpqa", "gpqa-diamond"), ("zzz", None)],
)
def test_unknown_builtin_names_get_a_suggestion(name: str, suggestion: str | None) -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset(name)
    message = str(info.value)
    assert f"Unknown built-in dataset '{name}'" in message
    assert info.value.path is None
    if suggestion:
        assert f"Did you mean '{suggestion}'?" in message
    else:
        assert "Did you mean" not in message
    assert "mmlu-pro, gpqa-diamond, math-500" in message
