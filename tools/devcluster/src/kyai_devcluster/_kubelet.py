"""The simulated kubelet: pods run as local processes or as podman containers.

Which image runs how (:meth:`Kubelet.plan_image`, :mod:`kyai_devcluster._images`): the
project's image and the stand-in image run as written (local processes, or containers of
``--image`` / ``--standin-image`` in podman when its store lacks them); a serving engine's
image runs the engine stand-in ``python -m kyai_testing.engines <command and args>`` (in
podman, in a container of the stand-in image) with ``KYAI_DEVCLUSTER_POD_IP`` and
``KYAI_DEVCLUSTER_IMAGE`` (the image the container names, whose version the stand-in
imitates) set, or the command its image pattern maps to in ``engine_commands`` (a real
engine); any
other image cannot be pulled: the pod waits with ``ErrImagePull`` then ``ImagePullBackOff``
as on a real node (podman: until the image appears in its store). Exception kept from
earlier versions: a *Job* pod of another image in the ``process`` runtime fails at once with
reason ``UnsupportedImage``.

Process containers get:

* the command and args as written (``$(VAR)`` references expanded), or the image's
  entrypoint (``kyai``) followed by the args when there is no command;
* the container's ``env`` and ``envFrom`` with ``valueFrom`` secrets, config maps and pod
  fields resolved; ``PATH`` starting with this Python environment's ``bin`` directory, so
  ``kyai`` is this environment's console script; ``KUBECONFIG`` pointing at the
  devcluster with the pod's service-account token (or the admin one when the devcluster
  has no token key) and the pod's namespace as the current namespace;
* every volume mapped to a directory under the workdir (``emptyDir``, ``configMap`` and
  ``secret`` per pod; ``persistentVolumeClaim`` per claim, so a later pod sees what an
  earlier one wrote). A process cannot see a directory at the ``mountPath`` itself, so mount
  paths in the command, args, env values and ``workingDir`` are rewritten to the mapped
  directories, and ``KYAI_DEVCLUSTER_VOLUMES`` holds the mapping as JSON.

Podman containers get the same volumes bind-mounted at their mount paths (``emptyDir`` with
``medium: Memory`` under ``/dev/shm``), the pod's security context, the projected
service-account token under ``/var/run/secrets/kubernetes.io/serviceaccount`` and
``KUBERNETES_SERVICE_HOST``/``PORT`` pointing at the devcluster's HTTPS listener.

Every pod gets its own loopback address (``status.podIP``). Job pods (restart policy
``Never``/``OnFailure``) run once; long-running pods (``Always``) are restarted with a
back-off when a container ends and run their startup, readiness and liveness probes: the
pod is Ready only while its readiness probes pass. Output goes to one log file per container,
read by ``kubectl logs``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kyai_devcluster import _podstatus
from kyai_devcluster._builtins import NODE_NAME
from kyai_devcluster._controllers import (
    PODS,
    SERVICE_ACCOUNTS,
    UNSUPPORTED_IMAGE,
    record_event,
)
from kyai_devcluster._images import (
    DEFAULT_ENTRYPOINT,
    DEFAULT_LOCAL_IMAGES,
    DEFAULT_PROJECT_IMAGE,
    DEFAULT_STANDIN_IMAGE,
    DEFAULT_STANDIN_IMAGES,
    ENGINE_IMAGES,
    ENGINE_STANDIN_MODULE,
    ImageKind,
    ImagePlan,
)
from kyai_devcluster._network import HOSTS_VARIABLE, POD_NETWORK, SHIM_DIR, AddressPool
from kyai_devcluster._podstatus import ContainerState, PodRun
from kyai_devcluster._probes import ProbeTiming, run_probe
from kyai_devcluster._runtime import (
    EntryFunction,
    Exit,
    Handle,
    Launch,
    Mount,
    ProcessRuntime,
    Runtime,
    StartError,
    parse_quantity,
)
from kyai_devcluster._selectors import field_value
from kyai_devcluster._store import Event, Store, meta, now_rfc3339
from kyai_devcluster._tokens import (
    API_AUDIENCES,
    EXTENDED_EXPIRATION_SECONDS,
    BoundObject,
    issue,
)

Obj = dict[str, Any]
logger = logging.getLogger("kyai_devcluster")

#: Host variables a pod process inherits (anything else comes from the pod spec).
PASSED_ENVIRONMENT: tuple[str, ...] = ("LANG", "LC_ALL", "TZ", "SYSTEMROOT")
#: Where Kubernetes projects the service-account token.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
POD_IP_VARIABLE = "KYAI_DEVCLUSTER_POD_IP"
#: The log of a container's instance before its last restart (``GET .../log?previous=true``).
PREVIOUS_LOG_SUFFIX = ".previous.log"
#: The image an engine container names, given to the engine stand-in that runs for it.
ENGINE_IMAGE_VARIABLE = "KYAI_DEVCLUSTER_IMAGE"
#: What the NVIDIA device plugin (envvar strategy) gives a container: its GPUs' UUIDs.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_VARIABLE = "NVIDIA_VISIBLE_DEVICES"
#: Where containers see the name and bind shim (on their PYTHONPATH).
CONTAINER_SHIM_DIR = "/var/run/kyai-devcluster/shim"
#: Restart back-off of long-running containers: first delay, doubling up to the cap.
RESTART_BACKOFF = (0.5, 10.0)
#: How often a pod waiting for an image checks again.
IMAGE_RECHECK_SECONDS = 2.0
#: Part of a projected token's lifetime after which the kubelet writes a fresh one.
TOKEN_REFRESH_FRACTION = 0.8
#: Bytes of log a failed container's termination message falls back to.
FALLBACK_LOG_BYTES = 2048
FALLBACK_LOG_LINES = 80

_VAR_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")

RuntimeName = Literal["process", "podman"]


class ContainerConfigError(Exception):
    """A pod cannot start yet: a referenced config map, secret or claim is missing."""


@dataclass(frozen=True)
class _TokenFile:
    """A projected ServiceAccount token the kubelet keeps fresh."""

    path: Path
    audiences: tuple[str, ...]
    expiration_seconds: int
    mode: int


@dataclass
class _PodContext:
    pod: Obj
    volumes: dict[str, Mount]
    environments: dict[str, dict[str, str]]
    plans: dict[str, tuple[ImageKind, str]]
    service_account: Path | None


def expand_references(text: str, env: dict[str, str]) -> str:
    """Expand ``$(VAR)`` as the kubelet does; ``$$`` is a literal ``$``; unknown stay as is."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_RE.sub(replace, text)


