"""``kyai devcluster``: placeholder until the local API server lands."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``devcluster`` sub-command."""
    parser = subparsers.add_parser(
        "devcluster",
        help="run a local Kubernetes API server and simulated kubelet (tests and demos)",
    )
    parser.set_defaults(handler=_not_ready)


def _not_ready(args: argparse.Namespace) -> int:
    raise SystemExit("kyai devcluster is not available in this build")
