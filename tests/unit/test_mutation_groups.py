"""scripts/mutation.py names code that exists: a refactor that moves a function breaks this."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "kyai"


def _mutation() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kyai_mutation", ROOT / "scripts" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GROUPS = _mutation().GROUPS


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_each_group_names_modules_tests_and_functions_that_exist(name: str) -> None:
    group = GROUPS[name]
    sources = {module: (PACKAGE / module).read_text(encoding="utf-8") for module in group.modules}
    functions = {
        node.name
        for source in sources.values()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert [f for f in group.functions if f not in functions] == []
    text = "".join(sources.values())
    assert [needle for needle in group.lines_with if needle not in text] == []
    for test in group.tests:
        assert (ROOT / test.split("::")[0]).exists(), test
