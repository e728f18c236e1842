"""No product function is longer than 80 lines (the tools beside the product are not held to it).

Long functions are split along their seams (issue 19). Counted from the ``def`` line (its
decorators excluded) to the function's last line, docstring included.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "kyai"

#: The longest a function may be.
MAX_LINES = 80

#: Tools beside the product: not held to the limit.
TOOLS = ("devcluster", "testing")

#: Modules not checked (none: the command lines were split apart from their phases).
PENDING: tuple[str, ...] = ()


def long_functions(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.split("/")[0] in TOOLS or relative in PENDING:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_LINES:
                    found.append(f"{relative}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_product_function_is_over_80_lines() -> None:
    assert long_functions() == []


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    (tmp_path / "module.py").write_text(f"def long():\n{body}\n\ndef short():\n    pass\n")
    (tmp_path / "devcluster").mkdir()
    (tmp_path / "devcluster" / "tool.py").write_text(f"def long():\n{body}")
    assert long_functions(tmp_path) == [f"module.py:1 long ({MAX_LINES + 1} lines)"]
