"""A Workload on several nodes: its LeaderWorkerSet and the Service in front of the leaders.

With ``spec.nodes`` N > 1 each replica of the model is one LeaderWorkerSet group
(``leaderworkerset.x-k8s.io/v1``) of N pods, ``spec.resources`` each, as kubernetes-sigs/lws
``docs/examples/vllm`` and ``docs/examples/sglang`` show: a leader template (the engine's
OpenAI server, with the probes) and a worker template (joining the leader at
``$(LWS_LEADER_ADDRESS)``, no probes), ``restartPolicy: RecreateGroupOnPodRestart`` (a pod that
fails takes its group with it: the engines' process groups cannot lose a member), groups
replaced one at a time (``maxUnavailable: 1, maxSurge: 0``: a surge group would wait for GPUs
the old one holds). The Service keeps the single-node name (the Workload's endpoint does not
change) and selects the leaders only (``leaderworkerset.sigs.k8s.io/worker-index: "0"``).

Pure functions; the pod template is the single-node one (:mod:`kyai.builders.workload`) with
the group's command lines (:func:`kyai.engines.engine_group_commands`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kyai.api.engineargsset import EngineArgsSetSpec
from kyai.api.workload import WorkloadSpec
from kyai.builders._common import (
    ManifestError,
    child_name,
    dns_label,
    hashed_object,
)
from kyai.builders.queue import queue_labels
from kyai.builders.workload import (
    engine_args_hash,
    engine_image,
    engine_pod_spec,
    workload_labels,
    workload_selector,
    workload_service,
)
from kyai.constants import ANNOTATION_ENGINE_ARGS_HASH
from kyai.engines import engine_group_commands
from kyai.settings import OperatorSettings

#: The LeaderWorkerSet API (LWS v0.10.0).
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
#: Labels the LWS controller puts on a group's pods.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: The worker index of a group's leader.
LEADER_INDEX = "0"
#: ``kyai.io/role`` of a group's pods (readable in ``kubectl get pods -L``).
LABEL_ROLE = "kyai.io/role"
#: A LeaderWorkerSet's name, short enough for its pods (``<lws>-<group>-<worker>``), its
#: headless Service and Kueue's per-group Workload names.
LWS_NAME_MAX = 39
#: The restart policy of every group: one pod failing recreates the whole group.
RESTART_POLICY = "RecreateGroupOnPodRestart"


def group_set_name(workload_name: str) -> str:
    """The name of a Workload's LeaderWorkerSet (and of the headless Service LWS makes).

    Not the engine Service's name: LWS makes a headless Service named after the set.
    """
    return child_name(dns_label(workload_name), "-lws", limit=LWS_NAME_MAX)


def leader_selector(workload_name: str) -> dict[str, str]:
    """The labels selecting the leaders of a Workload's groups (the Service's selector)."""
    return {**workload_selector(workload_name), LWS_WORKER_INDEX_LABEL: LEADER_INDEX}


def _check(spec: WorkloadSpec) -> None:
    if spec.endpoint is not None:
        raise ManifestError(
            "The Workload has spec.endpoint: it is served elsewhere, so it has no engine."
        )
    if spec.nodes < 2:
        raise ManifestError(
            f"spec.nodes is {spec.nodes}: a Workload on one node is a Deployment, not a "
            "LeaderWorkerSet."
        )


def _template(
    pod_spec: dict[str, Any],
    labels: Mapping[str, str],
    role: str,
    eas_spec: EngineArgsSetSpec | None,
    command: list[str],
    args: list[str],
    *,
    probes: bool,
) -> dict[str, Any]:
    spec = copy.deepcopy(pod_spec)
    container = spec["containers"][0]
    container["command"], container["args"] = command, args
    if not probes:
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            container.pop(probe, None)
    return {
        "metadata": {
            "labels": {**labels, LABEL_ROLE: role},
            "annotations": {ANNOTATION_ENGINE_ARGS_HASH: engine_args_hash(eas_spec)},
        },
        "spec": spec,
    }


def workload_leader_worker_set(
    name: str,
    namespace: str,
    spec: WorkloadSpec,
    eas_spec: EngineArgsSetSpec | None,
    settings: OperatorSettings,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The LeaderWorkerSet serving Workload ``name`` on ``spec.nodes`` nodes per replica.

    ``spec.replicas`` groups of ``spec.nodes`` pods; the leader runs the engine's OpenAI
    server with the probes, the workers join it. The Workload's Kueue labels go on the set
    and both pod templates (:func:`kyai.builders.queue.queue_labels`). The
    ``kyai.io/spec-hash`` annotation hashes the spec: a changed ``nodes`` or engine flag
    changes the templates, and LWS rolls the groups.

    Raises :class:`~kyai.builders.ManifestError` for an endpoint or a single node, and
    :class:`~kyai.engines.EngineArgsError` (:class:`~kyai.engines.ParallelismError` for
    parallel sizes that do not use the group's GPUs) for flags the group cannot run.
    """
    _check(spec)
    commands = engine_group_commands(spec, eas_spec, image=engine_image(spec, settings))
    queue = queue_labels(owner or {}, settings.default_queue_name)
    labels = {**workload_labels(name, spec), **queue}
    pod_spec = engine_pod_spec(spec, eas_spec, settings)
    leader = _template(
        pod_spec, labels, "leader", eas_spec,
        commands.leader.command, commands.leader.args, probes=True,
    )  # fmt: skip
    worker = _template(
        pod_spec, labels, "worker", eas_spec,
        commands.worker.command, commands.worker.args, probes=False,
    )  # fmt: skip
    lws_spec: dict[str, Any] = {
        "replicas": spec.replicas,
        "startupPolicy": "LeaderCreated",
        "rolloutStrategy": {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
        },
        "leaderWorkerTemplate": {
            "size": spec.nodes,
            "restartPolicy": RESTART_POLICY,
            "leaderTemplate": leader,
            "workerTemplate": worker,
        },
    }
    return hashed_object(
        LWS_API_VERSION,
        LWS_KIND,
        name=group_set_name(name),
        namespace=namespace,
        labels=labels,
        spec=lws_spec,
        owner=owner,
    )


def workload_leader_service(
    name: str,
    namespace: str,
    spec: WorkloadSpec,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ClusterIP Service in front of the leaders of Workload ``name``'s groups.

    Same name and port as the single-node Service (the Workload's endpoint stays); its
    selector adds the leader's ``worker-index`` label.
    """
    _check(spec)
    return workload_service(name, namespace, spec, owner, selector=leader_selector(name))


__all__ = [
    "LABEL_ROLE",
    "LWS_API_VERSION",
    "LWS_KIND",
    "LWS_NAME_LABEL",
    "LWS_WORKER_INDEX_LABEL",
    "group_set_name",
    "leader_selector",
    "workload_leader_service",
    "workload_leader_worker_set",
]
