"""The ``kyai`` command line: one entry point, one sub-command module per concern.

Each sub-command module exposes ``register(subparsers)``; it adds its parser and sets
``handler`` (a callable taking the parsed namespace and returning the exit status) as a
default. Handlers import their heavy dependencies lazily so that ``kyai --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from kyai import __version__
from kyai._exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, exit_codes_epilog

#: Modules that contribute sub-commands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "kyai.evaluation.cli",
    "kyai.lmeval.cli",
    "kyai.manager",
    "kyai.devcluster.cli",
    "kyai.leaderboard",
)

__all__ = ["EXIT_OK", "EXIT_USAGE", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = argparse.ArgumentParser(
        prog="kyai",
        description="KYAI: measure the answer quality of self-hosted LLMs.",
    )
    parser.add_argument("--version", action="version", version=f"kyai {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(subparsers)
    _add_exit_codes(parser, subparsers)
    return parser


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
    parser = build_parser()
    args = parser.parse_args(argv)
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
