"""SGLang's ``python -m sglang.launch_server`` options, from ``ServerArgs.add_cli_args``.

Run with the Python of a virtual environment holding what ``sglang.srt.server_args`` imports
on the CPU -- torch's CPU build and plain packages, not sglang itself (its wheel pins a CUDA
torch) -- and name the wheel to read (``pip download --no-deps sglang==X``)::

    .venv-sglang/bin/python scripts/engine_flags sglang --wheel DIR/sglang-X-....whl

Without ``--wheel`` the sglang installed in that Python is read. The wheel is unpacked into a
temporary directory put first on ``sys.path``; the parser is then the engine's own
(``argparse.ArgumentParser()`` filled by ``ServerArgs.add_cli_args``), so kinds, negative
forms (SGLang's few ``BooleanOptionalAction`` switches), choices and defaults are SGLang's.
``SGLANG_*``/``SGL_*`` environment variables are dropped first: SGLang reads some while it
builds the parser, and the table is of the engine as shipped.

Whether a deprecated option refuses itself is asked of its action, not of its name: SGLang
0.5.3's ``DeprecatedAction`` raises whatever it is given, newer ones call ``parser.error``
only when registered with an ``error_message`` (else they warn and go on), and the
``DeprecatedStore*Action`` ones warn and store. Each ``Deprecated*`` action is called once
on a throw-away namespace: the ones that stop the launch are ``deprecated`` entries whose
``message`` is what the engine says, the others are read as what they store.

When ``sglang.srt.server_args`` does not import here (``--static`` forces this), the
options are read statically, with ``ast``, from the wheel's ``sglang/srt/server_args.py``:
the ``add_argument`` calls of ``ServerArgs.add_cli_args`` (the style of 0.5.3 and before;
0.5.23 declares its options as dataclass fields, ``add_cli_args_from_dataclass``, which is
refused statically: it needs the import). The table's ``source`` says which way it was read.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import logging
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from _argparse import JSON_CONVERTERS, action_entry
from _static import StaticModule, Unreadable
from _table import entry

#: Where the options are declared, for ``source``.
FUNCTION = "ServerArgs.add_cli_args (sglang.srt.server_args)"

#: SGLang's converters that parse their value as JSON (``json_list_type`` is orjson.loads,
#: ``parse_cuda_graph_config_arg`` json.loads and a check), besides the common ones.
JSON_PARSERS = JSON_CONVERTERS | {"json_list_type", "parse_cuda_graph_config_arg"}


class _Refused(Exception):
    """What the probe parser's ``error`` raises."""


def _probe_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="probe", add_help=False)

    def error(message: str) -> None:
        raise _Refused(message)

    parser.error = error  # type: ignore[method-assign]
    return parser


def refusal(action: argparse.Action) -> str | None:
    """What SGLang says when a ``Deprecated*`` action stops the launch, or None if it does not.

    The action is called once, as argparse would call it, on a throw-away namespace (its
    warning silenced): raising or ``parser.error`` is refusing.
    """
    if not type(action).__name__.startswith("Deprecated"):
        return None
    if action.nargs == 0:
        values: Any = []
    else:
        values = next(iter(action.choices)) if action.choices else "x"
        if action.nargs in ("+", "*") or isinstance(action.nargs, int):
            values = [values]
    logging.disable(logging.CRITICAL)
    try:
        action(_probe_parser(), argparse.Namespace(), values, action.option_strings[0])
    except (Exception, SystemExit) as refused:  # _Refused, or whatever the action raises
        return str(refused) or action.help or "refused"
    finally:
        logging.disable(logging.NOTSET)
    return None


def parser_options(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every optional of SGLang's parser (``--help`` left out), in parser order."""
    entries = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action.choices, set | frozenset):  # built as a set: a stable order
            action.choices = sorted(action.choices, key=str)
        message = refusal(action)
        if message is None:
            item = action_entry(action)
        else:
            item = action_entry(action, refusing=frozenset({type(action).__name__}))
            item["message"] = message
        if item.get("type") in JSON_PARSERS:
            item["type"] = "json"
        entries.append(item)
    return entries


# --- where the sources are ---------------------------------------------------------------


