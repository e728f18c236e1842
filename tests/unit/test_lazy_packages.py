"""Packages whose names load on first use (kyai._lazy): importing one loads no submodule, and
its table, ``__all__`` and ``TYPE_CHECKING`` imports name the same things."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

LAZY = [
    "kyai.evaluation",
    "kyai.lmeval",
    "kyai.datasets",
    "kyai.gateway",
    "kyai_devcluster",
    "kyai_testing",
]


def source_of(package: str) -> ast.Module:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8"))


def type_checking_names(tree: ast.Module, package: str) -> dict[str, set[str]]:
    """``{submodule (relative): names}`` imported under ``if TYPE_CHECKING:``."""
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.body:
                assert isinstance(child, ast.ImportFrom)
                module = "." * child.level + (child.module or "")
                module = module.removeprefix(package)
                found.setdefault(module, set()).update(alias.name for alias in child.names)
    return found


def table_names(tree: ast.Module) -> dict[str, set[str]]:
    """The ``lazy_exports(__name__, {...})`` table."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            table = node.value.args[1]
            assert isinstance(table, ast.Dict)
            return {
                ast.literal_eval(key): set(ast.literal_eval(value))
                for key, value in zip(table.keys, table.values, strict=True)
                if key is not None
            }
    raise AssertionError("no lazy_exports table")


@pytest.mark.parametrize("package", LAZY)
def test_table_all_and_type_checking_imports_agree(package: str) -> None:
    tree = source_of(package)
    table = table_names(tree)
    assert table == type_checking_names(tree, package)
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(set().union(*table.values()))
    for submodule, names in table.items():
        owner = importlib.import_module(submodule, package)
        for name in names:
            assert getattr(module, name) is getattr(owner, name), f"{package}.{name}"
    assert set(module.__all__) <= set(dir(module))


def test_importing_the_packages_loads_none_of_their_submodules() -> None:
    script = (
        "import importlib, json, sys\n"
        f"for name in {LAZY!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    modules = set(json.loads(done.stdout))
    loaded = sorted(m for m in modules for p in LAZY if m.startswith(p + "."))
    assert loaded == []
    assert "aiohttp" not in modules and "httpx" not in modules


def test_an_unknown_name_is_an_attribute_error() -> None:
    import kyai.evaluation

    with pytest.raises(AttributeError, match=r"'kyai\.evaluation' has no attribute 'nothing'"):
        _ = kyai.evaluation.nothing  # type: ignore[attr-defined]
