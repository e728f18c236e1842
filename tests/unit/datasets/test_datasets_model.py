from __future__ import annotations

import dataclasses
import hashlib
import math

import pytest

from kyai.datasets import Dataset, Prompts, Row, canonical_jsonl, dataset_sha256


def tiny_rows() -> tuple[Row, ...]:
    return (
        Row(index=0, row_id="1", instruction="2+2?", ground_truth_response="4"),
        Row(
            index=1,
            row_id="q-2",
            instruction="Café ☕\nline two",
            ground_truth_response='say "hi"',
            metadata={"choices": ["A", "B"], "level": 3, "z": None, "a": {"y": 1.5, "x": True}},
        ),
    )


# The documented canonical form, written out by hand: one compact JSON object per row with
# sorted keys (metadata keys sorted too), non-ASCII kept as UTF-8, each line "\n"-terminated.
TINY_CANONICAL = (
    '{"ground_truth_response":"4","instruction":"2+2?","metadata":{},"row_id":"1"}\n'
    '{"ground_truth_response":"say \\"hi\\"","instruction":"Café ☕\\nline two",'
    '"metadata":{"a":{"x":true,"y":1.5},"choices":["A","B"],"level":3,"z":null},'
    '"row_id":"q-2"}\n'
).encode()


def test_sha256_is_sha256_of_the_documented_canonical_form() -> None:
    rows = tiny_rows()
    assert canonical_jsonl(rows) == TINY_CANONICAL
    assert dataset_sha256(rows) == hashlib.sha256(TINY_CANONICAL).hexdigest()


def test_sha256_ignores_index_but_not_order_or_content() -> None:
    a, b = tiny_rows()
    base = dataset_sha256((a, b))
    swapped = (dataclasses.replace(b, index=0), dataclasses.replace(a, index=1))
    assert dataset_sha256(swapped) != base
    changed = dataclasses.replace(b, ground_truth_response='say "hi" ')
    assert dataset_sha256((a, changed)) != base
    shifted = (dataclasses.replace(a, index=5), dataclasses.replace(b, index=6))
    assert dataset_sha256(shifted) == base


def test_metadata_is_deeply_read_only_and_equal_by_value() -> None:
    row = tiny_rows()[1]
    with pytest.raises(TypeError):
        row.metadata["level"] = 4  # type: ignore[index]
    with pytest.raises(TypeError):
        row.metadata["a"]["x"] = False
    assert row.metadata["choices"] == ("A", "B")
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.instruction = "other"  # type: ignore[misc]
    assert row == tiny_rows()[1]
    source = {"choices": ["A"]}
    frozen = Row(index=0, row_id="1", instruction="i", ground_truth_response="g", metadata=source)
    source["choices"].append("B")
    assert frozen.metadata["choices"] == ("A",)


@pytest.mark.parametrize(
    "metadata",
    [{"bad": {1, 2}}, {"bad": math.nan}, {1: "x"}, {"bad": b"bytes"}],
    ids=["set", "nan", "int-key", "bytes"],
)
def test_metadata_must_be_json(metadata: dict[object, object]) -> None:
    with pytest.raises(TypeError):
        Row(index=0, row_id="1", instruction="i", ground_truth_response="g", metadata=metadata)  # type: ignore[arg-type]


def test_row_fields_are_type_checked() -> None:
    with pytest.raises(TypeError):
        Row(index=0, row_id=1, instruction="i", ground_truth_response="g")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Row(index=-1, row_id="1", instruction="i", ground_truth_response="g")


def test_dataset_requires_indexes_in_row_order() -> None:
    a, b = tiny_rows()
    prompts = Prompts(generation="g", judge=None)
    ds = Dataset("x", "custom", False, (a, b), prompts, dataset_sha256((a, b)), "x.jsonl")
    assert len(ds) == 2
    with pytest.raises(ValueError, match="index"):
        Dataset("x", "custom", False, (b, a), prompts, "0" * 64, "x.jsonl")
