from __future__ import annotations

import json
from pathlib import Path

import pytest

from kyai.datasets import (
    DatasetError,
    dataset_from_dict,
    dataset_to_dict,
    load_dataset,
    read_rows_jsonl,
    write_rows_jsonl,
)

NATIVE = Path(__file__).parent / "data" / "native"


def test_rows_round_trip_exactly_including_index_and_metadata(tmp_path: Path) -> None:
    ds = load_dataset("ifeval", dataset_file=NATIVE / "ifeval_input_data.jsonl")
    path = tmp_path / "rows.jsonl"
    write_rows_jsonl(path, ds.rows)
    back = read_rows_jsonl(path)
    assert back == ds.rows
    assert [r.index for r in back] == [0, 1, 2]
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert sorted(first) == ["ground_truth_response", "index", "instruction", "metadata", "row_id"]
    assert first["metadata"] == {
        "instruction_id_list": list(ds.rows[0].metadata["instruction_id_list"]),
        "kwargs": [dict(k) for k in ds.rows[0].metadata["kwargs"]],
    }
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_manifest_round_trip(tmp_path: Path) -> None:
    source = tmp_path / "c.csv"
    source.write_text("instruction,ground_truth_response\nq1,a1\nq2,a2\n", encoding="utf-8")
    ds = load_dataset(str(source), generation_prompt="gen")
    manifest = dataset_to_dict(ds)
    assert "rows" not in manifest
    assert manifest["row_count"] == 2 and manifest["sha256"] == ds.sha256
    assert manifest["prompts"] == {
        "generation": "gen",
        "judge": None,
        "generation_id": None,
        "judge_id": None,
    }
    text = json.dumps(manifest)  # JSON-serialisable as it is
    write_rows_jsonl(tmp_path / "rows.jsonl", ds.rows)
    again = dataset_from_dict(json.loads(text), read_rows_jsonl(tmp_path / "rows.jsonl"))
    assert again == ds


def test_manifest_must_match_the_rows() -> None:
    ds = load_dataset("math-500", dataset_file=NATIVE / "math500_test.jsonl")
    manifest = dataset_to_dict(ds)
    with pytest.raises(DatasetError, match="do not match the manifest") as info:
        dataset_from_dict(manifest, reversed_rows(ds.rows))
    assert info.value.field == "sha256"
    with pytest.raises(DatasetError, match="says 3 rows but 2") as info:
        dataset_from_dict(manifest, ds.rows[:2])
    assert info.value.field == "row_count"
    broken = {**manifest, "prompts": {**manifest["prompts"], "judge": 5}}
    with pytest.raises(DatasetError, match="string or null") as info:
        dataset_from_dict(broken, ds.rows)
    assert info.value.field == "prompts.judge"
    missing = {k: v for k, v in manifest.items() if k != "name"}
    with pytest.raises(DatasetError, match="no 'name' field"):
        dataset_from_dict(missing, ds.rows)


def reversed_rows(rows: tuple[object, ...]) -> tuple[object, ...]:
    import dataclasses

    return tuple(
        dataclasses.replace(row, index=i)  # type: ignore[type-var]
        for i, row in enumerate(reversed(rows))
    )


@pytest.mark.parametrize(
    ("line", "field", "fragment"),
    [
        (
            {"index": 0, "row_id": "1", "instruction": "i", "metadata": {}},
            "ground_truth_response",
            "no 'ground_truth_response' field",
        ),
        (
            {
                "index": 3,
                "row_id": "1",
                "instruction": "i",
                "ground_truth_response": "g",
                "metadata": {},
            },
            "index",
            "must be 0",
        ),
        (
            {
                "index": 0,
                "row_id": 1,
                "instruction": "i",
                "ground_truth_response": "g",
                "metadata": {},
            },
            "row_id",
            "must be a string",
        ),
        (
            {
                "index": 0,
                "row_id": "1",
                "instruction": "i",
                "ground_truth_response": "g",
                "metadata": [],
            },
            "metadata",
            "must be an object",
        ),
    ],
    ids=["missing-field", "wrong-index", "row-id-number", "metadata-array"],
)
def test_reading_bad_stored_rows_names_line_and_field(
    tmp_path: Path, line: dict[str, object], field: str, fragment: str
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("\n" + json.dumps(line) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        read_rows_jsonl(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 2, field)
    assert fragment in str(err) and str(err).startswith(f"{path}, line 2, field '{field}'")