def wheel_version(wheel: Path) -> str:
    """The ``Version:`` of a wheel's ``*.dist-info/METADATA``."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".dist-info/METADATA") and name.count("/") == 1:
                for line in archive.read(name).decode("utf-8").splitlines():
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
    raise SystemExit(f"{wheel}: no dist-info METADATA with a Version")


def installed() -> tuple[str, Path]:
    """(version, site directory) of the sglang installed in this Python."""
    try:
        distribution = importlib.metadata.distribution("sglang")
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit("no sglang here: pass --wheel PATH, or install sglang") from None
    return distribution.version, Path(str(distribution.locate_file("")))


def live_entries(root: Path | None) -> list[dict[str, Any]]:
    """The entries of the parser ``ServerArgs.add_cli_args`` fills.

    sglang is imported from ``root`` (a directory holding the ``sglang`` package), or from
    where it is installed when ``root`` is None.
    """
    if root is not None:
        sys.path.insert(0, str(root))
    # SGLang reads SGLANG_* / SGL_* variables while it builds the parser (choices such as
    # --sampling-backend's token_oracle): the table is of an unconfigured engine.
    for name in [name for name in os.environ if name.startswith(("SGLANG_", "SGL_"))]:
        print(f"ignoring {name} (the table is of SGLang without it)", file=sys.stderr)
        del os.environ[name]
    from sglang.srt.server_args import ServerArgs

    module = sys.modules["sglang"]
    if root is not None and not str(module.__file__).startswith(str(root)):
        raise RuntimeError(f"sglang was imported from {module.__file__}, not from the wheel")
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser_options(parser)


# --- the static reading ------------------------------------------------------------------


class StaticReader(StaticModule):
    """``ServerArgs.add_cli_args``'s ``add_argument`` calls, read from the source text."""

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.fields: dict[str, ast.expr] = {}  # ServerArgs field -> its default expression
        self.classes: dict[str, ast.ClassDef] = {
            node.name: node for node in self.tree.body if isinstance(node, ast.ClassDef)
        }
        server_args = self.classes.get("ServerArgs")
        if server_args is None:
            raise SystemExit("no class ServerArgs in server_args.py")
        for item in server_args.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                if item.value is not None:
                    self.fields[item.target.id] = item.value
        functions = [
            item
            for item in server_args.body
            if isinstance(item, ast.FunctionDef) and item.name == "add_cli_args"
        ]
        if not functions:
            raise SystemExit("no ServerArgs.add_cli_args in server_args.py")
        self.function = functions[0]
        self.unread_choices: list[str] = []

    def resolve(self, node: ast.expr, depth: int) -> Any:
        """A ``ServerArgs`` default, or ``dataclasses.field(default=...)``."""
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "ServerArgs"
            and node.attr in self.fields
        ):
            return self.evaluate(self.fields[node.attr], depth + 1)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "field":  # dataclasses.field(default=...)
                for keyword in node.keywords:
                    if keyword.arg == "default":
                        return self.evaluate(keyword.value, depth + 1)
        raise Unreadable(ast.unparse(node))

    def refusing_classes(self) -> dict[str, bool]:
        """Action classes of the module that refuse: always (True), with ``error_message`` (False).

        The first raise in ``__call__``'s body; the second ``parser.error`` under a test of
        ``self.error_message`` (SGLang's later ``DeprecatedAction``).
        """
        found = {}
        for name, node in self.classes.items():
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__call__":
                    if any(isinstance(statement, ast.Raise) for statement in item.body):
                        found[name] = True
                    elif "error_message" in ast.unparse(item):
                        found[name] = False
        return found

    @staticmethod
    def type_name(node: ast.expr | None) -> str:
        if node is None:
            return "str"
        name = ast.unparse(node).rsplit(".", 1)[-1]
        if name in JSON_PARSERS:
            return "json"
        return name

    def entries(self) -> list[dict[str, Any]]:
        calls = [
            node
            for node in ast.walk(self.function)
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("add_argument")
        ]
        if "add_cli_args_from_dataclass" in ast.unparse(self.function):
            raise SystemExit(
                "this server_args.py declares its options as dataclass fields "
                "(add_cli_args_from_dataclass): read it live, with sglang importable"
            )
        calls.sort(key=lambda call: (call.lineno, call.col_offset))
        refusing = self.refusing_classes()
        return [self.call_entry(call, refusing) for call in calls if self.options(call)]

    @staticmethod
    def options(call: ast.Call) -> list[str]:
        return [
            arg.value
            for arg in call.args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value[:1] == "-"
        ]

    def call_entry(self, call: ast.Call, refusing: dict[str, bool]) -> dict[str, Any]:
        options = self.options(call)
        longs = [option for option in options if option.startswith("--")]
        primary = longs[0] if longs else options[0]
        aliases = [option for option in options if option != primary]
        keywords = {keyword.arg: keyword.value for keyword in call.keywords if keyword.arg}
        value = self.keywords(call)

        action = keywords.get("action")
        action_name = "" if action is None else ast.unparse(action).strip("'\"")
        action_name = action_name.rsplit(".", 1)[-1]
        nargs = value("nargs")
        if action_name in refusing and (refusing[action_name] or "error_message" in keywords):
            message = value("error_message") or value("help")
            return entry(primary, "deprecated", aliases=aliases, message=message)
        if action_name in ("store_true", "store_false"):
            set_value = action_name == "store_true"
            return entry(primary, "boolean", aliases=aliases, negative=None, set_value=set_value,
                         default=value("default", not set_value))  # fmt: skip
        if action_name == "BooleanOptionalAction":
            return entry(primary, "boolean", aliases=aliases, negative="--no-" + primary[2:],
                         set_value=True, default=value("default"))  # fmt: skip
        if action_name in ("store_const", "count") or nargs == 0:
            return entry(primary, "boolean", aliases=aliases, negative=None,
                         default=value("default"))  # fmt: skip
        choices = None
        if "choices" in keywords:
            try:
                choices = list(self.evaluate(keywords["choices"]))
            except Unreadable:
                self.unread_choices.append(primary)
            if isinstance(choices, list) and any(isinstance(choice, set) for choice in choices):
                choices = None
        if action_name == "append":
            kind = "append"
        elif nargs == "+" or (isinstance(nargs, int) and nargs > 1):
            kind = "list"
        elif nargs == "*":
            kind = "any"
        elif nargs == "?":
            kind = "optional"
        else:
            kind = "choice" if choices is not None else "value"
        if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
            if len(set(choices)) != len(choices):
                choices = list(dict.fromkeys(choices))
        return entry(
            primary,
            kind,
            aliases=aliases,
            default=value("default"),
            type_name=self.type_name(keywords.get("type")),
            choices=choices,
            required=value("required") is True,
        )


