"""The docs site's reference pages, generated from the code at build time (an MkDocs hook).

``mkdocs.yml`` names this file under ``hooks:``; :func:`on_files` adds three pages that exist
only in the built site, never in Git, so they cannot go stale:

* ``reference/crds.md``: every field of the six kinds, from the CRDs that ``make crds``
  writes, generated from the pydantic models of ``operator/kyai/api`` (name, type, default,
  description);
* ``reference/cli.md``: every ``kyai`` command, subcommand and flag, from
  ``kyai.cli.build_parser()`` (argparse), with each command's exit statuses;
* ``reference/metrics.md``: every Prometheus family the operator and the judge gateway
  serve, from their registries (name, type, labels, help);
* ``reference/engine-flags.md``: every option of every engine version the operator checks
  EngineArgsSets against, from the flag tables of ``operator/kyai/engines/flags`` (kind,
  negative form, default, choices).

The operator's settings table is not generated here: it is committed in
``docs/reference/settings.md`` between markers, rewritten by ``make crds``
(``python -m kyai.settings``) and checked by ``tests/unit/test_settings_table.py``.

The functions are plain (``crd_page()``, ``cli_page()``, ``metrics_page()``,
``engine_flags_page()``), so the tests read the pages without running MkDocs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping
from typing import Any

#: Where the generated pages land in the site, and their titles.
PAGES: dict[str, str] = {
    "reference/crds.md": "Resources: every field",
    "reference/cli.md": "Command line: every command and flag",
    "reference/metrics.md": "Metrics: every series",
    "reference/engine-flags.md": "Engine flags: every option of every version",
}

_GENERATED = (
    "<!-- Generated at build time by scripts/docs_reference.py from {source}: do not edit "
    "(this page is not in Git). -->\n"
)


def _text(value: str) -> str:
    """Prose for a Markdown table cell: one line, ``|`` escaped, ``<`` outside code escaped."""
    parts = " ".join(value.split()).replace("``", "`").replace("|", "\\|").split("`")
    # Even parts are prose, odd ones code spans: HTML-looking text (<run>) must stay visible.
    return "`".join(
        part.replace("<", "&lt;").replace(">", "&gt;") if index % 2 == 0 else part
        for index, part in enumerate(parts)
    )


def _code(value: str) -> str:
    """``value`` as a code span inside a table cell."""
    escaped = value.replace("|", "\\|")
    return f"`{escaped}`" if "`" not in escaped else f"`` {escaped} ``"


_STRICT = {"≥": ">", "≤": "<"}


# -- resources: every field, from the CRDs generated from the models ---------------------------


def _type(node: Mapping[str, Any]) -> str:
    """A field's type as a reader says it: ``array of string``, ``map of integer``."""
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = node.get("type")
    if kind == "array":
        return f"array of {_type(node.get('items', {}))}"
    additional = node.get("additionalProperties")
    if kind == "object" and isinstance(additional, Mapping) and not node.get("properties"):
        inner = _type(additional) if additional.get("type") else "any"
        return f"map of {inner}"
    if kind is None:
        return "any"
    return str(kind)


def _constraints(node: Mapping[str, Any]) -> list[str]:
    """The bounds a value must keep (enum, minimum, length, pattern), as short phrases."""
    found = []
    if "enum" in node:
        found.append("one of " + ", ".join(_code(json.dumps(v)) for v in node["enum"]))
    for key, word in (("minimum", "≥"), ("maximum", "≤")):
        if key in node:
            strict = node.get(f"exclusive{key[0].upper()}{key[1:]}") is True
            found.append(f"{_STRICT[word] if strict else word} {node[key]}")
    for key, word in (("minLength", "length ≥"), ("maxLength", "length ≤"),
                      ("minItems", "items ≥"), ("maxItems", "items ≤"),
                      ("maxProperties", "keys ≤")):  # fmt: skip
        if key in node:
            found.append(f"{word} {node[key]}")
    if "pattern" in node:
        found.append(f"pattern {_code(node['pattern'])}")
    return found