def rewrite_mounts(text: str, mounts: Sequence[tuple[str, str]]) -> str:
    """Replace mount paths (at path boundaries) with their mapped host directories.

    One pass over the text, longest mount path first: a host directory put in place of one
    mount (say under /tmp) is never rewritten again by another mount (at /tmp).
    """
    if not mounts:
        return text
    targets = {mount_path.rstrip("/") or "/": host_dir for mount_path, host_dir in mounts}
    ordered = sorted(targets, key=len, reverse=True)
    pattern = re.compile(
        r"(?<![\w./-])(" + "|".join(re.escape(path) for path in ordered) + r")(?=/|$|[^\w.-])"
    )
    return pattern.sub(lambda match: targets[match.group(1)], text)


#: Variables the kubelet sets to host paths; mount-path rewriting leaves them alone.
KUBELET_ENVIRONMENT = frozenset(
    {
        "KUBECONFIG",
        "PATH",
        "HOME",
        "TMPDIR",
        "PYTHONPATH",
        HOSTS_VARIABLE,
        "KYAI_DEVCLUSTER_VOLUMES",
        *PASSED_ENVIRONMENT,
    }
)


def _merged_security(pod: Obj, container: Obj) -> Obj:
    pod_level = (pod.get("spec") or {}).get("securityContext") or {}
    merged = {
        key: pod_level[key]
        for key in ("runAsUser", "runAsGroup", "runAsNonRoot")
        if key in pod_level
    }
    merged.update(container.get("securityContext") or {})
    return merged


