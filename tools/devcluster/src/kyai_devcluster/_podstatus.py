"""A pod's run as the kubelet keeps it, and the pod statuses written from it.

:class:`PodRun` is what the kubelet tracks per pod (its task, container handles and
states, its address, the conditions' transition times); the functions build the status a
pod shows while it waits, runs, fails or has terminated, as a kubelet writes them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kyai_devcluster._runtime import Handle
from kyai_devcluster._store import meta, now_rfc3339

Obj = dict[str, Any]

__all__ = [
    "ContainerState",
    "PodRun",
    "base_status",
    "conditions",
    "container_status",
    "failed_status",
    "running_status",
    "stable_conditions",
    "terminated_status",
    "waiting_status",
]


@dataclass
class ContainerState:
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    restart_count: int = 0


@dataclass
class PodRun:
    uid: str
    namespace: str
    name: str
    task: asyncio.Task[None] | None = None
    handles: dict[str, Handle] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    killed: bool = False
    stopper: asyncio.Task[None] | None = None
    #: Rewrites the pod's projected ServiceAccount tokens (the kubelet's token manager).
    refresher: asyncio.Task[None] | None = None
    pod_ip: str = ""
    states: dict[str, ContainerState] = field(default_factory=dict)
    path_maps: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    transitions: dict[str, tuple[bool, str]] = field(default_factory=dict)

    def alive(self) -> bool:
        """Whether the pod has not been stopped (deleted or shut down)."""
        return not self.killed


def stable_conditions(run: PodRun, now: str, *, ready: bool) -> list[Obj]:
    """A long-running pod's conditions, each keeping its last transition time."""

    def condition(kind: str, ok: bool) -> Obj:
        previous = run.transitions.get(kind)
        if previous is None or previous[0] != ok:
            run.transitions[kind] = (ok, now)
        entry: Obj = {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": run.transitions[kind][1],
        }
        if not ok:
            entry["reason"] = "ContainersNotReady"
        return entry

    return [
        condition("PodReadyToStartContainers", True),
        condition("Initialized", True),
        condition("Ready", ready),
        condition("ContainersReady", ready),
        condition("PodScheduled", True),
    ]


def conditions(now: str, *, ready: bool, initialized: bool = True, reason: str = "") -> list[Obj]:
    """A pod's five conditions, all changed ``now``."""

    def condition(kind: str, ok: bool) -> Obj:
        entry: Obj = {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if not ok and reason:
            entry["reason"] = reason
        return entry

    return [
        condition("PodReadyToStartContainers", True),
        condition("Initialized", initialized),
        condition("Ready", ready),
        condition("ContainersReady", ready),
        condition("PodScheduled", True),
    ]


def container_status(container: Obj, state: Obj, *, ready: bool, pod: Obj) -> Obj:
    """One entry of ``containerStatuses``."""
    return {
        "name": container.get("name"),
        "image": container.get("image"),
        "imageID": "",
        "containerID": f"devcluster://{meta(pod)['uid']}/{container.get('name')}",
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }


def base_status(run: PodRun, pod: Obj) -> Obj:
    """The addresses, start time and QoS class every status of the pod carries."""
    status = pod.get("status") or {}
    address = run.pod_ip or "127.0.0.1"
    return {
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": address,
        "podIPs": [{"ip": address}],
        "startTime": status.get("startTime") or now_rfc3339(),
        "qosClass": status.get("qosClass", "BestEffort"),
    }


def running_status(run: PodRun, pod: Obj, *, ready: bool, init: bool = False) -> Obj:
    """Running (or Pending while init containers run)."""
    now = now_rfc3339()
    containers = (pod.get("spec") or {}).get("containers") or []
    if init:
        state: Obj = {"waiting": {"reason": "PodInitializing"}}
    else:
        state = {"running": {"startedAt": now}}
    status = base_status(run, pod)
    status.update(
        phase="Pending" if init else "Running",
        conditions=conditions(
            now, ready=ready and not init, initialized=not init, reason="ContainersNotReady"
        ),
        containerStatuses=[
            container_status(c, state, ready=ready and not init, pod=pod) for c in containers
        ],
    )
    return status


def waiting_status(run: PodRun, pod: Obj, reason: str, message: str) -> Obj:
    """Pending, every container waiting for ``reason``."""
    now = now_rfc3339()
    containers = (pod.get("spec") or {}).get("containers") or []
    status = base_status(run, pod)
    status.update(
        phase="Pending",
        conditions=conditions(now, ready=False, reason="ContainersNotReady"),
        containerStatuses=[
            container_status(
                c,
                {"waiting": {"reason": reason, "message": message}},
                ready=False,
                pod=pod,
            )
            for c in containers
        ],
    )
    return status


def failed_status(run: PodRun, pod: Obj, reason: str, message: str) -> Obj:
    """Failed before any container ran (e.g. an image that cannot run)."""
    status = waiting_status(run, pod, reason, message)
    status.update(phase="Failed", reason=reason, message=message)
    return status


def terminated_status(
    run: PodRun, pod: Obj, results: dict[str, Obj], succeeded: bool, started: str
) -> Obj:
    """Succeeded or Failed, with each container's exit (``results``, by name)."""
    now = now_rfc3339()
    spec = pod.get("spec") or {}
    status = base_status(run, pod)

    def state_of(container: Obj) -> Obj:
        result = results.get(str(container.get("name")))
        if result is None:
            return {"waiting": {"reason": "PodInitializing"}}
        return {"terminated": {"startedAt": started, "finishedAt": now, **result}}

    status.update(
        phase="Succeeded" if succeeded else "Failed",
        conditions=conditions(now, ready=False, reason="PodCompleted"),
        containerStatuses=[
            container_status(c, state_of(c), ready=False, pod=pod)
            for c in spec.get("containers") or []
        ],
    )
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [
            container_status(c, state_of(c), ready=False, pod=pod) for c in spec["initContainers"]
        ]
    return status
