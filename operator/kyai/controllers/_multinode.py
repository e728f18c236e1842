"""A Workload on several nodes (``spec.nodes`` > 1): its LeaderWorkerSet, read as one engine.

The Workload reconciler hands a multi-node Workload here. The order keeps a cluster without
LeaderWorkerSet untouched: the set is applied first, and a 404 for its resource (no CRD) says
so (``LeaderWorkerSetNotInstalled``, Stalled) before anything else is made or removed. Then a
single-node Deployment left from before goes (it holds GPUs the groups need), the Service
selects the leaders, and the set's ``readyReplicas`` (groups whose leader and workers are all
ready) stand for ready replicas: none ready is Deploying (a failed pod recreates its group,
so the Workload goes Deploying, then Ready again), one or more and the leader's
``/v1/models`` answering is Ready. Going back to one node removes the set
(:func:`remove_groups`).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Protocol

from kyai.api import EngineArgsSetSpec, WorkloadSpec, WorkloadStatus
from kyai.api.workload import WorkloadPhase
from kyai.builders import ManifestError
from kyai.builders.multinode import (
    LWS_API_VERSION,
    LWS_KIND,
    LWS_WORKER_INDEX_LABEL,
    group_set_name,
    workload_leader_service,
    workload_leader_worker_set,
)
from kyai.builders.workload import engine_name
from kyai.controllers import _conditions as c
from kyai.controllers._kube import KubeError
from kyai.controllers._services import Services
from kyai.controllers._status import StatusWriter
from kyai.engines import EngineArgsError, ParallelismError


class GroupHost(Protocol):
    """What the Workload reconciler lends this module: its object, writer and steps."""

    svc: Services
    name: str
    namespace: str
    body: dict[str, Any]
    eas_spec: EngineArgsSetSpec | None
    writer: StatusWriter

    async def set_status(
        self, phase: WorkloadPhase, reason: str, message: str, ready: bool, **fields: Any
    ) -> None: ...

    async def _apply(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    async def _why_not_available(self, spec: WorkloadSpec) -> tuple[str, str, WorkloadPhase]: ...

    async def _observe_engine(self, spec: WorkloadSpec, **ready: Any) -> None: ...


def served_by_groups(host: GroupHost) -> bool:
    """Whether the Workload's status shows groups (``readyGroups`` set, even to 0)."""
    seen = WorkloadStatus.model_validate(host.writer.status)
    return seen.ready_groups is not None


def not_installed_message(spec: WorkloadSpec) -> str:
    """Why a Workload on several nodes waits in a cluster without LeaderWorkerSet."""
    return (
        f"spec.nodes is {spec.nodes}: a Workload on several nodes is served by a "
        "LeaderWorkerSet (leaderworkersets.leaderworkerset.x-k8s.io/v1), and the cluster "
        "lacks LeaderWorkerSet (its CRD is not installed): install LeaderWorkerSet "
        "(https://lws.sigs.k8s.io) or set spec.nodes to 1"
    )


async def deploy_groups(host: GroupHost, spec: WorkloadSpec) -> None:
    """Apply the LeaderWorkerSet and the leaders' Service; observe once a group is ready."""
    try:
        group_set = workload_leader_worker_set(
            host.name, host.namespace, spec, host.eas_spec, host.svc.settings, host.body
        )
        service = workload_leader_service(host.name, host.namespace, spec, host.body)
    except ParallelismError as exc:
        await host.set_status("Failed", c.INVALID_SPEC, str(exc), False)
        return
    except (EngineArgsError, ManifestError) as exc:
        await host.set_status("Failed", c.ENGINE_ARGS_INVALID, str(exc), False)
        return
    try:
        current = await host._apply(group_set)
    except KubeError as exc:
        if exc.status != 404:
            raise
        await host.set_status("Pending", c.LEADER_WORKER_SET_NOT_INSTALLED,
                              not_installed_message(spec), False)  # fmt: skip
        return
    if not served_by_groups(host):
        # From one node to several: the Deployment's pods hold GPUs the groups need.
        await host.svc.kube.delete("Deployment", host.namespace, engine_name(host.name))
    await host._apply(service)
    ready = int((current.get("status") or {}).get("readyReplicas") or 0)
    if ready < 1:
        reason, message, phase = await host._why_not_available(spec)
        await host.set_status(
            phase,
            reason,
            message
            or f"waiting for the engine's groups to become ready ({ready}/{spec.replicas} "
            f"groups of {spec.nodes} pods ready, LeaderWorkerSet {group_set_name(host.name)}; "
            "model downloads can take many minutes)",
            False,
            ready_replicas=ready,
            ready_groups=ready,
        )
        return
    await host._observe_engine(spec, ready_replicas=ready, ready_groups=ready)