def static_entries(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(entries, options whose choices could not be read) of ``root``'s ``server_args.py``.

    The options whose choices are computed elsewhere are recorded as ``value``.
    """
    path = root / "sglang" / "srt" / "server_args.py"
    if not path.exists():
        path = root / "python" / "sglang" / "srt" / "server_args.py"
    reader = StaticReader(path.read_text(encoding="utf-8"))
    entries = reader.entries()
    return entries, reader.unread_choices


# --- the command -------------------------------------------------------------------------


def options(argv: list[str]) -> tuple[str, str, list[dict[str, Any]]]:
    """(version, source, entries) for ``sglang [--wheel PATH] [--static]``."""
    arguments = argparse.ArgumentParser(prog="engine_flags sglang")
    arguments.add_argument("--wheel", type=Path, help="an sglang wheel (pip download)")
    arguments.add_argument("--static", action="store_true", help="read the source, no import")
    given = arguments.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sglang-wheel-") as unpacked:
        if given.wheel is not None:
            version = wheel_version(given.wheel)
            with zipfile.ZipFile(given.wheel) as archive:
                archive.extractall(unpacked)
            root: Path | None = Path(unpacked)
            where = f"the {given.wheel.name} wheel (sglang {version}, PyPI)"
        else:
            version, site = installed()
            root = None
            where = f"the installed sglang {version} distribution"
        failure = "--static was given"
        if not given.static:
            try:
                entries = live_entries(root)
            except Exception as error:  # any import failure means: read statically
                failure = f"{type(error).__name__}: {error}"
                print(f"sglang did not import here ({failure}): reading it statically",
                      file=sys.stderr)  # fmt: skip
            else:
                source = (
                    f"{FUNCTION} of {where}: the parser it fills, built at run time "
                    "(imported on the CPU)"
                )
                return version, source, entries
        entries, unread = static_entries(root if root is not None else site)
        source = (
            f"{FUNCTION} of {where}: its add_argument calls read statically with ast from "
            f"sglang/srt/server_args.py, not imported ({failure})"
        )
        if unread:
            source += "; choices not readable statically, recorded as value: " + ", ".join(unread)
        return version, source, entries
