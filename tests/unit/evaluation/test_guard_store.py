"""Guards of the run directory's files (issue 14, survivors of ``make mutation``, group
evaluation-store): what a bad JSON document is called, how documents are written, blank lines
and damaged tails of a JSONL log with the warnings they give, and a rewrite after a record
changed."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pytest

from kyai.evaluation import RunDirectoryError
from kyai.evaluation._store import JsonlLog, dumps, read_json, write_json


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "{path} does not exist."),
        (b"\xff\xfe{}", "{path} is not UTF-8 text (invalid start byte)."),
        (b'{"a": 1,\n', "{path} is not valid JSON (line 2)."),
        (b"[1, 2]", "{path} does not hold a JSON object."),
    ],
)
def test_a_bad_json_document_is_named(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "run.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(RunDirectoryError) as info:
        read_json(path)
    assert str(info.value) == message.format(path=path)


def test_a_document_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.mkdir()  # a directory where the document should be
    with pytest.raises(RunDirectoryError) as info:
        read_json(path)
    assert str(info.value) == f"{path} cannot be read: Is a directory."


def test_documents_are_indented_sorted_and_keep_their_characters(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "summary.json"
    write_json(path, {"b": 1, "a": "Zürich"})
    assert path.read_bytes() == '{\n  "a": "Zürich",\n  "b": 1\n}\n'.encode()
    assert read_json(path) == {"a": "Zürich", "b": 1}
    assert [p.name for p in path.parent.iterdir()] == ["summary.json"]  # no temporary left


def test_blank_lines_are_skipped_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "generations.jsonl"
    data = (dumps({"row_index": 0}) + "\n\n  \n" + dumps({"row_index": 1}) + "\n\n").encode()
    path.write_bytes(data)
    assert JsonlLog(path).read() == [{"row_index": 0}, {"row_index": 1}]
    assert path.read_bytes() == data


def test_a_record_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    path = tmp_path / "generations.jsonl"
    path.write_bytes(b'{"row_index": 0}\n[1]\n')
    with pytest.raises(RunDirectoryError) as info:
        JsonlLog(path).read()
    assert str(info.value) == f"{path} line 2 is not a JSON object."


def test_a_damaged_tail_is_cut_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "generations.jsonl"
    good = (dumps({"row_index": 0}) + "\n").encode()
    path.write_bytes(good + b'{"row_ind')
    with caplog.at_level(logging.WARNING):
        assert JsonlLog(path).read() == [{"row_index": 0}]
    assert path.read_bytes() == good
    assert caplog.messages == [
        f"{path} ended in an incomplete record (9 bytes); it is dropped and will be redone."
    ]


def test_a_damaged_tail_of_another_phase_is_left_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "generations.jsonl"
    data = (dumps({"row_index": 0}) + "\n").encode() + b'{"row_ind'
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING):
        assert JsonlLog(path, repair=False).read() == [{"row_index": 0}]
    assert path.read_bytes() == data
    assert caplog.messages == [
        f"{path} ends in an incomplete record (9 bytes); it is ignored (the file is left as it is)."
    ]


def test_a_whole_log_without_damage_gives_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "generations.jsonl"
    path.write_bytes((dumps({"row_index": 0}) + "\n").encode())
    with caplog.at_level(logging.WARNING):
        assert JsonlLog(path).read() == [{"row_index": 0}]
    assert caplog.messages == []


def test_a_rewrite_writes_the_records_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "judgements.jsonl"
    log = JsonlLog(path)
    first = {"row_index": 0, "score": 0.0}
    second = {"row_index": 1, "score": 1.0}
    log.append(first)
    log.append(second)
    newer = {"row_index": 0, "score": 1.0}  # a record replaced after it was appended
    log.rewrite({1: second, 0: newer})
    assert path.read_bytes() == (dumps(newer) + "\n" + dumps(second) + "\n").encode()


def test_an_empty_log_and_a_log_holding_only_a_cut_record(tmp_path: Path) -> None:
    path = tmp_path / "generations.jsonl"
    path.write_bytes(b"")
    assert JsonlLog(path).read() == []
    path.write_bytes(b'{"row_ind')
    assert JsonlLog(path).read() == []
    assert path.read_bytes() == b""  # the cut record is dropped whole


def test_an_append_never_glues_onto_a_one_byte_damaged_line(tmp_path: Path) -> None:
    path = tmp_path / "generations.jsonl"
    path.write_bytes(b"{")
    log = JsonlLog(path, repair=False)
    log.append({"row_index": 0})
    log.close()
    assert path.read_bytes() == b"{\n" + (dumps({"row_index": 0}) + "\n").encode()


def test_documents_are_written_beside_their_place_not_in_the_temp_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rename across file systems fails: the temporary file must live in the target's
    # directory (here the system's temporary directory does not even exist).
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-directory"))
    path = tmp_path / "run" / "summary.json"
    write_json(path, {"a": 1})
    assert read_json(path) == {"a": 1}


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.mkdir()
    (path / "keep").write_text("x")  # a non-empty directory cannot be replaced
    with pytest.raises(OSError):
        write_json(path, {"a": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
