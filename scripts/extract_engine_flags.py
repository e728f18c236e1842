r"""Regenerate the engine stand-ins' flag tables from the engines' own argument parsers.

The stand-ins in :mod:`kyai_testing.engines` parse an engine container's command line with the
flag set of the real engine. This script reads that flag set statically (with :mod:`ast`, no
engine import: they need GPUs and torch) from the engines' sources and writes one JSON table
per engine next to the stand-ins::

    pip download --no-deps -d /tmp/src vllm==0.11.0 sglang==0.5.3
    (unzip both wheels into /tmp/src/vllm and /tmp/src/sglang)
    python scripts/extract_engine_flags.py vllm /tmp/src/vllm 0.11.0 "where it came from"
    python scripts/extract_engine_flags.py sglang /tmp/src/sglang 0.5.3 "where it came from"

``vllm``
    ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``, ``AsyncEngineArgs.add_cli_args``)
    and ``vllm/entrypoints/openai/cli_args.py`` (``make_arg_parser``, every ``FrontendArgs``
    field). Flags passed ``**get_kwargs(Config)["field"]`` take their kind from the field's
    annotation the way ``vllm.engine.arg_utils._compute_kwargs`` does: ``bool`` gives
    ``--x/--no-x`` (``BooleanOptionalAction``), ``list``/``tuple`` give ``nargs="+"``.
``sglang``
    ``python/sglang/srt/server_args.py`` (``ServerArgs.add_cli_args``).
``trtllm``
    Not extracted: TensorRT-LLM's wheels come only from NVIDIA's index, so ``flags/trtllm.json``
    was transcribed from the click options of ``tensorrt_llm/commands/serve.py``'s ``serve``
    command (``"kind": "flag"`` for ``is_flag``, ``"append"`` for ``multiple``).

Each table entry is ``{"options": [...], "kind": ...}`` with kind one of ``flag`` (no value),
``bool`` (``--x`` / ``--no-x``), ``value``, ``list`` (one or more values), ``optional`` (zero
or one), ``any`` (zero or more), ``append`` (one value, repeatable), ``deprecated`` (no value;
using it is an error whose text is ``message``).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tools/testing/src/kyai_testing/engines/flags"


def _const_kw(call: ast.Call, name: str) -> Any:
    for keyword in call.keywords:
        if keyword.arg == name:
            if isinstance(keyword.value, ast.Constant):
                return keyword.value.value
            return ast.unparse(keyword.value)
    return None


def _options(call: ast.Call) -> list[str]:
    return [
        arg.value
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value[:1] == "-"
    ]


def _argparse_kind(call: ast.Call, field_kind: str | None = None) -> str:
    action = _const_kw(call, "action")
    nargs = _const_kw(call, "nargs")
    if action in ("store_true", "store_false", "store_const", "count"):
        return "flag"
    if action is not None and "BooleanOptionalAction" in str(action):
        return "bool"
    if action == "append":
        return "append"
    if action == "DeprecatedAction":
        return "deprecated"
    if nargs == "+":
        return "list"
    if nargs == "?":
        return "optional"
    if nargs == "*":
        return "any"
    if nargs == 0:
        return "flag"
    return field_kind or "value"


def _annotation_kind(annotation: str) -> str:
    if "bool" in annotation.replace("Boolean", ""):
        return "bool"
    head = annotation.split("[", 1)[0]
    if (
        head in ("list", "List", "tuple", "Tuple")
        or annotation.startswith(
            ("Optional[list", "Optional[List", "Optional[tuple", "Union[list", "list[")
        )
        or " list[" in annotation
        or "| list[" in annotation
    ):
        return "list"
    return "value"


def _class_fields(root: Path) -> dict[str, dict[str, str]]:
    """Every dataclass-like class of the vLLM config modules: field -> annotation."""
    classes: dict[str, dict[str, str]] = {}
    files = [*root.glob("vllm/config/*.py"), root / "vllm/entrypoints/openai/cli_args.py"]
    files += [root / "vllm/config.py"] if (root / "vllm/config.py").exists() else []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                table = classes.setdefault(node.name, {})
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        annotation = ast.unparse(item.annotation)
                        if not annotation.startswith("ClassVar"):
                            table[item.target.id] = annotation
    return classes


def _function(tree: ast.AST, name: str, cls: str | None = None) -> list[ast.FunctionDef]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (cls is None or node.name == cls):
            found += [
                item
                for item in node.body
                if isinstance(item, ast.FunctionDef) and item.name == name
            ]
        elif cls is None and isinstance(node, ast.FunctionDef) and node.name == name:
            found.append(node)
    return found


def _entries_of_calls(
    functions: list[ast.FunctionDef], classes: dict[str, dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for function in functions:
        kwarg_classes: dict[str, str] = {}
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "get_kwargs"
                and isinstance(node.targets[0], ast.Name)
            ):
                kwarg_classes[node.targets[0].id] = ast.unparse(node.value.args[0])
        for node in ast.walk(function):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                continue
            options = _options(node)
            if not options:
                continue
            field_kind = None
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg is None and isinstance(value, ast.Subscript):
                    table = ast.unparse(value.value)
                    field = value.slice.value if isinstance(value.slice, ast.Constant) else None
                    owner = kwarg_classes.get(table)
                    if classes is not None and owner and field in classes.get(owner, {}):
                        field_kind = _annotation_kind(classes[owner][field])
            entry: dict[str, Any] = {"options": options, "kind": _argparse_kind(node, field_kind)}
            if entry["kind"] == "deprecated":
                entry["message"] = _const_kw(node, "help")
            if _const_kw(node, "required") is True:
                entry["required"] = True
            entries.append(entry)
    return entries


def vllm(root: Path) -> list[dict[str, Any]]:
    """The flags of ``vllm serve``."""
    classes = _class_fields(root)
    arg_utils = ast.parse((root / "vllm/engine/arg_utils.py").read_text(encoding="utf-8"))
    cli_args = ast.parse((root / "vllm/entrypoints/openai/cli_args.py").read_text(encoding="utf-8"))
    entries = _entries_of_calls(_function(cli_args, "make_arg_parser"), classes)
    # FrontendArgs.add_cli_args adds one flag per field (f"--{key.replace('_', '-')}").
    special = {
        "allowed_origins": "value",
        "allowed_methods": "value",
        "allowed_headers": "value",
        "middleware": "append",
    }
    for field, annotation in classes["FrontendArgs"].items():
        kind = special.get(field, _annotation_kind(annotation))
        entries.append({"options": [f"--{field.replace('_', '-')}"], "kind": kind})
    entries += _entries_of_calls(_function(arg_utils, "add_cli_args", "EngineArgs"), classes)
    entries += _entries_of_calls(_function(arg_utils, "add_cli_args", "AsyncEngineArgs"), classes)
    return entries


def sglang(root: Path) -> list[dict[str, Any]]:
    """The flags of ``python -m sglang.launch_server``."""
    path = root / "sglang/srt/server_args.py"
    if not path.exists():
        path = root / "python/sglang/srt/server_args.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return _entries_of_calls(_function(tree, "add_cli_args", "ServerArgs"))


def main(argv: list[str]) -> int:
    """``ENGINE ROOT VERSION [SOURCE]``: write ``flags/ENGINE.json``."""
    engine, root, version = argv[0], Path(argv[1]), argv[2]
    extract = {"vllm": vllm, "sglang": sglang}[engine]
    entries = extract(root)
    seen: set[str] = set()
    unique = []
    for entry in entries:
        key = entry["options"][0]
        if key not in seen:
            seen.add(key)
            unique.append(entry)
    OUT.mkdir(parents=True, exist_ok=True)
    source = argv[3] if len(argv) > 3 else str(root)
    document = {"engine": engine, "version": version, "source": source, "flags": unique}
    (OUT / f"{engine}.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"{engine} {version}: {len(unique)} flags")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