def schema_fields(
    node: Mapping[str, Any], prefix: str, required: bool = False
) -> Iterator[tuple[str, str, str, str]]:
    """(path, type, default, description) of ``node`` and every field below it, depth first."""
    kind = _type(node)
    extra = _constraints(node)
    if required:
        extra.insert(0, "required")
    default = _code(json.dumps(node["default"])) if "default" in node else ""
    described = _text(str(node.get("description", "")))
    shown = kind + (f" ({'; '.join(extra)})" if extra else "")
    yield prefix, shown, default, described
    below: Mapping[str, Any] = node
    path = prefix
    if node.get("type") == "array" and isinstance(node.get("items"), Mapping):
        below, path = node["items"], f"{prefix}[]"
    properties = below.get("properties") or {}
    needed = set(below.get("required") or ())
    for name, child in properties.items():
        yield from schema_fields(child, f"{path}.{name}", name in needed)
    additional = below.get("additionalProperties")
    if isinstance(additional, Mapping) and additional.get("properties"):
        yield from schema_fields(additional, f"{path}.<key>")


def crd_page() -> str:
    """Every kind's spec and status fields, one table each, from the generated CRDs."""
    from kyai.api import custom_resource_definitions

    lines = [
        f"# {PAGES['reference/crds.md']}",
        "",
        _GENERATED.format(source="kyai.api.custom_resource_definitions()"),
        "Every field of the six kinds (`kyai.io`), read from the same CRDs that `make crds` "
        "writes into `crds/`, which are generated from the pydantic models in "
        "`operator/kyai/api`. A path `a.b[]` is an item of the array `a.b`; `<key>` is any "
        "key of a map. What the fields mean together is on the pages of the how-to guides "
        "and in [Resources and their status](resources.md).",
        "",
    ]
    for definition in custom_resource_definitions():
        names = definition["spec"]["names"]
        version = definition["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        short = ", ".join(names.get("shortNames", []))
        lines += [
            f"## {names['kind']}",
            "",
            f"`{definition['spec']['group']}/{version['name']}`, plural `{names['plural']}`"
            + (f", short names `{short}`" if short else "")
            + f", {definition['spec']['scope']}.",
            "",
        ]
        if schema.get("description"):
            lines += [_text(schema["description"]), ""]
        for part in ("spec", "status"):
            node = (schema.get("properties") or {}).get(part)
            if node is None:
                continue
            lines += [
                f"### {names['kind']} {part}",
                "",
                "| field | type | default | description |",
                "|---|---|---|---|",
            ]
            for path, kind, default, described in schema_fields(node, part):
                lines.append(f"| `{path}` | {kind} | {default} | {described} |")
            lines.append("")
        columns = version.get("additionalPrinterColumns") or []
        if columns:
            lines += [
                f"### {names['kind']} columns of `kubectl get`",
                "",
                "| column | JSON path | shown | description |",
                "|---|---|---|---|",
            ]
            for column in columns:
                shown = "`-o wide`" if column.get("priority") else "always"
                lines.append(
                    f"| {column['name']} | `{column['jsonPath']}` | {shown} "
                    f"| {_text(column.get('description', ''))} |"
                )
            lines.append("")
    return "\n".join(lines)


# -- the command line: every command and flag, from argparse ---------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _help(action: argparse.Action, prog: str) -> str:
    """An action's help with argparse's ``%(default)s``-style fields filled in."""
    text = action.help or ""
    if "%" in text:
        params = {**vars(action), "prog": prog}
        for name in list(params):
            if params[name] is argparse.SUPPRESS:
                del params[name]
        if params.get("choices") is not None:
            params["choices"] = ", ".join(map(str, params["choices"]))
        text = text % params
    return text


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if action.help is argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            names = ", ".join(f"`{name}`" for name in action.option_strings)
        else:
            names = f"`{action.metavar or action.dest}` (positional)"
        if action.nargs == 0:
            value = ""
        elif action.choices is not None:
            value = " \\| ".join(f"`{choice}`" for choice in action.choices)
        else:
            metavar = action.metavar or action.dest.upper()
            value = f"`{' '.join(metavar) if isinstance(metavar, tuple) else metavar}`"
        default = action.default
        shown = (
            ""
            if default in (None, argparse.SUPPRESS, False) or action.nargs == 0
            else _code(str(default) if not isinstance(default, list) else " ".join(default))
        )
        rows.append(f"| {names} | {value} | {shown} | {_text(_help(action, parser.prog))} |")
    return rows


def _command_section(parser: argparse.ArgumentParser, depth: int, origin: str) -> list[str]:
    lines = [f"{'#' * depth} {parser.prog}", ""]
    if origin:
        lines += [origin, ""]
    if parser.description:
        lines += [_text(parser.description), ""]
    usage = parser.format_usage().removeprefix("usage: ").strip()
    lines += ["```text", usage, "```", ""]
    rows = _option_rows(parser)
    if rows:
        lines += ["| option | value | default | meaning |", "|---|---|---|---|", *rows, ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip("\n"), "```", ""]
    children = _subparsers(parser)
    if children is not None:
        for child in dict.fromkeys(children.choices.values()):
            lines += _command_section(child, min(depth + 1, 6), "")
    return lines


def cli_page() -> str:
    """Every command of ``kyai`` (the product's, then the installed tools'), flag by flag."""
    from kyai.cli import COMMANDS, build_parser

    parser = build_parser()
    commands = _subparsers(parser)
    assert commands is not None, "kyai's parser has no commands"
    lines = [
        f"# {PAGES['reference/cli.md']}",
        "",
        _GENERATED.format(source="kyai.cli.build_parser()"),
        "Every command of `kyai`, with its flags, defaults and exit statuses, read from its "
        "argparse parser (what `kyai COMMAND --help` prints). The product's commands come "
        "first, in `kyai --help`'s order; then the commands that tools installed beside it "
        "add (the `kyai.commands` entry points, e.g. `kyai devcluster` from "
        "`tools/devcluster`).",
        "",
        "```text",
        parser.format_usage().removeprefix("usage: ").strip(),
        "```",
        "",
    ]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip("\n"), "```", ""]
    ordered = [name for name in COMMANDS if name in commands.choices]
    ordered += [name for name in commands.choices if name not in COMMANDS]
    for name in ordered:
        origin = "" if name in COMMANDS else "From a tool installed beside the product."
        lines += _command_section(commands.choices[name], 2, origin)
    return "\n".join(lines)


