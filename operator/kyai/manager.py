"""``kyai operator``: run the operator (kopf underneath) against the current kubeconfig.

In a cluster it uses its service account; locally, ``$KUBECONFIG`` (``kyai devcluster``
writes one). Settings come from ``KYAI_*`` variables (the Helm chart sets them) and flags.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
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
    parser.add_argument("--metrics-bind-address", metavar="ADDRESS",
                        help="address /metrics binds to (default 0.0.0.0)")  # fmt: skip
    parser.add_argument("--health-port", type=int, metavar="PORT",
                        help="port of /healthz (default 8081; 0 disables)")  # fmt: skip
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.set_defaults(handler=_run)


def _check_free(address: str, port: int) -> None:
    """Raise OSError naming the port when nothing may listen on it (e.g. in use)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot listen on {address}:{port} (/healthz): {exc.strerror}"
            ) from exc


def _run(args: argparse.Namespace) -> int:
    import kopf
    from pydantic import ValidationError

    from kyai._exitcodes import EXIT_FAILURE, EXIT_USAGE
    from kyai.controllers.handlers import build_registry
    from kyai.metrics import RunMetrics
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
            metrics_bind_address=args.metrics_bind_address,
            health_port=args.health_port,
        )
    except ValidationError as exc:
        print(f"kyai operator: error: invalid settings: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # Bind the ports before kopf starts: a clash is an error now, not a retried start-up.
    metrics = RunMetrics()
    try:
        if settings.health_port:
            _check_free("0.0.0.0", settings.health_port)
        if settings.metrics_port:
            metrics.serve(settings.metrics_port, address=settings.metrics_bind_address)
    except OSError as exc:
        print(f"kyai operator: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    registry = build_registry(settings)
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    asyncio.run(
        kopf.operator(
            registry=registry,
            standalone=True,
            namespaces=list(settings.namespaces),
            clusterwide=not settings.namespaces,
            liveness_endpoint=liveness,
            memo=kopf.Memo(operator_settings=settings, metrics=metrics),
        )
    )
    return 0
