"""The ``kyai`` command line: one entry point, a table of commands, each imported on use.

:data:`COMMANDS` lists the product's commands in ``--help`` order: the module whose
``register(subparsers)`` adds the command (it sets ``handler``, a callable taking the parsed
namespace and returning the exit status, as a default) and the line ``kyai --help`` shows.
Only the module of the command given is imported; the others appear as one-line entries, so
``kyai --version`` and ``kyai --help`` import no command at all. A new command is one entry
here and a ``register`` in its module (``tests/unit/cli/test_cli_table.py`` checks that the two
agree).

Tools installed beside the product add commands through the ``kyai.commands`` entry-point
group (an entry names a module with ``register``): ``kyai devcluster`` comes from the
kyai-devcluster distribution. Entry points are read only when the command is not one of
ours or when the commands are listed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kyai import __version__
from kyai._exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, exit_codes_epilog

__all__ = ["COMMANDS", "EXIT_OK", "EXIT_USAGE", "PLUGIN_GROUP", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """Where a command's parser comes from, and its line in ``kyai --help``."""

    module: str
    help: str


#: The product's commands, in the order ``kyai --help`` lists them.
COMMANDS: dict[str, Command] = {
    "generate": Command(
        "kyai.evaluation.cli", "phase 1: ask the candidate every row and store the answers"
    ),
    "judge": Command("kyai.evaluation.cli", "phase 2: score stored answers with an LLM judge"),
    "run": Command("kyai.evaluation.cli", "generate then judge, into one directory"),
    "lm-eval": Command(
        "kyai.lmeval.cli",
        "run lm-evaluation-harness tasks against a server and gate on their metrics",
    ),
    "operator": Command("kyai.manager", "run the KYAI operator"),
    "snapshot-load": Command(
        "kyai.manager",
        "write a large Snapshot's resolved rows into a directory (the operator's load Job)",
    ),
    "leaderboard": Command(
        "kyai.leaderboard",
        "rank succeeded runs per comparison key (ties where no test separates them)",
    ),
    "compare": Command(
        "kyai.compare",
        "is a candidate run really better or worse than a baseline run? (paired tests)",
    ),
    "run-now": Command(
        "kyai.schedule_cli",
        "ask an EvaluationSchedule for a run now (the kyai.io/run-now annotation)",
    ),
    "view": Command(
        "kyai.view.cli",
        "serve a local web page of runs: scores, ranks, two runs side by side, questions",
    ),
    "report": Command(
        "kyai.view.cli",
        "write the page of kyai view as one self-contained HTML file (no network)",
    ),
    "judge-gateway": Command(
        "kyai.gateway.cli",
        "serve the default judge to EvaluationRun judge workers (the chart runs it)",
    ),
}

#: The entry-point group of commands that tools installed beside the product add.
PLUGIN_GROUP = "kyai.commands"

#: Commands of this repository's tools, named when they are not installed.
KNOWN_PLUGINS: dict[str, str] = {"devcluster": "kyai-devcluster (pip install -e tools/devcluster)"}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser for ``argv``: the parser of the command it names, lines for the rest.

    Without ``argv``, every command's own parser (all modules imported: for tests and docs).
    """
    parser = argparse.ArgumentParser(
        prog="kyai",
        description="KYAI: measure the answer quality of self-hosted LLMs.",
    )
    parser.add_argument("--version", action="version", version=f"kyai {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    word, listing = _command_word(argv) if argv is not None else (None, True)
    for module in dict.fromkeys(
        command.module for name, command in COMMANDS.items() if argv is None or name == word
    ):
        _register(module, subparsers)
    for name, command in COMMANDS.items():
        if name not in subparsers.choices:
            subparsers.add_parser(name, help=command.help, add_help=False)
    if listing or (word is not None and word not in COMMANDS):
        _register_plugins(subparsers)
    _add_exit_codes(parser, subparsers)
    return parser


def _command_word(argv: Sequence[str]) -> tuple[str | None, bool]:
    """The command ``argv`` names (its first word that is no option), and whether it lists them.

    The commands are listed without a command or with ``-h`` before it; the top-level options
    take no value.
    """
    for index, arg in enumerate(argv):
        if not arg.startswith("-"):
            return arg, any(a in ("-h", "--help") for a in argv[:index])
    return None, "--version" not in argv


def _register(module: str, subparsers: argparse._SubParsersAction[Any]) -> None:
    importlib.import_module(module).register(subparsers)


def _register_plugins(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the commands of the ``kyai.commands`` entry points (tools beside the product)."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=PLUGIN_GROUP):
        if entry.name not in subparsers.choices:  # the product's own commands win
            entry.load().register(subparsers)


def _missing_plugin(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Exit with status 2 naming the distribution of a known tool command not installed."""
    word, _ = _command_word(argv)
    if word in KNOWN_PLUGINS and word not in _choices(parser):
        parser.exit(
            EXIT_USAGE,
            f"kyai {word}: not installed; it comes with the distribution {KNOWN_PLUGINS[word]}\n",
        )


def _choices(parser: argparse.ArgumentParser) -> dict[str, Any]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, keeping the lines of the "exit status:" epilog as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("exit status:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _add_exit_codes(
    parser: argparse.ArgumentParser, subparsers: argparse._SubParsersAction[Any]
) -> None:
    """Every command's ``--help`` ends with the exit statuses it can return."""
    parser.epilog = exit_codes_epilog("kyai")
    parser.formatter_class = _HelpFormatter
    for command, subparser in subparsers.choices.items():
        assert subparser.epilog is None, f"kyai {command}: the exit statuses are its epilog"
        subparser.epilog = exit_codes_epilog(command)
        if subparser.formatter_class is argparse.HelpFormatter:
            subparser.formatter_class = _HelpFormatter
        else:  # a raw formatter of its own already keeps the epilog's lines as written
            assert issubclass(subparser.formatter_class, argparse.RawDescriptionHelpFormatter), (
                command
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kyai`` command line and return its exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(arguments)
    _missing_plugin(parser, arguments)
    args = parser.parse_args(arguments)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        status: int = handler(args)
    except KeyboardInterrupt:
        print(f"kyai {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
