"""``kyai operator``: run the operator (kopf underneath) against the current kubeconfig.

In a cluster it uses its service account; locally, ``$KUBECONFIG`` (``kyai devcluster``
writes one). Settings come from ``KYAI_*`` variables (the Helm chart sets them) and flags.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import Gauge

    from kyai.controllers.leader import LeaseElector
    from kyai.settings import OperatorSettings


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
    election = parser.add_argument_group(
        "leader election",
        "Several replicas, one reconciling: the holder of a coordination.k8s.io/v1 Lease. A "
        "standby serves /healthz and /metrics and waits; a holder that cannot renew within "
        "the renew deadline exits at once.",
    )
    election.add_argument("--leader-elect", action="store_true", default=None,
                          help="reconcile only while holding the Lease (default: "
                          "$KYAI_LEADER_ELECT, else off)")  # fmt: skip
    election.add_argument("--leader-election-namespace", metavar="NS",
                          help="namespace of the Lease (default: the operator's own)")  # fmt: skip
    election.add_argument("--leader-election-id", metavar="NAME",
                          help="name of the Lease (default kyai-operator)")  # fmt: skip
    election.add_argument("--leader-election-identity", metavar="NAME",
                          help="this replica's name in the Lease (default: $POD_NAME, else "
                          "the host name and a random suffix)")  # fmt: skip
    election.add_argument("--leader-election-lease-seconds", type=float, metavar="S",
                          help="how long a standby waits after it last saw the Lease change "
                          "(default 15)")  # fmt: skip
    election.add_argument("--leader-election-renew-deadline-seconds", type=float, metavar="S",
                          help="how long the holder may fail to renew before it exits "
                          "(default 10)")  # fmt: skip
    election.add_argument("--leader-election-retry-seconds", type=float, metavar="S",
                          help="how often the holder renews and a standby tries "
                          "(default 2)")  # fmt: skip
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.set_defaults(handler=_run)

    load = subparsers.add_parser(
        "snapshot-load",
        help="write a large Snapshot's resolved rows into a directory (the operator's load Job)",
        description=(
            "Resolve a Snapshot's rows as the operator does (download the URL, check its "
            "sha256, parse) and write snapshot.json and the rows into --output; refuse a "
            "result whose sha256 is not --expect-sha256."
        ),
    )
    load.add_argument("--name", required=True, help="the Snapshot's name")
    load.add_argument("--spec", required=True, help="the Snapshot's spec as JSON")
    load.add_argument("--expect-sha256", required=True, help="the rows' sha256 the operator saw")
    load.add_argument("--output", required=True, help="the directory to write (the PVC)")
    load.set_defaults(handler=_snapshot_load)


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
    from kyai._loop import loop_factory, tune_collector
    from kyai.controllers.handlers import build_registry
    from kyai.controllers.leader import leader_gauge
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
            leader_elect=args.leader_elect,
            leader_election_namespace=args.leader_election_namespace,
            leader_election_id=args.leader_election_id,
            leader_election_identity=args.leader_election_identity,
            leader_election_lease_seconds=args.leader_election_lease_seconds,
            leader_election_renew_deadline_seconds=args.leader_election_renew_deadline_seconds,
            leader_election_retry_seconds=args.leader_election_retry_seconds,
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
    leader = leader_gauge(metrics.registry)
    elector = _elector(settings, leader) if settings.leader_elect else None
    if elector is None:
        leader.set(1)  # the only replica: always the one that reconciles
    registry = build_registry(settings)
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    tune_collector()
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        if elector is not None:
            # The Lease gate: kopf does not start (no watch, no handler) before the Lease is held.
            runner.run(_standby(elector, settings.health_port))
            elector.guard()
        operator = kopf.operator(
            registry=registry,
            standalone=True,
            namespaces=list(settings.namespaces),
            clusterwide=not settings.namespaces,
            liveness_endpoint=liveness,
            memo=kopf.Memo(operator_settings=settings, metrics=metrics),
        )
        runner.run(_lead(operator, elector))
    return 0


def _elector(settings: OperatorSettings, gauge: Gauge) -> LeaseElector:
    """The Lease elector of these settings, setting ``gauge`` to 1 while leading."""
    from kyai.controllers.leader import (
        LeaseConfig,
        LeaseElector,
        default_identity,
        default_namespace,
        lease_client,
    )

    config = LeaseConfig(
        namespace=settings.leader_election_namespace or default_namespace(),
        name=settings.leader_election_id,
        identity=settings.leader_election_identity or default_identity(),
        lease_seconds=settings.leader_election_lease_seconds,
        renew_deadline_seconds=settings.leader_election_renew_deadline_seconds,
        retry_seconds=settings.leader_election_retry_seconds,
    )
    return LeaseElector(lease_client(), config, on_leading=lambda on: gauge.set(int(on)))


async def _standby(elector: LeaseElector, health_port: int) -> None:
    """Serve /healthz (200: a standby is ready) until this process holds the Lease."""
    from aiohttp import web

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"leader": False, "lease": elector.config.name})

    runner: web.AppRunner | None = None
    if health_port:
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", health_port).start()
    try:
        await elector.acquire()
    finally:
        if runner is not None:
            await runner.cleanup()  # kopf's liveness endpoint takes the port over


async def _lead(operator: Coroutine[Any, Any, None], elector: LeaseElector | None) -> None:
    """Run kopf; with an elector, renew the Lease meanwhile and give it up after kopf stops."""
    if elector is None:
        await operator
        return
    keeper = asyncio.create_task(elector.keep(), name="lease-renewal")
    try:
        await operator
    finally:
        keeper.cancel()
    await elector.release()
    await elector.client.aclose()


def _fail(message: str) -> int:
    """Print the error and put it where the kubelet takes the termination message from."""
    from kyai.constants import TERMINATION_MESSAGE_ENV

    text = f"kyai snapshot-load: error: {message}"
    print(text, file=sys.stderr)
    path = os.environ.get(TERMINATION_MESSAGE_ENV)
    if path and os.path.isfile(path):
        with contextlib.suppress(OSError), open(path, "wb") as log:
            log.write(text.encode("utf-8", "replace")[:4096])
    return 1


def _snapshot_load(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from pydantic import ValidationError

    from kyai._exitcodes import EXIT_USAGE
    from kyai.api import SnapshotSpec
    from kyai.controllers.snapshot import SourceUnavailable, resolve
    from kyai.datasets import DatasetError, snapshot_files

    try:
        spec = SnapshotSpec.model_validate(json.loads(args.spec))
    except (ValueError, ValidationError) as exc:
        print(f"kyai snapshot-load: error: --spec: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if spec.source is None or spec.source.url is None:
        print("kyai snapshot-load: error: --spec: only a spec.source.url is loaded by a Job",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        dataset = asyncio.run(resolve(None, "", args.name, spec))  # type: ignore[arg-type]
    except (SourceUnavailable, DatasetError) as exc:
        return _fail(str(exc))
    if dataset.sha256 != args.expect_sha256:
        return _fail(
            f"the rows resolved to sha256 {dataset.sha256}, not the {args.expect_sha256} the "
            "operator saw: the source changed"
        )
    files = snapshot_files(dataset)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    for name, text in files.text.items():
        (output / f".{name}.partial").write_text(text, encoding="utf-8")
    for name, data in files.binary.items():
        (output / f".{name}.partial").write_bytes(data)
    for name in [*files.text, *files.binary]:
        (output / f".{name}.partial").replace(output / name)  # all written, then visible
    print(f"kyai snapshot-load: {len(dataset.rows)} rows, sha256 {dataset.sha256} in {output}")
    return 0
