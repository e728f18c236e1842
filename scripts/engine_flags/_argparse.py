"""Table entries from a live ``argparse`` parser (vLLM's and SGLang's are argparse)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from _table import entry

#: Converters that parse their value as JSON (vLLM's config flags, SGLang's JSON strings).
JSON_CONVERTERS = frozenset(
    {"loads", "parse_dataclass", "union_dict_and_str", "_parse_type", "json_loads"}
)


def type_name(action: argparse.Action) -> str | None:
    """What the action converts its value with (see _table's ``type``)."""
    converter = action.type
    if converter is None:
        return "str"
    if converter in (int, float, str, bool):
        return converter.__name__
    name = getattr(converter, "__name__", type(converter).__name__)
    if name in JSON_CONVERTERS or converter is json.loads:
        return "json"
    # vLLM's optional_type(int) wraps int: its closure names the inner type.
    closure = getattr(converter, "__closure__", None) or ()
    for cell in closure:
        inner = cell.cell_contents
        if inner in (int, float, str):
            return inner.__name__
        inner_name = getattr(inner, "__name__", "")
        if inner_name in JSON_CONVERTERS or inner is json.loads:
            return "json"
    return name


def _split(options: list[str]) -> tuple[str, list[str]]:
    longs = [option for option in options if option.startswith("--")]
    primary = longs[0] if longs else options[0]
    return primary, [option for option in options if option != primary]


def action_entry(action: argparse.Action, refusing: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The table entry of one argparse action.

    ``refusing`` names action classes that refuse their option when used (SGLang's
    ``DeprecatedAction`` raises); an action that only warns (vLLM's deprecated ones) is read
    as what it stores.
    """
    options = list(action.option_strings)
    choices = None if action.choices is None else list(action.choices)
    name = type(action).__name__
    if isinstance(action, argparse.BooleanOptionalAction):
        # vLLM 0.34's EnableDisableAction pairs --enable-x with --disable-x and keeps the
        # --no-enable-x / --no-disable-x spellings registered but out of option_strings.
        declared = getattr(action, "negative_option_strings", None)
        if declared is not None:
            negatives = sorted(declared, key=lambda o: (o not in options, o.startswith("--no-")))
        else:
            negatives = [option for option in options if option.startswith("--no-")]
        positives = [option for option in options if option not in negatives]
        primary, aliases = _split(positives)
        return entry(
            primary,
            "boolean",
            aliases=aliases,
            negative=negatives[0] if negatives else None,
            negative_aliases=negatives[1:],
            set_value=True,
            default=action.default,
        )
    primary, aliases = _split(options)
    if name in refusing:
        return entry(primary, "deprecated", aliases=aliases, message=action.help)
    if isinstance(action, argparse._StoreConstAction) and action.nargs == 0:
        const = action.const
        if isinstance(const, bool):  # store_true / store_false
            return entry(primary, "boolean", aliases=aliases, negative=None, set_value=const,
                         default=action.default)  # fmt: skip
        return entry(primary, "boolean", aliases=aliases, negative=None, set_value=True,
                     default=action.default)  # fmt: skip
    if isinstance(action, argparse._CountAction | argparse._AppendConstAction):
        return entry(primary, "boolean", aliases=aliases, negative=None, default=action.default)
    if action.nargs == 0:  # a custom switch action
        return entry(primary, "boolean", aliases=aliases, negative=None, default=action.default)
    if isinstance(action, argparse._AppendAction):
        kind = "append"
    elif action.nargs == "+":
        kind = "list"
    elif action.nargs == "*":
        kind = "any"
    elif action.nargs == "?":
        kind = "optional"
    elif isinstance(action.nargs, int) and action.nargs > 1:
        kind = "list"
    else:
        kind = "choice" if choices is not None else "value"
    default = None if action.default is argparse.SUPPRESS else action.default
    return entry(
        primary,
        kind,
        aliases=aliases,
        default=default,
        type_name=type_name(action),
        choices=choices,
        required=bool(action.required),
    )


def parser_entries(
    parser: argparse.ArgumentParser, refusing: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """Every optional of ``parser`` (positionals and --help left out), in parser order."""
    entries = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._VersionAction):
            continue
        entries.append(action_entry(action, refusing))
    return entries
