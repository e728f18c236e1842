"""``kyai run-now``: ask an EvaluationSchedule for a run now.

It sets the schedule's ``kyai.io/run-now`` annotation to the current time (a new value each
time, so two asks are two runs); the operator makes the run once, records the value in
``status.handledRunNow`` and removes the annotation. The same as ``kubectl annotate
evaluationschedule NAME kyai.io/run-now="$(date -u +%FT%TZ)" --overwrite``. Exit status 0
when asked, 2 when the schedule does not exist or no kubeconfig is found, 3 when the API server
refuses or cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from kyai._exitcodes import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``run-now``."""
    parser = subparsers.add_parser(
        "run-now",
        help="ask an EvaluationSchedule for a run now (the kyai.io/run-now annotation)",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument("schedule", metavar="NAME", help="the EvaluationSchedule")
    parser.add_argument(
        "-n", "--namespace", help="its namespace (default: the kubeconfig context's)"
    )
    parser.set_defaults(handler=_handle)


def ask(namespace: str | None, name: str, value: str) -> str:
    """Set the annotation on ``namespace/name`` (the kubeconfig's namespace by default)."""
    from pathlib import Path

    from kubernetes import client, config

    from kyai._kubeconfig import list_kube_config_contexts, load_kube_config
    from kyai.constants import ANNOTATION_RUN_NOW, GROUP, KINDS, VERSION

    try:  # as kubectl: the kubeconfig and its context's namespace, else the pod's
        load_kube_config()
        if namespace is None:
            _, current = list_kube_config_contexts()
            namespace = (current or {}).get("context", {}).get("namespace") or "default"
    except config.ConfigException:
        config.load_incluster_config()
        if namespace is None:
            namespace = (
                Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
            )
    plural = KINDS["EvaluationSchedule"][0]
    body = {"metadata": {"annotations": {ANNOTATION_RUN_NOW: value}}}
    client.CustomObjectsApi().patch_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, name, body
    )
    return namespace


def _handle(args: argparse.Namespace) -> int:
    from kubernetes.client.exceptions import ApiException

    from kyai.leaderboard import ClusterUnreachable, asking_cluster
    from kyai.ranking import SummaryError

    value = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        namespace = asking_cluster(lambda: ask(args.namespace, args.schedule, value))
    except SummaryError as exc:
        print(f"kyai run-now: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ClusterUnreachable as exc:
        cause = exc.__cause__
        if isinstance(cause, ApiException) and cause.status == 404:
            where = args.namespace or "the kubeconfig's namespace"
            print(
                f"kyai run-now: error: no EvaluationSchedule {args.schedule} in {where}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(f"kyai run-now: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(
        f"asked EvaluationSchedule {namespace}/{args.schedule} for a run (kyai.io/run-now={value})"
    )
    return EXIT_OK