class Kubelet:
    """Runs pods (processes or containers), probes them, stops deleted ones, serves logs."""

    def __init__(
        self,
        store: Store,
        *,
        workdir: Path,
        local_images: Sequence[str] = DEFAULT_LOCAL_IMAGES,
        entrypoint: Sequence[str] = DEFAULT_ENTRYPOINT,
        kubeconfig_for: Callable[..., Path],
        claim_dir: Callable[[str, str], Path],
        kill_grace_seconds: float = 2.0,
        runtime: Runtime | None = None,
        token_key: bytes | None = None,
        engine_images: Sequence[str] = ENGINE_IMAGES,
        project_image: str = DEFAULT_PROJECT_IMAGE,
        standin_image: str = DEFAULT_STANDIN_IMAGE,
        standin_images: Sequence[str] = DEFAULT_STANDIN_IMAGES,
        hosts_path: Path | None = None,
        ca_file: Path | None = None,
        max_probe_period: float | None = 1.0,
        restart_backoff: tuple[float, float] = RESTART_BACKOFF,
        engine_command: Sequence[str] | None = None,
        entrypoint_function: EntryFunction | None = None,
        engine_commands: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.store = store
        self.workdir = workdir
        self.images = ImagePlan(
            local_images=tuple(local_images),
            engine_images=tuple(engine_images),
            standin_images=tuple(standin_images),
            project_image=project_image,
            standin_image=standin_image,
            engine_commands=tuple(
                (pattern, tuple(command)) for pattern, command in (engine_commands or {}).items()
            ),
        )
        self.entrypoint = tuple(entrypoint)
        self.kill_grace_seconds = kill_grace_seconds
        self.runtime: Runtime = runtime or ProcessRuntime()
        self.token_key = token_key
        self.hosts_path = hosts_path
        self.ca_file = ca_file
        self.max_probe_period = max_probe_period
        self.restart_backoff = restart_backoff
        #: What an engine image runs, followed by the container's command and args (an
        #: image matching an ``engine_commands`` pattern runs that pattern's command).
        self.engine_command = tuple(engine_command) if engine_command else None
        #: Runs in place of ``entrypoint`` (process runtime) inside the event loop.
        self.entrypoint_function = entrypoint_function
        #: ``(host, port)`` of the API server's HTTPS listener (set by the devcluster).
        self.service_endpoint: tuple[str, int] | None = None
        #: Seconds after which projected ServiceAccount tokens are rewritten (None: at
        #: :data:`TOKEN_REFRESH_FRACTION` of their lifetime, as the kubelet does); tests
        #: shorten it to see a rotation.
        self.token_refresh_seconds: float | None = None
        self._token_files: dict[str, list[_TokenFile]] = {}
        self.pod_addresses = AddressPool(POD_NETWORK)
        self._kubeconfig_for = kubeconfig_for
        self._claim_dir = claim_dir
        self._runs: dict[str, PodRun] = {}
        #: Pods held back by scheduling gates (uid -> (namespace, name)): not bound, not run.
        self._gated: dict[str, tuple[str, str]] = {}
        self._closed = False

    # -- paths ------------------------------------------------------------------------------

    def pod_dir(self, namespace: str, name: str) -> Path:
        """The directory of one pod (its emptyDir volumes, home and logs)."""
        return self.workdir / "pods" / namespace / name

    def log_file(
        self, namespace: str, pod: str, container: str, *, previous: bool = False
    ) -> Path | None:
        """The log file of one container.

        ``previous``: of its instance before the last restart, as the kubelet keeps it.
        """
        suffix = PREVIOUS_LOG_SUFFIX if previous else ".log"
        path = self.pod_dir(namespace, pod) / "logs" / f"{container}{suffix}"
        return path if path.exists() else None

    def is_running(self, namespace: str, pod: str, container: str) -> bool:
        """Whether the container's process is running."""
        return any(
            run.namespace == namespace and run.name == pod and container in run.running
            for run in self._runs.values()
        )

    def is_local(self, image: str) -> bool:
        """Whether an image is the project's own or the stand-ins' (runs as written)."""
        return self.images.is_local(image)

    def is_engine(self, image: str) -> bool:
        """Whether an image is a serving engine's (runs the engine stand-in)."""
        return self.images.is_engine(image)

    async def plan_image(self, image: str) -> tuple[ImageKind, str]:
        """How an image runs: ``(kind, image to run)``; see :mod:`kyai_devcluster._images`."""
        return await self.images.plan(
            image, runtime=self.runtime.name, present=self.runtime.image_present
        )

    # -- events -----------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Store listener: start new pods, stop deleted ones."""
        if event.group_resource != PODS or self._closed:
            return
        uid = meta(event.obj).get("uid", "")
        gates = (event.obj.get("spec") or {}).get("schedulingGates")
        if event.type == "ADDED" and gates:
            self._gated[uid] = (meta(event.obj)["namespace"], meta(event.obj)["name"])
            asyncio.get_running_loop().call_soon(self._hold, uid)
            return
        if uid in self._gated:
            if event.type == "DELETED" or meta(event.obj).get("deletionTimestamp"):
                del self._gated[uid]
                return
            if gates:
                return
            del self._gated[uid]
            asyncio.get_running_loop().call_soon(self._bind, uid, meta(event.obj)["name"])
            return
        if event.type == "ADDED":
            run = PodRun(uid, meta(event.obj)["namespace"], meta(event.obj)["name"])
            self._runs[uid] = run
            run.task = asyncio.get_running_loop().create_task(
                self._run_pod(run), name=f"devcluster-pod-{run.namespace}/{run.name}"
            )
        elif event.type == "DELETED" or meta(event.obj).get("deletionTimestamp"):
            stopping = self._runs.get(uid)
            if stopping is not None and not stopping.killed:
                stopping.killed = True
                stopping.stopper = asyncio.get_running_loop().create_task(
                    self._stop_run(stopping, remove=event.type == "DELETED")
                )

    def _hold(self, uid: str) -> None:
        """A gated pod: Pending, PodScheduled False (SchedulingGated), as the scheduler says."""
        where = self._gated.get(uid)
        if where is None or self._closed:
            return
        pods = self.store.type_for(*PODS)
        pod = self.store.find(pods, *where)
        if pod is None or meta(pod).get("uid") != uid:
            return
        status = dict(pod.get("status") or {})
        status["phase"] = "Pending"
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
            }
        ]
        self.store.write_status(pods, pod, status)

    def _bind(self, uid: str, name: str) -> None:
        """The gates are gone: bind the pod to the node (the kubelet then starts it)."""
        if self._closed:
            return
        pods = self.store.type_for(*PODS)
        located = self.store.by_uid(uid)
        if located is None or meta(located[1]).get("deletionTimestamp"):
            return
        pod = located[1]
        updated = copy.deepcopy(pod)
        updated.setdefault("spec", {})["nodeName"] = NODE_NAME
        updated.setdefault("status", {})["conditions"] = [
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") != "PodScheduled"
        ]
        self.store.write_status(pods, pod, updated["status"])
        current = self.store.find(pods, meta(pod).get("namespace"), name) or pod
        bound = copy.deepcopy(current)
        bound["spec"]["nodeName"] = NODE_NAME
        self.store.write_spec(pods, current, bound)
        run = PodRun(uid, meta(pod)["namespace"], name)
        self._runs[uid] = run
        run.task = asyncio.get_running_loop().create_task(
            self._run_pod(run), name=f"devcluster-pod-{run.namespace}/{run.name}"
        )

    async def close(self) -> None:
        """Kill every process and wait for the pod tasks (shutdown)."""
        self._closed = True
        runs = list(self._runs.values())
        stoppers = [run.stopper for run in runs if run.stopper is not None]
        fresh = [run for run in runs if run.stopper is None]
        for run in fresh:
            run.killed = True
        await asyncio.gather(*stoppers, *(self._stop_run(run, remove=False) for run in fresh))
        self.pod_addresses.close()

    async def _stop_run(self, run: PodRun, *, remove: bool) -> None:
        await self._kill(run)
        if run.task is not None:
            run.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run.task
        await self._kill(run)  # a container started while the first kill ran
        self._runs.pop(run.uid, None)
        self.pod_addresses.release(run.uid)
        # Memory-backed volumes live outside the workdir: never leave them behind.
        shutil.rmtree(self._memory_dir(run), ignore_errors=True)
        if self.runtime.name == "process":
            shutil.rmtree(self._temp_dir(run), ignore_errors=True)
        # A pod of the same name may run already (a StatefulSet's or LeaderWorkerSet's pod
        # recreated as soon as the old one left the store): its directory is the same one.
        successor = any(
            other.namespace == run.namespace and other.name == run.name
            for other in self._runs.values()
        )
        if remove and not successor:
            shutil.rmtree(self.pod_dir(run.namespace, run.name), ignore_errors=True)

    async def _kill(self, run: PodRun) -> None:
        await asyncio.gather(
            *(handle.stop(self.kill_grace_seconds) for handle in list(run.handles.values()))
        )

    # -- pod lifecycle ----------------------------------------------------------------------

    def _current(self, run: PodRun) -> Obj | None:
        pod = self.store.find(self.store.type_for(*PODS), run.namespace, run.name)
        if pod is None or meta(pod).get("uid") != run.uid:
            return None
        return pod

    def _set_status(self, run: PodRun, status: Obj) -> None:
        pod = self._current(run)
        if pod is not None and not run.killed:
            merged = {**(pod.get("status") or {}), **status}
            self.store.write_status(self.store.type_for(*PODS), pod, merged)

    async def _run_pod(self, run: PodRun) -> None:
        try:
            await self._lifecycle(run)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("pod %s/%s failed in the simulated kubelet", run.namespace, run.name)
        finally:
            self._token_files.pop(run.uid, None)
            if run.refresher is not None:
                run.refresher.cancel()

    async def _lifecycle(self, run: PodRun) -> None:
        await asyncio.sleep(0)
        pod = self._current(run)
        if pod is None:
            return
        run.pod_ip = self.pod_addresses.allocate(run.uid)
        spec = pod.get("spec") or {}
        containers = list(spec.get("containers") or [])
        init_containers = list(spec.get("initContainers") or [])
        batch = spec.get("restartPolicy") in {"Never", "OnFailure"}
        plans = await self._wait_for_images(run, pod, init_containers + containers, batch)
        if plans is None:
            return
        context: _PodContext | None = None
        while context is None:
            pod = self._current(run)
            if pod is None or run.killed:
                return
            try:
                context = self._prepare(run, pod, init_containers + containers, plans)
            except ContainerConfigError as error:
                self._set_status(
                    run,
                    _podstatus.waiting_status(run, pod, "CreateContainerConfigError", str(error)),
                )
                await asyncio.sleep(0.5)
        if self._token_files.get(run.uid):
            run.refresher = asyncio.get_running_loop().create_task(
                self._refresh_tokens(run), name=f"devcluster-tokens-{run.namespace}/{run.name}"
            )
        started = now_rfc3339()
        self._set_status(
            run,
            _podstatus.running_status(
                run, pod, ready=not init_containers, init=bool(init_containers)
            ),
        )
        results: dict[str, Obj] = {}
        for container in init_containers:
            name = str(container.get("name"))
            results[name] = await self._run_once(run, context, container)
            if results[name]["exitCode"] != 0:
                break
        else:
            if not batch:
                await self._serve(run, context, containers)
                return
            self._set_status(run, _podstatus.running_status(run, pod, ready=True))
            outcomes = await asyncio.gather(*(self._run_once(run, context, c) for c in containers))
            results.update(
                {
                    str(c.get("name")): outcome
                    for c, outcome in zip(containers, outcomes, strict=True)
                }
            )
        if not run.alive():
            return
        succeeded = all(result["exitCode"] == 0 for result in results.values()) and all(
            str(c.get("name")) in results for c in containers
        )
        self._set_status(run, _podstatus.terminated_status(run, pod, results, succeeded, started))

    async def _wait_for_images(
        self, run: PodRun, pod: Obj, containers: list[Obj], batch: bool
    ) -> dict[str, tuple[ImageKind, str]] | None:
        """Plans per container, once every image can run; None when the pod went away."""
        attempts = 0
        while True:
            plans = {
                str(c.get("name")): await self.plan_image(str(c.get("image", "")))
                for c in containers
            }
            absent = [c for c in containers if plans[str(c.get("name"))][0] == "missing"]
            missing = [str(c.get("image", "")) for c in absent]
            if not missing:
                return plans
            never = [c for c in absent if c.get("imagePullPolicy") == "Never"]
            if batch and self.runtime.name == "process":
                message = (
                    f'image "{missing[0]}" is not one of the devcluster\'s local images '
                    f"({', '.join(self.images.local_images)}) nor a serving engine's; "
                    "only those run"
                )
                self._set_status(
                    run, _podstatus.failed_status(run, pod, UNSUPPORTED_IMAGE, message)
                )
                return None
            if never:  # the kubelet does not even try: the same reason every time
                reason = "ErrImageNeverPull"
                image = str(never[0].get("image", ""))
                message = f'Container image "{image}" is not present with pull policy of Never'
            elif attempts == 0:
                reason = "ErrImagePull"
                hint = (
                    "build or load it into podman's store"
                    if self.runtime.name == "podman"
                    else "only the project's image and serving engines' images run"
                )
                message = (
                    f'Failed to pull image "{missing[0]}": the devcluster does not pull images '
                    f"({self.runtime.name} runtime: {hint})"
                )
            else:
                reason = "ImagePullBackOff"
                message = f'Back-off pulling image "{missing[0]}"'
            self._set_status(run, _podstatus.waiting_status(run, pod, reason, message))
            if attempts == 0:
                self._event(run, "Warning", "Failed", message)
                self._event(run, "Warning", "Failed", f"Error: {reason}")
            attempts += 1
            if self.runtime.name == "process":
                await asyncio.sleep(IMAGE_RECHECK_SECONDS)
                if attempts > 1:
                    await asyncio.Event().wait()  # never appears: wait to be deleted
            else:
                await asyncio.sleep(IMAGE_RECHECK_SECONDS)
            current = self._current(run)
            if current is None or run.killed:
                return None
            pod = current

    def _prepare(
        self,
        run: PodRun,
        pod: Obj,
        containers: list[Obj],
        plans: dict[str, tuple[ImageKind, str]],
    ) -> _PodContext:
        self._token_files[run.uid] = []
        volumes = self._volumes(run, pod)
        service_account = self._service_account(run, pod)
        environments = {
            str(c.get("name")): self._environment(run, pod, c, service_account) for c in containers
        }
        return _PodContext(pod, volumes, environments, plans, service_account)

    # -- long-running pods ------------------------------------------------------------------

    async def _serve(self, run: PodRun, context: _PodContext, containers: list[Obj]) -> None:
        for container in containers:
            run.states[str(container.get("name"))] = ContainerState()
        self._publish(run)
        await asyncio.gather(*(self._supervise(run, context, c) for c in containers))

    async def _supervise(self, run: PodRun, context: _PodContext, container: Obj) -> None:
        name = str(container.get("name"))
        state = run.states[name]
        delay, cap = self.restart_backoff
        while run.alive():
            launch = self._launch(run, context, container)
            started = now_rfc3339()
            try:
                handle = await self.runtime.start(launch)
            except StartError as error:
                exit_info: Obj = {"exitCode": 128, "reason": "StartError", "message": str(error)}
            else:
                run.handles[name] = handle
                run.running.add(name)
                state.state = {"running": {"startedAt": started}}
                state.started = False
                state.ready = False
                self._publish(run)
                probes = asyncio.get_running_loop().create_task(
                    self._probe_container(run, container, state, handle)
                )
                try:
                    ended = await handle.wait()
                finally:
                    probes.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await probes
                    run.running.discard(name)
                exit_info = self._exit_info(ended, launch, container)
            if not run.alive():
                return
            state.ready = False
            state.started = False
            state.last_state = {
                "terminated": {
                    "startedAt": started,
                    "finishedAt": now_rfc3339(),
                    "containerID": f"devcluster://{run.uid}/{name}",
                    **exit_info,
                }
            }
            state.restart_count += 1
            self._event(run, "Warning", "BackOff", "Back-off restarting failed container")
            state.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={name} "
                    f"pod={run.name}_{run.namespace}({run.uid})",
                }
            }
            self._publish(run)
            await asyncio.sleep(delay)
            delay = min(delay * 2, cap)

    async def _probe_container(
        self, run: PodRun, container: Obj, state: ContainerState, handle: Handle
    ) -> None:
        startup = container.get("startupProbe")
        if startup:
            passed = await self._probe_until(run, container, handle, startup, want=True)
            if not passed:
                self._event(run, "Warning", "Unhealthy", "Startup probe failed")
                await handle.stop(self.kill_grace_seconds)
                return
        state.started = True
        readiness = container.get("readinessProbe")
        if not readiness:
            state.ready = True
        self._publish(run)
        tasks = []
        if readiness:
            tasks.append(self._readiness(run, container, state, handle, readiness))
        liveness = container.get("livenessProbe")
        if liveness:
            tasks.append(self._liveness(run, container, handle, liveness))
        await asyncio.gather(*tasks)

    async def _probe_until(
        self, run: PodRun, container: Obj, handle: Handle, probe: Obj, *, want: bool
    ) -> bool:
        """Probe until it passes ``successThreshold`` times (True) or fails enough (False)."""
        timing = ProbeTiming.of(probe, max_period=self.max_probe_period)
        await asyncio.sleep(timing.initial_delay)
        successes = failures = 0
        while handle.running():
            ok, _ = await self._probe(run, container, handle, probe, timing)
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if successes >= timing.success_threshold:
                return True
            if failures >= timing.failure_threshold:
                return False
            await asyncio.sleep(timing.period)
        return False

    async def _probe(
        self, run: PodRun, container: Obj, handle: Handle, probe: Obj, timing: ProbeTiming
    ) -> tuple[bool, str]:
        pairs = run.path_maps.get(str(container.get("name")))
        if "exec" in probe and pairs:
            # A local process sees host paths: rewrite mount paths in the probe's command.
            command = [
                rewrite_mounts(str(part), pairs) for part in probe["exec"].get("command") or []
            ]
            probe = {**probe, "exec": {"command": command}}
        return await run_probe(
            probe, container=container, pod_ip=run.pod_ip, handle=handle, timeout=timing.timeout
        )

    async def _readiness(
        self, run: PodRun, container: Obj, state: ContainerState, handle: Handle, probe: Obj
    ) -> None:
        timing = ProbeTiming.of(probe, max_period=self.max_probe_period)
        await asyncio.sleep(timing.initial_delay)
        successes = failures = 0
        while handle.running() and run.alive():
            ok, _ = await self._probe(run, container, handle, probe, timing)
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if not state.ready and successes >= timing.success_threshold:
                state.ready = True
                self._publish(run)
            elif state.ready and failures >= timing.failure_threshold:
                state.ready = False
                self._publish(run)
            await asyncio.sleep(timing.period)

    async def _liveness(self, run: PodRun, container: Obj, handle: Handle, probe: Obj) -> None:
        timing = ProbeTiming.of(probe, max_period=self.max_probe_period)
        await asyncio.sleep(timing.initial_delay)
        failures = 0
        while handle.running() and run.alive():
            ok, message = await self._probe(run, container, handle, probe, timing)
            failures = 0 if ok else failures + 1
            if failures >= timing.failure_threshold:
                self._event(run, "Warning", "Unhealthy", f"Liveness probe failed: {message}")
                await handle.stop(self.kill_grace_seconds)
                return
            await asyncio.sleep(timing.period)

    def _event(self, run: PodRun, kind: str, reason: str, message: str) -> None:
        pod = self._current(run)
        if pod is not None:
            with contextlib.suppress(Exception):
                record_event(self.store, pod, kind, reason, message)

    def _publish(self, run: PodRun) -> None:
        """Write a long-running pod's status from its containers' states."""
        pod = self._current(run)
        if pod is None or run.killed:
            return
        now = now_rfc3339()
        containers = (pod.get("spec") or {}).get("containers") or []
        statuses = []
        for container in containers:
            state = run.states.get(str(container.get("name"))) or ContainerState()
            entry = _podstatus.container_status(container, state.state, ready=state.ready, pod=pod)
            entry["started"] = state.started
            entry["restartCount"] = state.restart_count
            if state.last_state:
                entry["lastState"] = state.last_state
            statuses.append(entry)
        ready = bool(statuses) and all(s["ready"] for s in statuses)
        status = _podstatus.base_status(run, pod)
        status.update(
            phase="Running",
            conditions=_podstatus.stable_conditions(run, now, ready=ready),
            containerStatuses=statuses,
        )
        self._set_status(run, status)

    # -- volumes, service account and environment -------------------------------------------

    def _lookup(self, plural: str, namespace: str, name: str) -> Obj | None:
        return self.store.find(self.store.type_for("", plural), namespace, name)

    def _temp_dir(self, run: PodRun) -> Path:
        """A process pod's own ``TMPDIR``: short, as a container's ``/tmp`` is.

        Unix socket paths hold at most 107 bytes: vLLM binds its engine's ZMQ sockets at
        ``$TMPDIR/<uuid>``, which a directory under a test's workdir would overrun.
        """
        return Path(tempfile.gettempdir()) / f"kyai-pod-{run.uid.replace('-', '')[:12]}"

    def _memory_dir(self, run: PodRun) -> Path:
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.workdir / "shm"
        return base / f"kyai-devcluster-{run.uid}"

    def _volumes(self, run: PodRun, pod: Obj) -> dict[str, Mount]:
        namespace, name = meta(pod)["namespace"], meta(pod)["name"]
        base = self.pod_dir(namespace, name) / "volumes"
        mapped: dict[str, Mount] = {}
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            volume_name = str(volume.get("name"))
            if "persistentVolumeClaim" in volume:
                claim = str(volume["persistentVolumeClaim"].get("claimName", ""))
                if self._lookup("persistentvolumeclaims", namespace, claim) is None:
                    raise ContainerConfigError(f'persistentvolumeclaim "{claim}" not found')
                target = self._claim_dir(namespace, claim)
                target.chmod(0o777)
                read_only = bool(volume["persistentVolumeClaim"].get("readOnly"))
                mapped[volume_name] = Mount("", str(target), read_only=read_only)
            elif "hostPath" in volume:
                path = str(volume["hostPath"].get("path", "/"))
                mapped[volume_name] = Mount("", path)
            elif (volume.get("emptyDir") or {}).get("medium") == "Memory":
                target = self._memory_dir(run) / volume_name
                target.mkdir(parents=True, exist_ok=True)
                target.chmod(0o1777)
                mapped[volume_name] = Mount("", str(target))
            else:
                target = base / volume_name
                target.mkdir(parents=True, exist_ok=True)
                read_only = False
                if "configMap" in volume:
                    self._project(target, volume["configMap"], "configmaps", namespace)
                    read_only = True
                elif "secret" in volume:
                    self._project(target, volume["secret"], "secrets", namespace)
                    read_only = True
                elif "projected" in volume:
                    self._projected(run, pod, target, volume["projected"] or {})
                    read_only = True
                else:
                    target.chmod(0o1777)
                mapped[volume_name] = Mount("", str(target), read_only=read_only)
        return mapped

    def _project(self, target: Path, source: Obj, plural: str, namespace: str) -> None:
        files = self._source_files(source, plural, namespace)
        mode = int(source.get("defaultMode") or 0o644)
        target.chmod(0o755)
        for relative, content in files.items():
            _write_file(target / relative, content, mode)

    def _source_files(self, source: Obj, plural: str, namespace: str) -> dict[str, bytes]:
        """The files a secret or config map source projects (none when optional and absent)."""
        name = str(source.get("name") or source.get("secretName") or "")
        obj = self._lookup(plural, namespace, name)
        if obj is None:
            if source.get("optional"):
                return {}
            raise ContainerConfigError(f'{plural[:-1]} "{name}" not found')
        data = self._data(obj, plural)
        items = source.get("items")
        if not items:
            return dict(data)
        return {
            str(item.get("path")): data[str(item.get("key"))]
            for item in items
            if str(item.get("key")) in data
        }

    def _projected(self, run: PodRun, pod: Obj, target: Path, projected: Obj) -> None:
        """A ``projected`` volume: ServiceAccount tokens, secrets, config maps, downward API.

        ``serviceAccountToken`` sources get a token of the pod's ServiceAccount bound to the
        pod, for their audience (none: the API server's) and ``expirationSeconds``, rewritten
        by :meth:`_refresh_tokens`. ``clusterTrustBundle`` sources are skipped.
        """
        namespace = meta(pod)["namespace"]
        mode = int(projected.get("defaultMode") or 0o644)
        target.chmod(0o755)
        files: dict[str, bytes] = {}
        for source in projected.get("sources") or []:
            if not isinstance(source, dict):
                continue
            if isinstance(source.get("serviceAccountToken"), dict) and self.token_key is not None:
                wanted = source["serviceAccountToken"]
                audience = str(wanted.get("audience") or "")
                token = _TokenFile(
                    target / str(wanted.get("path") or "token"),
                    (audience,) if audience else API_AUDIENCES,
                    int(wanted.get("expirationSeconds") or 3600),
                    mode,
                )
                self._token_files.setdefault(run.uid, []).append(token)
                files[str(wanted.get("path") or "token")] = self._bound_token(pod, token).encode()
            for key, plural in (("secret", "secrets"), ("configMap", "configmaps")):
                if isinstance(source.get(key), dict):
                    files.update(self._source_files(source[key], plural, namespace))
            if isinstance(source.get("downwardAPI"), dict):
                for item in source["downwardAPI"].get("items") or []:
                    ref = {k: v for k, v in item.items() if k in ("fieldRef", "resourceFieldRef")}
                    value = self._value_from(run, pod, ref)
                    if value is not None:
                        files[str(item.get("path"))] = value.encode()
        for relative, content in files.items():
            _write_file(target / relative, content, mode)

    def _bound_token(self, pod: Obj, token: _TokenFile | None = None) -> str:
        """A token of the pod's ServiceAccount bound to the pod and the node.

        As the kubelet gets it with a TokenRequest. Without ``token``: the default in-pod
        token (a year, the API server's audience, as kube-apiserver extends the kubelet's
        one-hour tokens).
        """
        assert self.token_key is not None
        spec = pod.get("spec") or {}
        account = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")
        namespace = meta(pod)["namespace"]
        sa = self.store.find(self.store.type_for(*SERVICE_ACCOUNTS), namespace, account)
        node = self.store.find(self.store.type_for("", "nodes"), None, NODE_NAME)
        return issue(
            self.token_key,
            namespace,
            account,
            audiences=token.audiences if token is not None else API_AUDIENCES,
            expiration_seconds=(
                token.expiration_seconds if token is not None else EXTENDED_EXPIRATION_SECONDS
            ),
            service_account_uid=str(meta(sa).get("uid") or "") if sa is not None else "",
            pod=BoundObject(meta(pod)["name"], str(meta(pod).get("uid") or "")),
            node=BoundObject(NODE_NAME, str(meta(node).get("uid") or "") if node else ""),
        )

    async def _refresh_tokens(self, run: PodRun) -> None:
        """Rewrite the pod's projected tokens before 80 % of their lifetime has passed."""
        while run.alive():
            files = self._token_files.get(run.uid) or []
            if not files:
                return
            delay = self.token_refresh_seconds
            if delay is None:
                delay = TOKEN_REFRESH_FRACTION * min(f.expiration_seconds for f in files)
            await asyncio.sleep(delay)
            pod = self._current(run)
            if pod is None or not run.alive():
                return
            for token in files:
                _write_file(token.path, self._bound_token(pod, token).encode(), token.mode)

    def _service_account(self, run: PodRun, pod: Obj) -> Path | None:
        """Write the projected token files of the pod's service account; their directory."""
        spec = pod.get("spec") or {}
        account = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")
        namespace = meta(pod)["namespace"]
        if self.token_key is None:
            return None
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            sa = self.store.find(self.store.type_for(*SERVICE_ACCOUNTS), namespace, account)
            automount = (sa or {}).get("automountServiceAccountToken", True)
        if automount is False:
            return None
        target = self.pod_dir(namespace, run.name) / "serviceaccount"
        target.mkdir(parents=True, exist_ok=True)
        target.chmod(0o755)
        files = {"token": self._bound_token(pod), "namespace": namespace}
        if self.ca_file is not None and self.ca_file.exists():
            files["ca.crt"] = self.ca_file.read_text()
        for file_name, content in files.items():
            path = target / file_name
            path.write_text(content)
            path.chmod(0o644)
        return target

    @staticmethod
    def _data(obj: Obj, plural: str) -> dict[str, bytes]:
        data: dict[str, bytes] = {}
        if plural == "secrets":
            for key, value in (obj.get("data") or {}).items():
                data[key] = base64.b64decode(str(value))
            for key, value in (obj.get("stringData") or {}).items():
                data.setdefault(key, str(value).encode())
        else:
            for key, value in (obj.get("data") or {}).items():
                data[key] = str(value).encode()
            for key, value in (obj.get("binaryData") or {}).items():
                data[key] = base64.b64decode(str(value))
        return data

    def _value_from(self, run: PodRun, pod: Obj, source: Obj) -> str | None:
        namespace = meta(pod)["namespace"]
        for key, plural in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
            if key in source:
                ref = source[key]
                obj = self._lookup(plural, namespace, str(ref.get("name", "")))
                data = self._data(obj, plural) if obj is not None else None
                wanted = str(ref.get("key", ""))
                if data is None or wanted not in data:
                    if ref.get("optional"):
                        return None
                    what = "secret" if plural == "secrets" else "configmap"
                    if data is None:
                        raise ContainerConfigError(f'{what} "{ref.get("name")}" not found')
                    raise ContainerConfigError(
                        f"couldn't find key {wanted} in {what} {namespace}/{ref.get('name')}"
                    )
                return data[wanted].decode(errors="replace")
        if "fieldRef" in source:
            path = str(source["fieldRef"].get("fieldPath", ""))
            labels = re.match(r"metadata\.(labels|annotations)\['(.+)'\]$", path)
            if labels:
                return str((meta(pod).get(labels.group(1)) or {}).get(labels.group(2), ""))
            if path in {"status.podIP", "status.podIPs"}:
                return run.pod_ip
            if path in {"status.hostIP", "status.hostIPs"}:
                return "127.0.0.1"
            if path == "spec.serviceAccountName":
                spec = pod.get("spec") or {}
                return str(spec.get("serviceAccountName") or "default")
            return field_value(pod, path)
        if "resourceFieldRef" in source:
            return "0"
        return None

    def _environment(
        self, run: PodRun, pod: Obj, container: Obj, service_account: Path | None
    ) -> dict[str, str]:
        namespace, name = meta(pod)["namespace"], meta(pod)["name"]
        env: dict[str, str] = {}
        if self.runtime.name == "process":
            home = self.pod_dir(namespace, name) / "home"
            home.mkdir(parents=True, exist_ok=True)
            temp = self._temp_dir(run)
            temp.mkdir(mode=0o700, parents=True, exist_ok=True)
            env.update({key: os.environ[key] for key in PASSED_ENVIRONMENT if key in os.environ})
            bin_dir = str(Path(sys.executable).parent)
            if service_account is not None:
                token: str | None = (service_account / "token").read_text()
            else:
                # No token mounted: no credentials, as in a cluster (admin only without a key).
                token = "" if self.token_key is not None else None
            env.update(
                PATH=os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)]),
                HOME=str(home),
                TMPDIR=str(temp),
                PYTHONUNBUFFERED="1",
                KUBECONFIG=str(self._kubeconfig(namespace, token)),
            )
            if self.hosts_path is not None:
                env[HOSTS_VARIABLE] = str(self.hosts_path)
                env["PYTHONPATH"] = str(SHIM_DIR)
        else:
            env["PYTHONPATH"] = CONTAINER_SHIM_DIR
        if self.runtime.name == "podman" and self.service_endpoint is not None:
            host, port = self.service_endpoint
            env.update(
                KUBERNETES_SERVICE_HOST=host,
                KUBERNETES_SERVICE_PORT=str(port),
                KUBERNETES_SERVICE_PORT_HTTPS=str(port),
                KUBERNETES_PORT=f"tcp://{host}:{port}",
            )
        env.update(HOSTNAME=name, **{POD_IP_VARIABLE: run.pod_ip})
        gpus = _gpu_count(container)
        if gpus:
            # The device plugin's allocation, before the container's own env (which may
            # override it): engines (Ray, vLLM, SGLang stand-ins) count the node's GPUs here.
            seed = f"{run.uid}/{container.get('name')}"
            env[GPU_VARIABLE] = ",".join(
                f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'{seed}/{index}')}" for index in range(gpus)
            )
        for source in container.get("envFrom") or []:
            prefix = str(source.get("prefix", ""))
            for key, plural in (("configMapRef", "configmaps"), ("secretRef", "secrets")):
                if key not in source:
                    continue
                ref = source[key]
                obj = self._lookup(plural, namespace, str(ref.get("name", "")))
                if obj is None:
                    if ref.get("optional"):
                        continue
                    raise ContainerConfigError(f'{plural[:-1]} "{ref.get("name")}" not found')
                for data_key, raw in self._data(obj, plural).items():
                    env[prefix + data_key] = raw.decode(errors="replace")
        for entry in container.get("env") or []:
            if "valueFrom" in entry:
                value = self._value_from(run, pod, entry["valueFrom"])
                if value is None:
                    continue
            else:
                value = expand_references(str(entry.get("value", "")), env)
            env_name = str(entry.get("name"))
            if env_name == "PYTHONPATH" and "PYTHONPATH" in env:
                value = os.pathsep.join([env["PYTHONPATH"], value])
            env[env_name] = value
        return env

    def _kubeconfig(self, namespace: str, token: str | None) -> Path:
        if token is None:
            return self._kubeconfig_for(namespace)
        return self._kubeconfig_for(namespace, token)

    # -- containers -------------------------------------------------------------------------

    def _mounts(self, container: Obj, context: _PodContext) -> list[Mount]:
        mounts: list[Mount] = []
        for mount in container.get("volumeMounts") or []:
            volume = context.volumes.get(str(mount.get("name")))
            if volume is None:
                continue
            sub_path = str(mount.get("subPath") or "")
            host = Path(volume.host)
            target = host / sub_path if sub_path else host
            if sub_path and not target.suffix and not target.exists():
                target.mkdir(parents=True, exist_ok=True)
                target.chmod(0o777)  # writable by the container's user, whoever it is
            mounts.append(
                Mount(
                    str(mount.get("mountPath", "")),
                    str(target),
                    read_only=volume.read_only or bool(mount.get("readOnly")),
                )
            )
        if context.service_account is not None:
            mounts.append(Mount(SERVICE_ACCOUNT_DIR, str(context.service_account), True))
        if self.runtime.name == "podman":
            mounts.append(Mount(CONTAINER_SHIM_DIR, str(SHIM_DIR), read_only=True))
            if self.hosts_path is not None:
                # glibc rereads /etc/hosts per lookup: Service names resolve as they come.
                mounts.append(Mount("/etc/hosts", str(self.hosts_path), read_only=True))
        return sorted(mounts, key=lambda item: len(item.path), reverse=True)

    def _launch(self, run: PodRun, context: _PodContext, container: Obj) -> Launch:
        name = str(container.get("name"))
        kind, image = context.plans[name]
        mounts = self._mounts(container, context)
        env = copy.deepcopy(context.environments[name])
        command = [str(part) for part in container.get("command") or []]
        args = [str(part) for part in container.get("args") or []]
        log_dir = self.pod_dir(run.namespace, run.name) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        current_log = log_dir / f"{name}.log"
        if current_log.exists():  # a restart: the instance before is `previous` (kubectl -p)
            current_log.replace(log_dir / f"{name}{PREVIOUS_LOG_SUFFIX}")
        termination = self.pod_dir(run.namespace, run.name) / "termination" / name
        termination.parent.mkdir(parents=True, exist_ok=True)
        termination.write_bytes(b"")
        termination.chmod(0o666)
        message_path = str(container.get("terminationMessagePath") or "/dev/termination-log")
        working_dir = container.get("workingDir")
        function = None
        if kind == "engine":
            argv = [expand_references(part, env) for part in command + args]
            mapped = self.images.engine_command(str(container.get("image") or ""))
            if mapped:
                entry = list(mapped)
            elif self.engine_command:
                entry = list(self.engine_command)
            else:
                python = "python" if self.runtime.name == "podman" else sys.executable
                entry = [python, "-m", ENGINE_STANDIN_MODULE]
                # The stand-in imitates the engine version the image's tag names.
                env[ENGINE_IMAGE_VARIABLE] = str(container.get("image") or "")
            argv = [*entry, *argv]
            has_entrypoint = True
        elif self.runtime.name == "podman":
            argv = [expand_references(part, env) for part in command + args]
            has_entrypoint = bool(command)
        else:  # the project's image, as a process (or as the entry function, args only)
            function = None if command else self.entrypoint_function
            entry = [] if function is not None else list(self.entrypoint)
            argv = [expand_references(part, env) for part in (command or entry) + args]
            has_entrypoint = True
        if self.runtime.name == "process":
            pairs = [(m.path, m.host) for m in mounts]
            pairs.append((message_path, str(termination)))
            env["KYAI_DEVCLUSTER_VOLUMES"] = json.dumps(dict((m.path, m.host) for m in mounts))
            declared = {str(entry.get("name")) for entry in container.get("env") or []}
            for key, value in list(env.items()):
                # Host paths the kubelet itself hands the process (its kubeconfig, PATH,
                # HOME...) are real already: a mount at /tmp must not rewrite them.
                if key in declared or key not in KUBELET_ENVIRONMENT:
                    env[key] = rewrite_mounts(value, pairs)
            argv = [rewrite_mounts(part, pairs) for part in argv]
            run.path_maps[name] = pairs
            if working_dir:
                working_dir = rewrite_mounts(str(working_dir), pairs)
        limits = (container.get("resources") or {}).get("limits") or {}
        memory = None
        if limits.get("memory"):
            with contextlib.suppress(ValueError):
                memory = parse_quantity(str(limits["memory"]))
        return Launch(
            pod_uid=run.uid,
            pod_name=run.name,
            namespace=run.namespace,
            name=name,
            image=image,
            argv=argv,
            entrypoint=has_entrypoint,
            env=env,
            mounts=mounts,
            working_dir=str(working_dir) if working_dir else None,
            log_path=log_dir / f"{name}.log",
            termination_path=termination,
            termination_message_path=message_path,
            security=_merged_security(context.pod, container),
            memory_limit=memory,
            function=function,
        )

    async def _run_once(self, run: PodRun, context: _PodContext, container: Obj) -> Obj:
        """Run a container of a Job pod to its end; its ``terminated`` fields."""
        name = str(container.get("name"))
        security = _merged_security(context.pod, container)
        if security.get("runAsNonRoot") and security.get("runAsUser") == 0:
            return self._start_error("container's runAsUser breaks non-root policy")
        launch = self._launch(run, context, container)
        try:
            handle = await self.runtime.start(launch)
        except StartError as error:
            return self._start_error(str(error))
        run.handles[name] = handle
        run.running.add(name)
        try:
            ended = await handle.wait()
        finally:
            run.running.discard(name)
        return self._exit_info(ended, launch, container)

    def _exit_info(self, ended: Exit, launch: Launch, container: Obj) -> Obj:
        code = ended.code
        if ended.oom_killed:
            reason = "OOMKilled"
        else:
            reason = "Completed" if code == 0 else "Error"
        info: Obj = {"exitCode": code, "reason": reason}
        message = ""
        with contextlib.suppress(OSError):
            message = launch.termination_path.read_text(errors="replace")[:4096]
        policy = container.get("terminationMessagePolicy") or "File"
        if not message.strip() and code != 0 and policy == "FallbackToLogsOnError":
            message = self._log_tail(launch.log_path)
        if message.strip():
            info["message"] = message
        return info

    @staticmethod
    def _log_tail(path: Path) -> str:
        try:
            with path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(size - FALLBACK_LOG_BYTES, 0))
                tail = log.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(tail.splitlines()[-FALLBACK_LOG_LINES:])

    @staticmethod
    def _start_error(message: str) -> Obj:
        return {"exitCode": 128, "reason": "StartError", "message": message}


def _gpu_count(container: Obj) -> int:
    """The ``nvidia.com/gpu`` a container is given (its limit, else its request)."""
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
        resources.get("requests") or {}
    ).get(GPU_RESOURCE)
    try:
        return max(int(str(value or 0)), 0)
    except ValueError:
        return 0


def _write_file(path: Path, content: bytes, mode: int) -> None:
    """Write a projected file at once (a reader never sees half of it), readable by all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(content)
    temporary.chmod(mode | 0o444)  # readable by the container's user, whoever it is
    os.replace(temporary, path)
