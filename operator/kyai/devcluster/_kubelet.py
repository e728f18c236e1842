"""The simulated kubelet: pods run as local processes or as podman containers.

Which image runs how (:meth:`Kubelet.plan_image`):

* the project's own image (``--local-image`` patterns) runs as written: as a local process in
  the ``process`` runtime, as a container of that image in ``podman`` (an image present in
  podman's store runs as itself; a local-image pattern not present runs the devcluster's
  project image, ``--image``);
* a serving engine's image (:data:`ENGINE_IMAGES`: vLLM, SGLang, TensorRT-LLM) runs the
  engine stand-in ``python -m kyai.testing.engines <command and args>`` (in podman, in a
  container of the project image) with ``KYAI_DEVCLUSTER_POD_IP`` set;
* any other image cannot be pulled: the pod waits with ``ErrImagePull`` then
  ``ImagePullBackOff`` as on a real node (podman: until the image appears in its store).
  Exception kept from earlier versions: a *Job* pod of another image in the ``process``
  runtime fails at once with reason ``UnsupportedImage``.

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
import fnmatch
import json
import logging
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kyai.devcluster._controllers import (
    PODS,
    SERVICE_ACCOUNTS,
    UNSUPPORTED_IMAGE,
    record_event,
)
from kyai.devcluster._network import HOSTS_VARIABLE, POD_NETWORK, SHIM_DIR, AddressPool
from kyai.devcluster._probes import ProbeTiming, run_probe
from kyai.devcluster._runtime import (
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
from kyai.devcluster._selectors import field_value
from kyai.devcluster._store import Event, Store, meta, now_rfc3339
from kyai.devcluster._tokens import issue

Obj = dict[str, Any]
logger = logging.getLogger("kyai.devcluster")

#: Images that run as the project's image by default.
DEFAULT_LOCAL_IMAGES: tuple[str, ...] = (
    "ghcr.io/kyai-io/kyai-operator",
    "ghcr.io/kyai-io/kyai-operator:*",
    "ghcr.io/kyai-io/kyai-operator@*",
    "kyai-operator",
    "kyai-operator:*",
    "kyai-operator@*",
    "localhost/kyai-operator:*",
)
#: Images of serving engines: their pods run the engine stand-in (fnmatch patterns).
ENGINE_IMAGES: tuple[str, ...] = (
    "vllm/vllm-openai*",
    "docker.io/vllm/vllm-openai*",
    "lmsysorg/sglang*",
    "docker.io/lmsysorg/sglang*",
    "nvcr.io/nvidia/tensorrt-llm/*",
)
#: The module the engine stand-in runs as (``python -m``), with the container's argv.
ENGINE_STANDIN_MODULE = "kyai.testing.engines"
#: The project image the podman runtime runs for local-image patterns and engine stand-ins.
DEFAULT_PROJECT_IMAGE = "localhost/kyai-operator:dev"
#: What runs when a local-image container has no ``command`` (the image's entrypoint).
DEFAULT_ENTRYPOINT: tuple[str, ...] = ("kyai",)
#: Host variables a pod process inherits (anything else comes from the pod spec).
PASSED_ENVIRONMENT: tuple[str, ...] = ("LANG", "LC_ALL", "TZ", "SYSTEMROOT")
#: Where Kubernetes projects the service-account token.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
POD_IP_VARIABLE = "KYAI_DEVCLUSTER_POD_IP"
#: Where containers see the name and bind shim (on their PYTHONPATH).
CONTAINER_SHIM_DIR = "/var/run/kyai-devcluster/shim"
#: Restart back-off of long-running containers: first delay, doubling up to the cap.
RESTART_BACKOFF = (0.5, 10.0)
#: How often a pod waiting for an image checks again.
IMAGE_RECHECK_SECONDS = 2.0
#: Bytes of log a failed container's termination message falls back to.
FALLBACK_LOG_BYTES = 2048
FALLBACK_LOG_LINES = 80

_VAR_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")

RuntimeName = Literal["process", "podman"]
ImageKind = Literal["local", "engine", "missing"]


class ContainerConfigError(Exception):
    """A pod cannot start yet: a referenced config map, secret or claim is missing."""


@dataclass
class _ContainerState:
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    restart_count: int = 0


@dataclass
class _PodRun:
    uid: str
    namespace: str
    name: str
    task: asyncio.Task[None] | None = None
    handles: dict[str, Handle] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    killed: bool = False
    stopper: asyncio.Task[None] | None = None
    pod_ip: str = ""
    states: dict[str, _ContainerState] = field(default_factory=dict)
    path_maps: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    transitions: dict[str, tuple[bool, str]] = field(default_factory=dict)

    def alive(self) -> bool:
        """Whether the pod has not been stopped (deleted or shut down)."""
        return not self.killed


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
        hosts_path: Path | None = None,
        ca_file: Path | None = None,
        max_probe_period: float | None = 1.0,
        restart_backoff: tuple[float, float] = RESTART_BACKOFF,
        engine_command: Sequence[str] | None = None,
        entrypoint_function: EntryFunction | None = None,
    ) -> None:
        self.store = store
        self.workdir = workdir
        self.local_images = tuple(local_images)
        self.engine_images = tuple(engine_images)
        self.entrypoint = tuple(entrypoint)
        self.kill_grace_seconds = kill_grace_seconds
        self.runtime: Runtime = runtime or ProcessRuntime()
        self.token_key = token_key
        self.project_image = project_image
        self.hosts_path = hosts_path
        self.ca_file = ca_file
        self.max_probe_period = max_probe_period
        self.restart_backoff = restart_backoff
        #: What an engine image runs, followed by the container's command and args.
        self.engine_command = tuple(engine_command) if engine_command else None
        #: Runs in place of ``entrypoint`` (process runtime) inside the event loop.
        self.entrypoint_function = entrypoint_function
        #: ``(host, port)`` of the API server's HTTPS listener (set by the devcluster).
        self.service_endpoint: tuple[str, int] | None = None
        self.pod_addresses = AddressPool(POD_NETWORK)
        self._kubeconfig_for = kubeconfig_for
        self._claim_dir = claim_dir
        self._runs: dict[str, _PodRun] = {}
        self._closed = False

    # -- paths ------------------------------------------------------------------------------

    def pod_dir(self, namespace: str, name: str) -> Path:
        """The directory of one pod (its emptyDir volumes, home and logs)."""
        return self.workdir / "pods" / namespace / name

    def log_file(self, namespace: str, pod: str, container: str) -> Path | None:
        """The log file of one container."""
        path = self.pod_dir(namespace, pod) / "logs" / f"{container}.log"
        return path if path.exists() else None

    def is_running(self, namespace: str, pod: str, container: str) -> bool:
        """Whether the container's process is running."""
        return any(
            run.namespace == namespace and run.name == pod and container in run.running
            for run in self._runs.values()
        )

    def is_local(self, image: str) -> bool:
        """Whether an image is the project's own (a local-image pattern)."""
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.local_images)

    def is_engine(self, image: str) -> bool:
        """Whether an image is a serving engine's (runs the engine stand-in)."""
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.engine_images)

    async def plan_image(self, image: str) -> tuple[ImageKind, str]:
        """How an image runs: ``(kind, image to run)``; see the module docstring."""
        if self.is_engine(image):
            return "engine", self.project_image
        if self.runtime.name == "process":
            return ("local", image) if self.is_local(image) else ("missing", image)
        if await self.runtime.image_present(image):
            return "local", image
        if self.is_local(image):
            return "local", self.project_image
        return "missing", image

    # -- events -----------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Store listener: start new pods, stop deleted ones."""
        if event.group_resource != PODS or self._closed:
            return
        uid = meta(event.obj).get("uid", "")
        if event.type == "ADDED":
            run = _PodRun(uid, meta(event.obj)["namespace"], meta(event.obj)["name"])
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

    async def close(self) -> None:
        """Kill every process and wait for the pod tasks (shutdown)."""
        self._closed = True
        runs = list(self._runs.values())
        stoppers = [run.stopper for run in runs if run.stopper is not None]
        fresh = [run for run in runs if run.stopper is None]
        for run in fresh:
            run.killed = True
        await asyncio.gather(*stoppers, *(self._stop_run(run, remove=False) for run in fresh))

    async def _stop_run(self, run: _PodRun, *, remove: bool) -> None:
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
        if remove:
            shutil.rmtree(self.pod_dir(run.namespace, run.name), ignore_errors=True)

    async def _kill(self, run: _PodRun) -> None:
        await asyncio.gather(
            *(handle.stop(self.kill_grace_seconds) for handle in list(run.handles.values()))
        )

    # -- pod lifecycle ----------------------------------------------------------------------

    def _current(self, run: _PodRun) -> Obj | None:
        pod = self.store.find(self.store.type_for(*PODS), run.namespace, run.name)
        if pod is None or meta(pod).get("uid") != run.uid:
            return None
        return pod

    def _set_status(self, run: _PodRun, status: Obj) -> None:
        pod = self._current(run)
        if pod is not None and not run.killed:
            merged = {**(pod.get("status") or {}), **status}
            self.store.write_status(self.store.type_for(*PODS), pod, merged)

    async def _run_pod(self, run: _PodRun) -> None:
        try:
            await self._lifecycle(run)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("pod %s/%s failed in the simulated kubelet", run.namespace, run.name)

    async def _lifecycle(self, run: _PodRun) -> None:
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
                    run, self._waiting_status(run, pod, "CreateContainerConfigError", str(error))
                )
                await asyncio.sleep(0.5)
        started = now_rfc3339()
        self._set_status(
            run,
            self._running_status(run, pod, ready=not init_containers, init=bool(init_containers)),
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
            self._set_status(run, self._running_status(run, pod, ready=True))
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
        self._set_status(run, self._terminated_status(run, pod, results, succeeded, started))

    async def _wait_for_images(
        self, run: _PodRun, pod: Obj, containers: list[Obj], batch: bool
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
                    f"({', '.join(self.local_images)}) nor a serving engine's; only those run"
                )
                self._set_status(run, self._failed_status(run, pod, UNSUPPORTED_IMAGE, message))
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
            self._set_status(run, self._waiting_status(run, pod, reason, message))
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
        run: _PodRun,
        pod: Obj,
        containers: list[Obj],
        plans: dict[str, tuple[ImageKind, str]],
    ) -> _PodContext:
        volumes = self._volumes(run, pod)
        service_account = self._service_account(run, pod)
        environments = {
            str(c.get("name")): self._environment(run, pod, c, service_account) for c in containers
        }
        return _PodContext(pod, volumes, environments, plans, service_account)

    # -- long-running pods ------------------------------------------------------------------

    async def _serve(self, run: _PodRun, context: _PodContext, containers: list[Obj]) -> None:
        for container in containers:
            run.states[str(container.get("name"))] = _ContainerState()
        self._publish(run)
        await asyncio.gather(*(self._supervise(run, context, c) for c in containers))

    async def _supervise(self, run: _PodRun, context: _PodContext, container: Obj) -> None:
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
        self, run: _PodRun, container: Obj, state: _ContainerState, handle: Handle
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
        self, run: _PodRun, container: Obj, handle: Handle, probe: Obj, *, want: bool
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
        self, run: _PodRun, container: Obj, handle: Handle, probe: Obj, timing: ProbeTiming
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
        self, run: _PodRun, container: Obj, state: _ContainerState, handle: Handle, probe: Obj
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

    async def _liveness(self, run: _PodRun, container: Obj, handle: Handle, probe: Obj) -> None:
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

    def _event(self, run: _PodRun, kind: str, reason: str, message: str) -> None:
        pod = self._current(run)
        if pod is not None:
            with contextlib.suppress(Exception):
                record_event(self.store, pod, kind, reason, message)

    def _publish(self, run: _PodRun) -> None:
        """Write a long-running pod's status from its containers' states."""
        pod = self._current(run)
        if pod is None or run.killed:
            return
        now = now_rfc3339()
        containers = (pod.get("spec") or {}).get("containers") or []
        statuses = []
        for container in containers:
            state = run.states.get(str(container.get("name"))) or _ContainerState()
            entry = self._container_status(run, container, state.state, ready=state.ready, pod=pod)
            entry["started"] = state.started
            entry["restartCount"] = state.restart_count
            if state.last_state:
                entry["lastState"] = state.last_state
            statuses.append(entry)
        ready = bool(statuses) and all(s["ready"] for s in statuses)
        status = self._base_status(run, pod)
        status.update(
            phase="Running",
            conditions=self._stable_conditions(run, now, ready=ready),
            containerStatuses=statuses,
        )
        self._set_status(run, status)

    def _stable_conditions(self, run: _PodRun, now: str, *, ready: bool) -> list[Obj]:
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

    # -- statuses ---------------------------------------------------------------------------

    @staticmethod
    def _conditions(
        now: str, *, ready: bool, initialized: bool = True, reason: str = ""
    ) -> list[Obj]:
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

    def _container_status(
        self, run: _PodRun, container: Obj, state: Obj, *, ready: bool, pod: Obj
    ) -> Obj:
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

    def _base_status(self, run: _PodRun, pod: Obj) -> Obj:
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

    def _running_status(self, run: _PodRun, pod: Obj, *, ready: bool, init: bool = False) -> Obj:
        now = now_rfc3339()
        containers = (pod.get("spec") or {}).get("containers") or []
        if init:
            state: Obj = {"waiting": {"reason": "PodInitializing"}}
        else:
            state = {"running": {"startedAt": now}}
        status = self._base_status(run, pod)
        status.update(
            phase="Pending" if init else "Running",
            conditions=self._conditions(
                now, ready=ready and not init, initialized=not init, reason="ContainersNotReady"
            ),
            containerStatuses=[
                self._container_status(run, c, state, ready=ready and not init, pod=pod)
                for c in containers
            ],
        )
        return status

    def _waiting_status(self, run: _PodRun, pod: Obj, reason: str, message: str) -> Obj:
        now = now_rfc3339()
        containers = (pod.get("spec") or {}).get("containers") or []
        status = self._base_status(run, pod)
        status.update(
            phase="Pending",
            conditions=self._conditions(now, ready=False, reason="ContainersNotReady"),
            containerStatuses=[
                self._container_status(
                    run,
                    c,
                    {"waiting": {"reason": reason, "message": message}},
                    ready=False,
                    pod=pod,
                )
                for c in containers
            ],
        )
        return status

    def _failed_status(self, run: _PodRun, pod: Obj, reason: str, message: str) -> Obj:
        status = self._waiting_status(run, pod, reason, message)
        status.update(phase="Failed", reason=reason, message=message)
        return status

    def _terminated_status(
        self, run: _PodRun, pod: Obj, results: dict[str, Obj], succeeded: bool, started: str
    ) -> Obj:
        now = now_rfc3339()
        spec = pod.get("spec") or {}
        status = self._base_status(run, pod)

        def state_of(container: Obj) -> Obj:
            result = results.get(str(container.get("name")))
            if result is None:
                return {"waiting": {"reason": "PodInitializing"}}
            return {"terminated": {"startedAt": started, "finishedAt": now, **result}}

        status.update(
            phase="Succeeded" if succeeded else "Failed",
            conditions=self._conditions(now, ready=False, reason="PodCompleted"),
            containerStatuses=[
                self._container_status(run, c, state_of(c), ready=False, pod=pod)
                for c in spec.get("containers") or []
            ],
        )
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                self._container_status(run, c, state_of(c), ready=False, pod=pod)
                for c in spec["initContainers"]
            ]
        return status

    # -- volumes, service account and environment -------------------------------------------

    def _lookup(self, plural: str, namespace: str, name: str) -> Obj | None:
        return self.store.find(self.store.type_for("", plural), namespace, name)

    def _memory_dir(self, run: _PodRun) -> Path:
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.workdir / "shm"
        return base / f"kyai-devcluster-{run.uid}"

    def _volumes(self, run: _PodRun, pod: Obj) -> dict[str, Mount]:
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
                else:
                    target.chmod(0o1777)
                mapped[volume_name] = Mount("", str(target), read_only=read_only)
        return mapped

    def _project(self, target: Path, source: Obj, plural: str, namespace: str) -> None:
        name = str(source.get("name") or source.get("secretName") or "")
        obj = self._lookup(plural, namespace, name)
        if obj is None:
            if source.get("optional"):
                return
            raise ContainerConfigError(f'{plural[:-1]} "{name}" not found')
        data = self._data(obj, plural)
        items = source.get("items")
        files = (
            {
                str(item.get("path")): data[str(item.get("key"))]
                for item in items
                if str(item.get("key")) in data
            }
            if items
            else dict(data)
        )
        mode = int(source.get("defaultMode") or 0o644)
        target.chmod(0o755)
        for relative, content in files.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode | 0o444)  # readable by the container's user, whoever it is

    def _service_account(self, run: _PodRun, pod: Obj) -> Path | None:
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
        files = {
            "token": issue(self.token_key, namespace, account),
            "namespace": namespace,
        }
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

    def _value_from(self, run: _PodRun, pod: Obj, source: Obj) -> str | None:
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
        self, run: _PodRun, pod: Obj, container: Obj, service_account: Path | None
    ) -> dict[str, str]:
        namespace, name = meta(pod)["namespace"], meta(pod)["name"]
        env: dict[str, str] = {}
        if self.runtime.name == "process":
            home = self.pod_dir(namespace, name) / "home"
            home.mkdir(parents=True, exist_ok=True)
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
                TMPDIR=str(home),
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

    def _launch(self, run: _PodRun, context: _PodContext, container: Obj) -> Launch:
        name = str(container.get("name"))
        kind, image = context.plans[name]
        mounts = self._mounts(container, context)
        env = copy.deepcopy(context.environments[name])
        command = [str(part) for part in container.get("command") or []]
        args = [str(part) for part in container.get("args") or []]
        log_dir = self.pod_dir(run.namespace, run.name) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        termination = self.pod_dir(run.namespace, run.name) / "termination" / name
        termination.parent.mkdir(parents=True, exist_ok=True)
        termination.write_bytes(b"")
        termination.chmod(0o666)
        message_path = str(container.get("terminationMessagePath") or "/dev/termination-log")
        working_dir = container.get("workingDir")
        function = None
        if kind == "engine":
            argv = [expand_references(part, env) for part in command + args]
            if self.engine_command:
                entry = list(self.engine_command)
            else:
                python = "python" if self.runtime.name == "podman" else sys.executable
                entry = [python, "-m", ENGINE_STANDIN_MODULE]
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

    async def _run_once(self, run: _PodRun, context: _PodContext, container: Obj) -> Obj:
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
