"""``lint-imports`` holds the layers inside controllers/: a kind never imports the engine.

Against a copy of the package: the contracts hold as committed, and break when a kind of run
imports the engine's private modules (the circle ``_lmeval.py`` had with ``evaluationrun``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "operator" / "kyai"


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    if not lint_imports.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    return subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=tree, env={"PYTHONPATH": str(tree)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "kyai", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.slow
def test_a_kind_importing_the_engine_breaks_the_contracts(tree: Path) -> None:
    kept = lint(tree)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "Controller layers KEPT" in kept.stdout
    kind = tree / "kyai" / "controllers" / "kinds" / "lmeval.py"
    kind.write_text(
        kind.read_text() + "\n\ndef _later() -> object:\n"
        "    from kyai.controllers._engine import SPEC_CHANGED\n\n    return SPEC_CHANGED\n"
    )
    broken = lint(tree)
    assert broken.returncode == 1
    assert "Controller layers BROKEN" in broken.stdout
    assert "never the engine itself BROKEN" in broken.stdout
    assert "kyai.controllers.kinds.lmeval -> kyai.controllers._engine" in broken.stdout


@pytest.mark.slow
def test_what_kinds_read_importing_a_kind_breaks_the_layers(tree: Path) -> None:
    shared = tree / "kyai" / "controllers" / "_references.py"
    shared.write_text(shared.read_text() + "\nfrom kyai.controllers.kinds import RUN_KINDS\n")
    broken = lint(tree)
    assert broken.returncode == 1
    assert "Controller layers BROKEN" in broken.stdout
