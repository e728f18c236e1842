"""``kyai devcluster``: serve a local Kubernetes API server until stopped.

The ``kyai.commands`` entry point of kyai-devcluster: ``kyai --help`` imports this module to
list the command, so it imports only argparse and the image defaults; the server loads when
the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kyai_devcluster._images import (
    DEFAULT_ENTRYPOINT,
    DEFAULT_LOCAL_IMAGES,
    DEFAULT_PROJECT_IMAGE,
    DEFAULT_STANDIN_IMAGE,
    DEFAULT_STANDIN_IMAGES,
    ENGINE_IMAGES,
    parse_engine_command,
)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``devcluster`` sub-command."""
    parser = subparsers.add_parser(
        "devcluster",
        help="run a local Kubernetes API server and simulated kubelet (tests and demos)",
        description=(
            "Serve a local Kubernetes API server with simulated controllers and kubelet on "
            "loopback, write a kubeconfig pointing at it, and serve until SIGINT/SIGTERM. "
            "A test and demo tool, never a deployment target."
        ),
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="port to bind; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="where to write the kubeconfig (default: WORKDIR/kubeconfig)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="directory for volumes, pod logs and pod kubeconfigs (default: a temporary one)",
    )
    parser.add_argument(
        "--local-image",
        action="append",
        dest="local_images",
        metavar="PATTERN",
        default=None,
        help=(
            "image pattern (fnmatch) of the project's image: its pods run as written (local "
            "processes, or containers of --image in podman when missing there); repeatable "
            f"(default: {', '.join(DEFAULT_LOCAL_IMAGES)})"
        ),
    )
    parser.add_argument(
        "--entrypoint",
        default=" ".join(DEFAULT_ENTRYPOINT),
        help="command run for a local-image container without a command (default: %(default)s)",
    )
    parser.add_argument(
        "--entrypoint-function",
        default=None,
        metavar="MODULE:FUNCTION",
        help=(
            "process runtime, for benchmarks: a local-image container without a command runs "
            "as this coroutine (given the launch: args, env, log and termination-message "
            "paths; returns the exit code) inside the devcluster instead of --entrypoint"
        ),
    )
    parser.add_argument(
        "--runtime",
        choices=("process", "podman"),
        default="process",
        help=(
            "how pods run: as local processes (fast, the default) or as podman containers "
            "of their images"
        ),
    )
    parser.add_argument(
        "--image",
        default=DEFAULT_PROJECT_IMAGE,
        help=(
            "podman runtime: the project image run for local-image patterns missing from "
            "podman's store (default: %(default)s)"
        ),
    )
    parser.add_argument(
        "--standin-image",
        default=DEFAULT_STANDIN_IMAGE,
        help=(
            "podman runtime: the stand-in image (kyai-testing; make standin-image) run for "
            f"{', '.join(DEFAULT_STANDIN_IMAGES[:2])}... missing from podman's store and for "
            f"the engine stand-in (images matching {', '.join(ENGINE_IMAGES)}) "
            "(default: %(default)s)"
        ),
    )
    parser.add_argument(
        "--engine-command",
        action="append",
        dest="engine_commands",
        metavar="PATTERN=COMMAND",
        type=_engine_command,
        default=None,
        help=(
            "pods of engine images matching PATTERN (fnmatch) run COMMAND (split as a shell "
            "would) followed by the container's command and args, instead of the engine "
            "stand-in (in podman: inside the --standin-image container); e.g. "
            "'vllm/vllm-openai*=.venv-engines/bin/python "
            "tools/testing/src/kyai_testing/real_engines/vllm_launcher.py' runs the real "
            "vllm serve (make test-engines installs it); repeatable, the first match wins"
        ),
    )
    parser.add_argument(
        "--https-port",
        type=int,
        default=0,
        help="port of the HTTPS listener in-cluster clients use; 0 picks a free one",
    )
    parser.add_argument(
        "--max-probe-period",
        type=float,
        default=1.0,
        help="cap on probes' periodSeconds (0: no cap; default: %(default)s)",
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help=(
            "install Kueue's CRDs (kueue.x-k8s.io/v1beta1) and emulate its admission of queued "
            "Jobs and Pods (README: Kueue emulation)"
        ),
    )
    parser.add_argument(
        "--lws",
        action="store_true",
        help=(
            "install LeaderWorkerSet's CRD (leaderworkerset.x-k8s.io/v1) and emulate its "
            "controller: leader and worker pods per group (README: LeaderWorkerSet emulation)"
        ),
    )
    parser.add_argument(
        "--verbose", action="store_true", help="log requests and controller activity"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the devcluster until interrupted; return the exit status."""
    import asyncio
    import logging

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    # cel-python logs every expression it compiles and evaluates at DEBUG (about 1 KB each):
    # --verbose is about the cluster's requests and controllers, not that.
    logging.getLogger("celpy").setLevel(logging.WARNING)
    from kyai._loop import loop_factory, tune_collector

    tune_collector()
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from kyai_devcluster._cluster import DevCluster, DevClusterError
    from kyai_devcluster._kueue import KUEUE_VERSION
    from kyai_devcluster._lws import LWS_VERSION

    function = None
    if args.entrypoint_function:
        try:
            function = _load_function(args.entrypoint_function)
        except (ImportError, AttributeError, ValueError) as exc:
            print(f"kyai devcluster: --entrypoint-function: {exc}", file=sys.stderr)
            return 2
    cluster = DevCluster(
        workdir=args.workdir,
        host=args.host,
        port=args.port,
        kubeconfig_path=args.kubeconfig,
        local_images=args.local_images or DEFAULT_LOCAL_IMAGES,
        entrypoint=tuple(args.entrypoint.split()),
        access_log=args.verbose,
        runtime=args.runtime,
        image=args.image,
        standin_image=args.standin_image,
        https_port=args.https_port,
        max_probe_period=args.max_probe_period or None,
        entrypoint_function=function,
        kueue=args.kueue,
        lws=args.lws,
        engine_commands=dict(args.engine_commands or ()),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await cluster.start()
    except DevClusterError as exc:
        print(f"kyai devcluster: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"kyai devcluster serving at {cluster.url}", flush=True)
        if cluster.https_url:
            print(f"in-cluster HTTPS at {cluster.https_url}", flush=True)
        print(f"runtime: {cluster.runtime_name}", flush=True)
        if args.kueue:
            print(f"kueue: emulating Kueue {KUEUE_VERSION} (kueue.x-k8s.io/v1beta1)", flush=True)
        if args.lws:
            print(
                f"lws: emulating LeaderWorkerSet {LWS_VERSION} (leaderworkerset.x-k8s.io/v1)",
                flush=True,
            )
        print(f"kubeconfig: {cluster.kubeconfig_path}", flush=True)
        print(f"workdir: {cluster.workdir}", flush=True)
        print(f"  export KUBECONFIG={cluster.kubeconfig_path}", flush=True)
        await stop.wait()
    finally:
        await cluster.stop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    print("kyai devcluster stopped", flush=True)
    return 0


def _engine_command(text: str) -> tuple[str, tuple[str, ...]]:
    """``--engine-command PATTERN=COMMAND`` (argparse's type: a usage error when malformed)."""
    try:
        return parse_engine_command(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _load_function(spec: str) -> Any:
    """The coroutine function ``MODULE:FUNCTION`` names."""
    import importlib
    import inspect

    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:FUNCTION, got {spec!r}")
    function = getattr(importlib.import_module(module_name), attribute)
    if not inspect.iscoroutinefunction(function):
        raise ValueError(f"{spec} is not a coroutine function (async def)")
    return function