# -- metrics: every family, from the registries the processes serve ---------------------------


def _families(registry: Any) -> list[tuple[str, str, tuple[str, ...], str]]:
    """(exposed name, type, labels, help) of every family of a prometheus_client registry.

    Labels come from the family (``*MetricFamily(labels=...)``) or from the collector that
    made it (a ``Counter``/``Histogram``/``Gauge`` with label names): an empty registry has
    no samples to read them from. The collectors are prometheus_client's own list.
    """
    wrappers: dict[str, tuple[str, ...]] = {}
    for collector in list(registry._collector_to_names):
        names = getattr(collector, "_labelnames", None)
        if names is not None and hasattr(collector, "_name"):
            wrappers[collector._name] = tuple(names)
    found = []
    for family in registry.collect():
        labels = getattr(family, "_labelnames", None) or wrappers.get(family.name, ())
        if family.type == "summary":
            labels = (*labels, "quantile")
        exposed = f"{family.name}_total" if family.type == "counter" else family.name
        found.append((exposed, family.type, tuple(labels), family.documentation))
    return found


def metrics_page() -> str:
    """Every series of the operator's and the judge gateway's ``/metrics``."""
    from kyai.controllers.leader import leader_gauge
    from kyai.gateway._metrics import GatewayMetrics
    from kyai.metrics import RunMetrics, ScheduleMetrics, SweepMetrics

    operator = RunMetrics()  # as kyai.manager builds it
    SweepMetrics(registry=operator.registry)
    ScheduleMetrics(registry=operator.registry)
    leader_gauge(operator.registry)
    gateway = GatewayMetrics(in_flight=dict)
    lines = [
        f"# {PAGES['reference/metrics.md']}",
        "",
        _GENERATED.format(source="the operator's and the gateway's registries"),
        "Read from the registries the two processes serve. Histograms add `_bucket`, `_sum` "
        "and `_count` series (`le` label), summaries the `quantile` label (`0.5`, `0.9`, "
        "`0.99`) and, where the status counts the observations, `_count` and `_sum`. The "
        "`process_*` series are prometheus_client's standard process collector (Linux). "
        "Every per-run series is one series per succeeded run; the labels are bounded (never "
        "per question or request). How they are meant to be read: "
        "[Resources and their status](resources.md#phases-scores-and-metrics).",
        "",
    ]
    for title, registry, where in (
        ("The operator's /metrics", operator.registry, "`kyai operator`, port 8080"),
        ("The judge gateway's /metrics", gateway.registry, "`kyai judge-gateway`, port 9090"),
    ):
        lines += [
            f"## {title}",
            "",
            f"Served by {where}.",
            "",
            "| series | type | labels | help |",
            "|---|---|---|---|",
        ]
        for name, kind, labels, documentation in _families(registry):
            shown = ", ".join(f"`{label}`" for label in labels)
            lines.append(f"| `{name}` | {kind} | {shown} | {_text(documentation)} |")
        lines.append("")
    return "\n".join(lines)


