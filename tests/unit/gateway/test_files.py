"""Files that change under the gateway: re-read when the kubelet swaps them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kyai.gateway import FileUnreadableError, WatchedFile


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def secret_volume(root: Path, version: str, value: str) -> None:
    """Write ``value`` as the kubelet updates a Secret volume: a new dated dir, a symlink swap."""
    dated = root / f"..{version}"
    dated.mkdir()
    (dated / "api-key").write_text(value)
    link = root / "..data_tmp"
    link.symlink_to(dated.name)
    os.replace(link, root / "..data")
    if not (root / "api-key").is_symlink():
        (root / "api-key").symlink_to("..data/api-key")


def test_a_rotated_secret_is_read_once_the_check_interval_passed(tmp_path: Path) -> None:
    secret_volume(tmp_path, "1", "first-key\n")
    clock = Clock()
    watched = WatchedFile(str(tmp_path / "api-key"), what="the key", clock=clock)
    assert watched.read() == "first-key"
    secret_volume(tmp_path, "2", "second-key")
    clock.now = 0.5
    assert watched.read() == "first-key"  # not looked at again within the second
    clock.now = 1.0
    assert watched.read() == "second-key"


def test_a_missing_or_empty_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "api-key"
    watched = WatchedFile(str(path), what="the judge's API key", check_seconds=0)
    with pytest.raises(FileUnreadableError) as error:
        watched.read()
    assert f"the judge's API key file {path} cannot be read" in str(error.value)
    path.write_text("  \n")
    with pytest.raises(FileUnreadableError, match="is empty"):
        watched.read()
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(FileUnreadableError, match="not UTF-8"):
        watched.read()
    path.write_text("k")
    assert watched.read() == "k"
    path.unlink()
    with pytest.raises(FileUnreadableError):
        watched.read()
