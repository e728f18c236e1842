"""Declared layers beyond import-linter's contracts: private modules stay in their package.

``lint-imports`` (run by ``make test``) checks the layer order and that no product module
imports kyai_devcluster or kyai_testing. A private module (``kyai.<package>._x``) may only be
imported from inside ``kyai.<package>``; other packages use the package's public names.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "kyai"


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append((node.lineno, node.module))
            names += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return names


def private_module(target: str) -> tuple[str, str] | None:
    """(owner package, private module): ``kyai.graders._types.Grade`` gives
    (``kyai.graders``, ``kyai.graders._types``); None for a public path."""
    parts = target.split(".")
    if parts[0] != "kyai":
        return None
    for index, part in enumerate(parts[2:], start=2):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index]), ".".join(parts[: index + 1])
    return None


def violations(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        source = module_name(path, package)
        for line, target in imported(ast.parse(path.read_text(encoding="utf-8"))):
            private = private_module(target)
            if private is None:
                continue
            owner, module = private
            if source != owner and not source.startswith(owner + "."):
                found.append(f"{path.name}:{line}: {source} imports {module}")
    return sorted(set(found))


def test_private_modules_stay_in_their_package() -> None:
    assert violations() == []


def test_the_scan_sees_a_private_import(tmp_path: Path) -> None:
    package = tmp_path / "kyai"
    (package / "controllers").mkdir(parents=True)
    (package / "controllers" / "x.py").write_text("from kyai.evaluation._budget import find_card\n")
    (package / "evaluation").mkdir()
    (package / "evaluation" / "y.py").write_text("from kyai.evaluation._budget import find_card\n")
    found = violations(package)
    assert len(found) == 1 and "kyai.controllers.x imports kyai.evaluation._budget" in found[0]


@pytest.mark.slow
def test_lint_imports_fails_when_a_controller_imports_the_dev_cluster(tmp_path: Path) -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    shutil.copytree(PACKAGE, tmp_path / "kyai", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    kept = subprocess.run(
        [str(lint), "--no-cache"], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert kept.returncode == 0, kept.stdout + kept.stderr
    with (tmp_path / "kyai" / "controllers" / "workload.py").open("a") as handle:
        handle.write("\nimport kyai_devcluster\n")
    broken = subprocess.run(
        [str(lint), "--no-cache"], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert broken.returncode == 1
    assert "kyai.controllers.workload -> kyai_devcluster" in broken.stdout