# -- engine flags: every option of every version, from the flag tables --------------------------


def _flag_value(flag: Any) -> str:
    """What an option takes, in a cell: its kind, negative form, type and choices."""
    if flag.kind == "boolean":
        if flag.negative:
            return f"switch; off: {_code(flag.negative)}"
        return "switch (no negative form)"
    if flag.kind == "deprecated":
        return "refused: " + _text(flag.message or "deprecated")
    taken = {
        "value": "a value",
        "choice": "one of",
        "list": "one or more values",
        "any": "zero or more values",
        "optional": "an optional value",
        "append": "a value, repeatable",
    }[flag.kind]
    if flag.type and flag.type != "str":
        taken += f" ({_text(flag.type)})"
    if flag.choices:
        taken += ": " + ", ".join(_code(str(choice)) for choice in flag.choices)
    return taken


def engine_flags_page() -> str:
    """Every option of every engine version with a flag table."""
    from kyai.engines import ENGINES, engine_tables

    lines = [
        f"# {PAGES['reference/engine-flags.md']}",
        "",
        _GENERATED.format(source="the flag tables of operator/kyai/engines/flags"),
        "An EngineArgsSet's `args` are checked against the table of the engine version its "
        "Workloads run (the version in the image's tag; the default image's when none names "
        "another): an option that is not below is refused, naming the nearest one; a value "
        "outside an option's choices is refused, naming them; `false` on a switch renders its "
        "negative form, nothing when the switch is off by default (the status says so), and "
        "is refused when the engine cannot turn it off. A version without a table is checked "
        "against the newest table, as warnings. `spec.extraArgs` pass unchecked. "
        "The tables are written by `make engine-flags` from the engines' own parsers "
        "(`scripts/engine_flags`); each names its source.",
        "",
        "| engine | version | default image | options | source |",
        "|---|---|---|---|---|",
    ]
    for name, engine in ENGINES.items():
        for table in engine_tables(name):
            default = _code(engine.default_image) if engine.table().table == table else ""
            lines.append(
                f"| {name} | {table.version} | {default} | {len(table.flags)} | "
                f"{_text(table.source)} |"
            )
    for name in ENGINES:
        for table in reversed(engine_tables(name)):
            lines += [
                "",
                f"## {table.engine} {table.version}",
                "",
                "| option | other spellings | takes | default |",
                "|---|---|---|---|",
            ]
            for flag in table.flags:
                others = ", ".join(_code(alias) for alias in flag.aliases)
                default = "" if flag.default is None else _code(json.dumps(flag.default))
                lines.append(
                    f"| {_code(flag.option)} | {others} | {_flag_value(flag)} | {default} |"
                )
    return "\n".join(lines)


# -- the hook -----------------------------------------------------------------------------------

GENERATORS = {
    "reference/crds.md": crd_page,
    "reference/cli.md": cli_page,
    "reference/metrics.md": metrics_page,
    "reference/engine-flags.md": engine_flags_page,
}


def on_files(files: Any, config: Any, **_: Any) -> Any:
    """MkDocs' ``on_files`` event: add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, generate in GENERATORS.items():
        if files.get_file_from_path(path) is not None:
            raise ValueError(f"docs/{path} exists in Git, but it is generated: delete it")
        files.append(File.generated(config, path, content=generate() + "\n"))
    return files
