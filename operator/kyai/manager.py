"""``kyai operator``: run the operator (kopf underneath) against the current kubeconfig.

In a cluster it uses its service account; locally, ``$KUBECONFIG`` (``kyai devcluster``
writes one). Settings come from ``KYAI_*`` variables (the Helm chart sets them) and flags.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``operator`` sub-command."""
    parser = subparsers.add_parser(
        "operator",
        help="run the KYAI operator",
        description="Reconcile EngineArgsSets, Workloads, Snapshots and EvaluationRuns.",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", metavar="NS",
        help="watch this namespace (repeatable; default: $KYAI_NAMESPACES, else all)",
    )  # fmt: skip
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch all namespaces")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="port of /metrics (default 8080; 0 disables)")  # fmt: skip
    parser.add_argument("--health-port", type=int, metavar="PORT",
                        help="port of /healthz (default 8081; 0 disables)")  # fmt: skip
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import kopf
    from pydantic import ValidationError

    from kyai.controllers.handlers import build_registry
    from kyai.settings import OperatorSettings

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        settings = OperatorSettings.from_env(
            namespaces=() if args.all_namespaces else (tuple(args.namespace or ()) or None),
            metrics_port=args.metrics_port,
            health_port=args.health_port,
        )
    except ValidationError as exc:
        print(f"kyai operator: error: invalid settings: {exc}")
        return 2
    registry = build_registry(settings)
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    asyncio.run(
        kopf.operator(
            registry=registry,
            standalone=True,
            namespaces=list(settings.namespaces),
            clusterwide=not settings.namespaces,
            liveness_endpoint=liveness,
            memo=kopf.Memo(operator_settings=settings),
        )
    )
    return 0
