"""``kyai judge-gateway``: serve the default judge to EvaluationRun judge workers.

The Helm chart runs it (the operator's image) in the release's namespace whenever
``defaultJudge.endpoint`` is set. Settings come from ``KYAI_GATEWAY_*`` variables (the chart
sets them) and flags; the API server is reached with the pod's own ServiceAccount (or
``--kubeconfig``, ``$KUBECONFIG``). SIGTERM stops it after in-flight requests (5 s at most).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kyai.gateway._kube import ApiServerConfig
    from kyai.gateway._redact import Redactor
    from kyai.gateway._settings import GatewaySettings

PROG = "kyai judge-gateway"


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``judge-gateway`` sub-command."""
    parser = subparsers.add_parser(
        "judge-gateway",
        help="serve the default judge to EvaluationRun judge workers (the chart runs it)",
        description=(
            "An OpenAI-compatible proxy for the platform's default judge: judge workers "
            "authenticate with their pod's projected ServiceAccount token (checked with a "
            "TokenReview); the gateway adds the judge's API key, applies per-namespace limits "
            "and counts requests and tokens per namespace on /metrics. Every flag also reads "
            "from KYAI_GATEWAY_<NAME> (e.g. KYAI_GATEWAY_UPSTREAM_URL); the limits, caches and "
            "labels only from there (see docs/how-to/share-the-judge.md)."
        ),
    )
    add = parser.add_argument
    add("--upstream-url", metavar="URL", help="the default judge's OpenAI-compatible base URL")
    add("--model", help="the default judge's model, the only one served")
    add("--api-key-file", metavar="PATH", help="file holding the judge's API key (re-read)")
    add("--audience", help="audience of the callers' tokens (default kyai-judge-gateway)")
    add("--bind-address", metavar="ADDRESS", help="address to listen on (default 0.0.0.0)")
    add("--port", type=int, metavar="PORT", help="port of the proxy (default 8080)")
    add("--metrics-port", type=int, metavar="PORT",
        help="port of /metrics, /healthz, /readyz (default 9090)")  # fmt: skip
    add("--kubeconfig", metavar="PATH",
        help="the API server's kubeconfig (default: in-cluster, $KUBECONFIG)")  # fmt: skip
    add("--verbose", "-v", action="store_true", help="debug logging")
    parser.set_defaults(handler=run)


def _settings(args: argparse.Namespace) -> GatewaySettings:
    from kyai.gateway._settings import GatewaySettings

    return GatewaySettings.from_env(
        upstream_url=args.upstream_url,
        model=args.model,
        api_key_file=args.api_key_file,
        audience=args.audience,
        bind_address=args.bind_address,
        port=args.port,
        metrics_port=args.metrics_port,
        kubeconfig=args.kubeconfig,
    )


def _logging(verbose: bool) -> Redactor:
    from kyai.gateway._redact import RedactingFilter, Redactor

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    redactor = Redactor()
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter(redactor))
    return redactor


def run(args: argparse.Namespace) -> int:
    """Run the gateway until SIGTERM or SIGINT; the exit status."""
    from pydantic import ValidationError

    from kyai._exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
    from kyai._loop import loop_factory, tune_collector
    from kyai.gateway._files import FileUnreadableError, WatchedFile
    from kyai.gateway._kube import ApiServerConfig, ClusterConfigError
    from kyai.gateway._settings import describe_errors

    redactor = _logging(args.verbose)
    try:
        settings = _settings(args)
    except ValidationError as exc:
        print(f"{PROG}: error: invalid settings: {describe_errors(exc)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if settings.api_key_file:
            redactor.add(WatchedFile(settings.api_key_file, what="--api-key-file").read())
        config = ApiServerConfig.discover(settings.kubeconfig)
    except (FileUnreadableError, ClusterConfigError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    tune_collector()
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(_serve(settings, config, redactor))
    except OSError as exc:
        print(f"{PROG}: error: cannot listen: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


async def _serve(settings: GatewaySettings, config: ApiServerConfig, redactor: Redactor) -> None:
    from kyai.gateway._kube import KubernetesAPI
    from kyai.gateway._proxy import Gateway

    log = logging.getLogger("kyai.gateway")
    api = KubernetesAPI(config, check_seconds=settings.file_check_seconds)
    gateway = Gateway(settings, api, redactor=redactor)
    try:
        await gateway.start()
    except BaseException:
        await gateway.stop()
        raise
    log.info(
        "serving %s (model %s) on %s:%s, metrics on :%s, tokens reviewed by %s",
        settings.upstream_url,
        settings.model,
        settings.bind_address,
        gateway.port,
        gateway.metrics_port,
        config.server,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        await gateway.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``judge-gateway`` with its own parser (``python -m kyai.gateway``)."""
    parser = argparse.ArgumentParser(prog="kyai")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["judge-gateway", *(sys.argv[1:] if argv is None else argv)])
    status: int = args.handler(args)
    return status
