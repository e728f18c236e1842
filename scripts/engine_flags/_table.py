"""The flag-table format every extractor writes (stdlib only: it runs inside engine venvs).

A table is one JSON document per engine and version,
``operator/kyai/engines/flags/<engine>/<version>.json``::

    {
      "engine": "vllm",
      "version": "0.32.0",
      "source": "where the options were read: the wheel, the parser, the commit",
      "generator": "scripts/engine_flags (make engine-flags)",
      "options": [ {entry}, ... ]
    }

An entry describes one option as the engine's own parser declares it:

``option``
    The primary spelling (the first long option string, as the engine writes it).
``aliases``
    Every other spelling the parser accepts for it (``-tp``, ``--tp_size``), possibly empty.
``kind``
    ``boolean``: a switch taking no value. ``negative`` names the spelling that turns it off
    (vLLM's ``--no-X`` of ``argparse.BooleanOptionalAction``, or ``--disable-X`` of its
    ``EnableDisableAction``; click's ``--x/--no-x``), or is null when the engine has none;
    ``negative_aliases`` other spellings that turn it off; ``set`` is the value the switch
    gives its setting when passed (true for ``store_true``, false for ``store_false``).
    ``value``: exactly one value. ``choice``: one value out of ``choices``.
    ``list``: one or more values (``nargs="+"``), ``any``: zero or more (``nargs="*"``),
    ``optional``: zero or one (``nargs="?"``), ``append``: one value, the option repeatable;
    each of them with ``choices`` when the parser restricts the values.
    ``deprecated``: the option exists only to refuse itself; ``message`` says why.
``default``
    The setting's default as the parser declares it (JSON; null when the parser has none,
    when the engine computes it at start, or when it is an object JSON cannot hold).
``type``
    What a value is converted with: ``int``, ``float``, ``str``, ``json`` (parsed as JSON),
    ``bool``, or the converter's own name.
``required``
    Present and true when the parser requires the option.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

#: Where the tables live: the product reads them (kyai.engines), the stand-ins too.
TABLES = Path(__file__).resolve().parents[2] / "operator" / "kyai" / "engines" / "flags"

KINDS = ("boolean", "value", "choice", "list", "any", "optional", "append", "deprecated")


def json_default(value: Any) -> Any:
    """A parser's default as JSON: plain values as they are, anything else as its repr."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        items = [json_default(item) for item in value]
        return items
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: json_default(item) for key, item in value.items()}
    name = getattr(value, "name", None)  # an enum member: its value
    enum_value = getattr(value, "value", None)
    if name is not None and isinstance(enum_value, str | int | float | bool):
        return enum_value
    return None


def entry(
    option: str,
    kind: str,
    *,
    aliases: list[str] | None = None,
    negative: str | None = None,
    negative_aliases: list[str] | None = None,
    set_value: bool | None = None,
    default: Any = None,
    type_name: str | None = None,
    choices: list[Any] | None = None,
    required: bool = False,
    message: str | None = None,
) -> dict[str, Any]:
    """One table entry (see the module docstring), with only the fields that apply."""
    if kind not in KINDS:
        raise ValueError(f"{option}: unknown kind {kind!r}")
    item: dict[str, Any] = {"option": option, "aliases": list(aliases or []), "kind": kind}
    if kind == "boolean":
        item["negative"] = negative
        if negative_aliases:
            item["negative_aliases"] = list(negative_aliases)
        item["set"] = True if set_value is None else set_value
    item["default"] = json_default(default)
    if type_name is not None and kind not in ("boolean", "deprecated"):
        item["type"] = type_name
    if choices is not None:
        item["choices"] = [json_default(choice) for choice in choices]
    if required:
        item["required"] = True
    if message:
        item["message"] = message
    return item


def write_table(engine: str, version: str, source: str, options: list[dict[str, Any]]) -> Path:
    """Write ``<engine>/<version>.json`` (options in parser order, each option once)."""
    seen: set[str] = set()
    unique = []
    for item in options:
        if item["option"] in seen:
            continue
        seen.add(item["option"])
        unique.append(item)
    document = {
        "engine": engine,
        "version": version,
        "source": source,
        "generator": "scripts/engine_flags (make engine-flags)",
        "options": unique,
    }
    path = TABLES / engine / f"{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{engine} {version}: {len(unique)} options -> {path.relative_to(TABLES.parents[3])}")
    return path
