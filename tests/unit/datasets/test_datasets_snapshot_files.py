import base64
from pathlib import Path

import pytest

from kyai.datasets import DatasetError, load_dataset, load_snapshot_dir, snapshot_files


def write(files_dir: Path, files) -> None:  # type: ignore[no-untyped-def]
    files_dir.mkdir()
    for name, text in files.text.items():
        (files_dir / name).write_text(text)
    for name, data in files.binary.items():
        (files_dir / name).write_bytes(data)


def dataset(tmp_path: Path, rows: int = 5):  # type: ignore[no-untyped-def]
    path = tmp_path / "d.jsonl"
    path.write_text(
        "".join(
            f'{{"instruction": "q{i} ' + "x" * 50 + f'", "ground_truth_response": "a{i}"}}\n'
            for i in range(rows)
        )
    )
    return load_dataset(str(path), generation_prompt="gen", judge_prompt="judge")


@pytest.mark.parametrize(("rows", "compressed"), [(5, False), (5000, True)])
def test_round_trip(tmp_path: Path, rows: int, compressed: bool) -> None:
    original = dataset(tmp_path, rows)
    files = snapshot_files(original, compress_over=64 * 1024)
    assert ("rows.jsonl.gz" in files.binary) is compressed
    write(tmp_path / "mounted", files)
    loaded = load_snapshot_dir(tmp_path / "mounted")
    assert loaded == original
    if compressed:
        raw = sum(len(r.instruction) for r in original.rows)
        assert files.size < raw  # gzip pays off on repetitive rows
        assert files.size >= len(base64.b64encode(files.binary["rows.jsonl.gz"]))


def test_tampered_rows_refused(tmp_path: Path) -> None:
    files = snapshot_files(dataset(tmp_path))
    write(tmp_path / "m", files)
    rows = (tmp_path / "m" / "rows.jsonl").read_text().replace("a1", "b1")
    (tmp_path / "m" / "rows.jsonl").write_text(rows)
    with pytest.raises(DatasetError, match="sha256"):
        load_snapshot_dir(tmp_path / "m")


def test_not_a_snapshot(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"snapshot\.json"):
        load_snapshot_dir(tmp_path)
    (tmp_path / "snapshot.json").write_text("{}")
    with pytest.raises(DatasetError, match=r"rows\.jsonl"):
        load_snapshot_dir(tmp_path)
    (tmp_path / "rows.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(DatasetError, match="gzip"):
        load_snapshot_dir(tmp_path)
