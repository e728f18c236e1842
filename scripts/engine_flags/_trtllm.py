"""TensorRT-LLM's ``trtllm-serve`` options, read statically from ``tensorrt_llm/commands/serve.py``.

TensorRT-LLM's wheels come only from NVIDIA's index and ``serve.py`` imports CUDA torch, so the
module is not imported: its text is parsed with ``ast`` and the ``@click.option`` decorators of
the ``serve`` command (``@click.command("serve")``) are read, top to bottom as click lists them::

    python scripts/engine_flags trtllm /tmp/serve.py 1.2.1 "NVIDIA/TensorRT-LLM@<commit> ..."

Each option becomes an entry the way click parses it:

``boolean``
    ``is_flag=True``, or a ``"--x/--no-x"`` pair (``negative`` is the secondary spelling). A
    plain flag sets ``flag_value``, which click defaults to ``not default``.
``append``
    ``multiple=True`` (one value, the option repeatable).
``choice``
    ``type=click.Choice([...])``; TensorRT-LLM's ``ChoiceWithAlias(choices, aliases)`` accepts the
    alias keys too, so they are listed after the choices.
``value``
    Anything else, with ``nargs=N`` (N > 1) as ``list``. A ``Choice`` whose values are computed
    (``click.Choice(Factory.parsers.keys())``) cannot be read statically: it is recorded as
    ``value`` and named in the notes that go into the table's ``source``.

``type`` is the click type (``int``, ``float``, ``str``, ``bool``; ``str`` for choices; the
type's own name otherwise, e.g. ``Path``), inferred from a literal default when absent, as click
does. ``default`` is the literal default (module constants are followed); a computed one
(``BuildConfig.model_fields[...].default``) is null.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from _static import StaticModule, Unreadable
from _table import entry

#: click's own type names -> the table's.
CLICK_TYPES = {
    "INT": "int",
    "FLOAT": "float",
    "STRING": "str",
    "BOOL": "bool",
    "UUID": "str",
    "IntRange": "int",
    "FloatRange": "float",
}


class ServeReader(StaticModule):
    """The ``serve`` command's options in one ``serve.py`` text."""

    def __init__(self, source: str, command: str = "serve") -> None:
        super().__init__(source)
        self.command = command
        self.notes: list[str] = []

    def function(self) -> ast.FunctionDef:
        """The function decorated ``@click.command("serve")`` (or named ``serve``)."""
        named = None
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and ast.unparse(decorator.func).endswith("command")
                    and decorator.args
                    and isinstance(decorator.args[0], ast.Constant)
                    and decorator.args[0].value == self.command
                ):
                    return node
            if node.name == self.command:
                named = node
        if named is None:
            raise SystemExit(f"no @click.command({self.command!r}) in this serve.py")
        return named

    def options(self) -> list[dict[str, Any]]:
        """Every ``@click.option`` of the command, in click's order (top to bottom)."""
        entries = []
        for decorator in self.function().decorator_list:
            if not isinstance(decorator, ast.Call):
                self.notes.append(f"decorator {ast.unparse(decorator)} not read")
                continue
            name = ast.unparse(decorator.func)
            if name.endswith(("command", "argument")):
                continue
            if not name.endswith("option"):
                self.notes.append(f"decorator {name}(...) not read")
                continue
            entries.append(self.option_entry(decorator))
        return entries

    def option_entry(self, call: ast.Call) -> dict[str, Any]:
        declarations = [
            arg.value
            for arg in call.args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
        ]
        positives: list[str] = []
        negatives: list[str] = []
        for declaration in declarations:
            if "/" in declaration:  # "--x/--no-x": a switch and its secondary spelling
                first, second = declaration.split("/", 1)
                positives.append(first.strip())
                negatives.append(second.strip())
            elif declaration.startswith("-"):
                positives.append(declaration)
            # else: the parameter's name, not a spelling
        longs = [option for option in positives if option.startswith("--")]
        primary = longs[0] if longs else positives[0]
        aliases = [option for option in positives if option != primary]
        keywords = {keyword.arg: keyword.value for keyword in call.keywords if keyword.arg}
        value = self.keywords(call)

        default = value("default")
        if negatives or value("is_flag") is True or value("count") is True:
            if negatives:
                set_value: Any = True
            elif "flag_value" in keywords:
                set_value = value("flag_value")
            else:  # click: a plain flag's flag_value is `not default`
                set_value = not default if isinstance(default, bool) else True
            if not isinstance(set_value, bool):
                set_value = True
            if default is None and not negatives and "default" not in keywords:
                default = False
            return entry(
                primary,
                "boolean",
                aliases=aliases,
                negative=negatives[0] if negatives else None,
                set_value=set_value,
                default=default,
            )
        choices, type_name = self.click_type(primary, keywords.get("type"), default)
        nargs = value("nargs", 1)
        if value("multiple") is True:
            kind = "append"
        elif isinstance(nargs, int) and nargs > 1:
            kind = "list"
        elif choices is not None:
            kind = "choice"
        else:
            kind = "value"
        return entry(
            primary,
            kind,
            aliases=aliases,
            default=default,
            type_name=type_name,
            choices=choices,
            required=value("required") is True,
        )

    def click_type(
        self, option: str, node: ast.expr | None, default: Any
    ) -> tuple[list[Any] | None, str]:
        """(choices or None, type name) of a ``type=`` expression."""
        if node is None:  # click infers the type from the default
            if isinstance(default, bool):
                return None, "bool"
            if isinstance(default, int | float):
                return None, type(default).__name__
            return None, "str"
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func).rsplit(".", 1)[-1]
            if name == "Choice" or name.startswith("Choice") or name.endswith("Choice"):
                try:
                    choices = list(self.evaluate(node.args[0]))
                    if len(node.args) > 1:  # ChoiceWithAlias(choices, aliases)
                        aliases = self.evaluate(node.args[1])
                        if isinstance(aliases, dict):
                            choices += [alias for alias in aliases if alias not in choices]
                except (Unreadable, IndexError, TypeError):
                    self.notes.append(
                        f"{option}: choices {ast.unparse(node)} not readable statically, "
                        "recorded as value"
                    )
                    return None, "str"
                return choices, "str"
            return None, CLICK_TYPES.get(name, name)
        name = ast.unparse(node).rsplit(".", 1)[-1]
        if name in ("int", "float", "str", "bool"):
            return None, name
        return None, CLICK_TYPES.get(name, name)


def options(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(entries, notes) of the ``serve`` command in the ``serve.py`` at ``path``."""
    reader = ServeReader(path.read_text(encoding="utf-8"))
    entries = reader.options()
    return entries, reader.notes
