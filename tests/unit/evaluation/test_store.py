"""The run directory's JSONL logs: damaged tails, read-only reading, no glued records, row order."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from kyai.evaluation import RunDirectoryError
from kyai.evaluation import _store as store
from kyai.evaluation._store import JsonlLog, dumps, latest_by_row

GOOD = [{"row_index": 0, "content": "Zürich"}, {"row_index": 1, "content": "日本"}]


def good_bytes() -> bytes:
    return "".join(dumps(record) + "\n" for record in GOOD).encode("utf-8")


def damaged_tails() -> dict[str, bytes]:
    third = (dumps({"row_index": 2, "content": "東京タワー"}) + "\n").encode("utf-8")
    cut_in_char = third[: third.index("東".encode()) + 1]  # inside a 3-byte character
    return {
        "cut multi-byte character": cut_in_char,
        "complete record without newline": third[:-1],
        "cut JSON": third[:20],
        "cut JSON with a newline": third[:20] + b"\n",
    }


@pytest.mark.parametrize("name", list(damaged_tails()))
def test_writer_drops_a_damaged_tail_and_appends_cleanly(tmp_path: Path, name: str) -> None:
    path = tmp_path / "generations.jsonl"
    path.write_bytes(good_bytes() + damaged_tails()[name])
    log = JsonlLog(path)
    assert log.read() == GOOD  # the damaged row is left to be redone
    log.append({"row_index": 2, "content": "redone"})
    log.close()
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert records == [*GOOD, {"row_index": 2, "content": "redone"}]


@pytest.mark.parametrize("name", list(damaged_tails()))
def test_reader_ignores_a_damaged_tail_without_touching_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / "generations.jsonl"
    path.write_bytes(good_bytes() + damaged_tails()[name])
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    assert JsonlLog(path, repair=False).read() == GOOD
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_an_append_never_glues_onto_a_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "judgements.jsonl"
    path.write_bytes(good_bytes()[:-1])  # the last record lost its newline
    log = JsonlLog(path)
    log.append({"row_index": 5})  # appended without reading first
    log.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [*GOOD, {"row_index": 5}]


def test_damage_before_the_last_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "generations.jsonl"
    path.write_bytes(b'{"row_index": 0}\n{"row_ind\n{"row_index": 2}\n')
    with pytest.raises(RunDirectoryError, match="line 2"):
        JsonlLog(path).read()


def test_rewrite_puts_the_latest_record_of_each_row_in_row_order(tmp_path: Path) -> None:
    path = tmp_path / "generations.jsonl"
    log = JsonlLog(path)
    for record in [{"row_index": 2, "v": 1}, {"row_index": 0, "v": 1}, {"row_index": 2, "v": 2}]:
        log.append(record)
    log.rewrite(latest_by_row(log.read()))
    assert path.read_text(encoding="utf-8") == (
        dumps({"row_index": 0, "v": 1}) + "\n" + dumps({"row_index": 2, "v": 2}) + "\n"
    )
    assert not list(tmp_path.glob(".generations.jsonl.*"))  # no temporary file left


# -- sound generation records ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"content": "Paris", "finish_reason": "stop", "streamed": True, "error": None}, None),
        ({"content": "", "finish_reason": "stop", "streamed": True, "error": None}, None),
        ({"content": None, "reasoning_content": "hmm", "finish_reason": "length"}, None),
        ({"content": None, "reasoning": "hmm", "finish_reason": "length"}, None),
        ({"content": "Paris", "finish_reason": None, "streamed": False, "error": None}, None),
        ({"content": None, "error": {"kind": "candidate_timeout", "message": "m"}}, None),
        ({"content": None, "finish_reason": None, "error": None}, "neither an answer"),
        ({"row_index": 3}, "neither an answer"),
        ({"content": "Par", "finish_reason": None, "streamed": True, "error": None}, "no finish"),
    ],
)
def test_a_generation_record_is_sound_with_an_answer_or_an_error(
    record: dict[str, Any], problem: str | None
) -> None:
    found = store.answer_problem(record)
    if problem is None:
        assert found is None
        store.check_generation(record)
        assert store.read_as_error(dict(record)) == record
        return
    assert found is not None and problem in found
    with pytest.raises(store.UnsoundRecordError, match="Refusing to store the answer of row"):
        store.check_generation(record)
    read = store.read_as_error(dict(record))
    assert read["error"]["kind"] == store.NO_ANSWER
    assert "Run `kyai generate` on this directory again" in read["error"]["message"]