async def remove_groups(host: GroupHost) -> None:
    """From several nodes back to one: the set goes, the Service selects every engine pod.

    Only for a Workload whose status shows groups (``readyGroups`` set); afterwards it no
    longer does.
    """
    if not served_by_groups(host):
        return
    await host.svc.kube.delete(LWS_KIND, host.namespace, group_set_name(host.name))
    try:
        await host.svc.kube.patch(
            "Service",
            host.namespace,
            engine_name(host.name),
            {"spec": {"selector": {LWS_WORKER_INDEX_LABEL: None}}},
        )
    except KubeError as exc:
        if exc.status != 404:
            raise
    await host.writer.patch(WorkloadStatus(ready_groups=None))


# -- a cluster without LeaderWorkerSet, said once at start-up -----------------------------------

log = logging.getLogger(__name__)

#: The logger of kopf's warning that a watched resource does not exist in the cluster.
KOPF_OBSERVATION_LOGGER = "kopf._core.reactor.observation"
_UNRESOLVED = "Unresolved resources cannot be served"
_SELECTOR = re.compile(r"Selector\([^)]*\)")
_LWS_GROUP = LWS_API_VERSION.split("/", 1)[0]
#: What the operator says, once, where LeaderWorkerSet is not installed.
LWS_ABSENT = (
    "LeaderWorkerSet is not installed (no CRD leaderworkersets.leaderworkerset.x-k8s.io): "
    "multi-node serving (Workloads with spec.nodes > 1) is off until its CRDs are installed "
    "(https://lws.sigs.k8s.io)"
)


class LeaderWorkerSetAbsence(logging.Filter):
    """kopf's warning that LeaderWorkerSets cannot be watched, said once at INFO instead.

    LeaderWorkerSet is optional: without it only Workloads on several nodes cannot be served
    (they say so, ``LeaderWorkerSetNotInstalled``). kopf warns that the LeaderWorkerSet
    selector resolves to nothing at start-up and again at each rescan of the cluster's
    resources (any CRD added or removed). Attached to kopf's observation logger, this filter
    drops the LeaderWorkerSet part of that warning (the warning stays for any other
    resource) and logs :data:`LWS_ABSENT` at INFO the first time.
    """

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a warning about LeaderWorkerSets alone; others pass (without them)."""
        message = record.getMessage()
        if not message.startswith(_UNRESOLVED):
            return True
        selectors = _SELECTOR.findall(message)
        others = [selector for selector in selectors if f"'{_LWS_GROUP}'" not in selector]
        if len(others) == len(selectors):
            return True
        if not self.said:
            self.said = True
            log.info(LWS_ABSENT)
        if not others:
            return False
        record.msg, record.args = f"{message.split(':', 1)[0]}: {', '.join(others)}", ()
        return True


def say_once_without_leader_worker_set() -> None:
    """Attach :class:`LeaderWorkerSetAbsence` to kopf's observation logger (once)."""
    logger = logging.getLogger(KOPF_OBSERVATION_LOGGER)
    if not any(isinstance(f, LeaderWorkerSetAbsence) for f in logger.filters):
        logger.addFilter(LeaderWorkerSetAbsence())


__all__ = [
    "LWS_ABSENT",
    "GroupHost",
    "LeaderWorkerSetAbsence",
    "deploy_groups",
    "not_installed_message",
    "remove_groups",
    "say_once_without_leader_worker_set",
]
