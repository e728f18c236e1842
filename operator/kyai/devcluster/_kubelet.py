"""The simulated kubelet: pods of the project's image run as local processes.

A pod whose containers all use a *local image* (``--local-image`` patterns) and whose restart
policy is ``Never`` or ``OnFailure`` (Job pods) runs: init containers one after another,
then the containers side by side, each as a child process with

* the command and args as written (``$(VAR)`` references expanded), or the image's
  entrypoint (``kyai``) followed by the args when there is no command;
* the container's ``env`` and ``envFrom`` with ``valueFrom`` secrets, config maps and pod
  fields resolved; ``PATH`` starting with this Python environment's ``bin`` directory, so
  ``kyai`` is this environment's console script; ``KUBECONFIG`` pointing at the
  devcluster with the pod's namespace as the current namespace;
* every volume mapped to a directory under the workdir (``emptyDir``, ``configMap`` and
  ``secret`` per pod; ``persistentVolumeClaim`` per claim, so a later pod sees what an
  earlier one wrote). A process cannot see a directory at the ``mountPath`` itself, so mount
  paths in the command, args, env values and ``workingDir`` are rewritten to the mapped
  directories, and ``KYAI_DEVCLUSTER_VOLUMES`` holds the mapping as JSON.

Other pods are not run: long-running pods (restart policy ``Always``, e.g. Deployments')
are marked Running and Ready at once, and batch pods with other images fail with reason
``UnsupportedImage``. Output goes to one log file per container, read by ``kubectl logs``.
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
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kyai.devcluster._controllers import PODS, UNSUPPORTED_IMAGE
from kyai.devcluster._selectors import field_value
from kyai.devcluster._store import Event, Store, meta, now_rfc3339

Obj = dict[str, Any]
logger = logging.getLogger("kyai.devcluster")

#: Images that run as local processes by default (the project's own image).
DEFAULT_LOCAL_IMAGES: tuple[str, ...] = (
    "ghcr.io/kyai-io/kyai-operator",
    "ghcr.io/kyai-io/kyai-operator:*",
    "ghcr.io/kyai-io/kyai-operator@*",
    "kyai-operator",
    "kyai-operator:*",
    "kyai-operator@*",
)
#: What runs when a local-image container has no ``command`` (the image's entrypoint).
DEFAULT_ENTRYPOINT: tuple[str, ...] = ("kyai",)
#: Host variables a pod process inherits (anything else comes from the pod spec).
PASSED_ENVIRONMENT: tuple[str, ...] = ("LANG", "LC_ALL", "TZ", "SYSTEMROOT")

_VAR_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ContainerConfigError(Exception):
    """A pod cannot start yet: a referenced config map, secret or claim is missing."""


@dataclass
class _PodRun:
    uid: str
    namespace: str
    name: str
    task: asyncio.Task[None] | None = None
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    killed: bool = False
    stopper: asyncio.Task[None] | None = None

    def alive(self) -> bool:
        """Whether the pod has not been stopped (deleted or shut down)."""
        return not self.killed


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
    {"KUBECONFIG", "PATH", "HOME", "TMPDIR", "KYAI_DEVCLUSTER_VOLUMES", *PASSED_ENVIRONMENT}
)


class Kubelet:
    """Runs, simulates or rejects pods; kills processes of deleted pods; serves their logs."""

    def __init__(
        self,
        store: Store,
        *,
        workdir: Path,
        local_images: Sequence[str] = DEFAULT_LOCAL_IMAGES,
        entrypoint: Sequence[str] = DEFAULT_ENTRYPOINT,
        kubeconfig_for: Callable[[str], Path],
        claim_dir: Callable[[str, str], Path],
        kill_grace_seconds: float = 2.0,
    ) -> None:
        self.store = store
        self.workdir = workdir
        self.local_images = tuple(local_images)
        self.entrypoint = tuple(entrypoint)
        self.kill_grace_seconds = kill_grace_seconds
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
        """Whether an image runs as a local process."""
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.local_images)

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
        self._runs.pop(run.uid, None)
        if remove:
            shutil.rmtree(self.pod_dir(run.namespace, run.name), ignore_errors=True)

    async def _kill(self, run: _PodRun) -> None:
        processes = [p for p in run.processes.values() if p.returncode is None]
        for process in processes:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                async with asyncio.timeout(self.kill_grace_seconds):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()

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
        spec = pod.get("spec") or {}
        containers = list(spec.get("containers") or [])
        init_containers = list(spec.get("initContainers") or [])
        batch = spec.get("restartPolicy") in {"Never", "OnFailure"}
        images = [str(c.get("image", "")) for c in init_containers + containers]
        local = all(self.is_local(image) for image in images)
        if not batch:
            self._set_status(run, self._running_status(pod, ready=True, simulated=True))
            return
        if not local:
            foreign = next(image for image in images if not self.is_local(image))
            message = (
                f'image "{foreign}" is not one of the devcluster\'s local images '
                f"({', '.join(self.local_images)}); only those run, as local processes"
            )
            self._set_status(run, self._failed_status(pod, UNSUPPORTED_IMAGE, message))
            return
        while True:
            pod = self._current(run)
            if pod is None or run.killed:
                return
            try:
                volumes = self._volumes(pod)
                environments = {
                    str(c.get("name")): self._environment(pod, c)
                    for c in init_containers + containers
                }
                break
            except ContainerConfigError as error:
                self._set_status(
                    run, self._waiting_status(pod, "CreateContainerConfigError", str(error))
                )
                await asyncio.sleep(0.5)
        started = now_rfc3339()
        self._set_status(
            run, self._running_status(pod, ready=not init_containers, init=bool(init_containers))
        )
        results: dict[str, Obj] = {}
        for container in init_containers:
            name = str(container.get("name"))
            results[name] = await self._run_container(
                run, pod, container, volumes, environments[name]
            )
            if results[name]["exitCode"] != 0:
                break
        else:
            self._set_status(run, self._running_status(pod, ready=True))
            outcomes = await asyncio.gather(
                *(
                    self._run_container(run, pod, c, volumes, environments[str(c.get("name"))])
                    for c in containers
                )
            )
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
        self._set_status(run, self._terminated_status(pod, results, succeeded, started))

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

    def _container_status(self, container: Obj, state: Obj, *, ready: bool, pod: Obj) -> Obj:
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

    def _base_status(self, pod: Obj) -> Obj:
        status = pod.get("status") or {}
        return {
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": status.get("startTime") or now_rfc3339(),
            "qosClass": status.get("qosClass", "BestEffort"),
        }

    def _running_status(
        self, pod: Obj, *, ready: bool, init: bool = False, simulated: bool = False
    ) -> Obj:
        now = now_rfc3339()
        containers = (pod.get("spec") or {}).get("containers") or []
        if init:
            state: Obj = {"waiting": {"reason": "PodInitializing"}}
        else:
            state = {"running": {"startedAt": now}}
        status = self._base_status(pod)
        status.update(
            phase="Pending" if init else "Running",
            conditions=self._conditions(
                now, ready=ready and not init, initialized=not init, reason="ContainersNotReady"
            ),
            containerStatuses=[
                self._container_status(c, state, ready=ready and not init, pod=pod)
                for c in containers
            ],
        )
        if simulated:
            status["message"] = "simulated by the devcluster kubelet: no process runs"
        return status

    def _waiting_status(self, pod: Obj, reason: str, message: str) -> Obj:
        now = now_rfc3339()
        containers = (pod.get("spec") or {}).get("containers") or []
        status = self._base_status(pod)
        status.update(
            phase="Pending",
            conditions=self._conditions(now, ready=False, reason="ContainersNotReady"),
            containerStatuses=[
                self._container_status(
                    c, {"waiting": {"reason": reason, "message": message}}, ready=False, pod=pod
                )
                for c in containers
            ],
        )
        return status

    def _failed_status(self, pod: Obj, reason: str, message: str) -> Obj:
        status = self._waiting_status(pod, reason, message)
        status.update(phase="Failed", reason=reason, message=message)
        return status

    def _terminated_status(
        self, pod: Obj, results: dict[str, Obj], succeeded: bool, started: str
    ) -> Obj:
        now = now_rfc3339()
        spec = pod.get("spec") or {}
        status = self._base_status(pod)

        def state_of(container: Obj) -> Obj:
            result = results.get(str(container.get("name")))
            if result is None:
                return {"waiting": {"reason": "PodInitializing"}}
            return {"terminated": {"startedAt": started, "finishedAt": now, **result}}

        status.update(
            phase="Succeeded" if succeeded else "Failed",
            conditions=self._conditions(now, ready=False, reason="PodCompleted"),
            containerStatuses=[
                self._container_status(c, state_of(c), ready=False, pod=pod)
                for c in spec.get("containers") or []
            ],
        )
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                self._container_status(c, state_of(c), ready=False, pod=pod)
                for c in spec["initContainers"]
            ]
        return status

    # -- volumes and environment ------------------------------------------------------------

    def _lookup(self, plural: str, namespace: str, name: str) -> Obj | None:
        return self.store.find(self.store.type_for("", plural), namespace, name)

    def _volumes(self, pod: Obj) -> dict[str, Path]:
        namespace, name = meta(pod)["namespace"], meta(pod)["name"]
        base = self.pod_dir(namespace, name) / "volumes"
        mapped: dict[str, Path] = {}
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            volume_name = str(volume.get("name"))
            if "persistentVolumeClaim" in volume:
                claim = str(volume["persistentVolumeClaim"].get("claimName", ""))
                if self._lookup("persistentvolumeclaims", namespace, claim) is None:
                    raise ContainerConfigError(f'persistentvolumeclaim "{claim}" not found')
                mapped[volume_name] = self._claim_dir(namespace, claim)
            elif "hostPath" in volume:
                mapped[volume_name] = Path(str(volume["hostPath"].get("path", "/")))
            else:
                target = base / volume_name
                target.mkdir(parents=True, exist_ok=True)
                if "configMap" in volume:
                    self._project(target, volume["configMap"], "configmaps", namespace)
                elif "secret" in volume:
                    self._project(target, volume["secret"], "secrets", namespace)
                mapped[volume_name] = target
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
        for relative, content in files.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    @staticmethod
    def _data(obj: Obj, plural: str) -> dict[str, bytes]:
        data: dict[str, bytes] = {}
        if plural == "secrets":
            for key, value in (obj.get("data") or {}).items():
                data[key] = base64.b64decode(str(value))
        else:
            for key, value in (obj.get("data") or {}).items():
                data[key] = str(value).encode()
            for key, value in (obj.get("binaryData") or {}).items():
                data[key] = base64.b64decode(str(value))
        return data

    def _value_from(self, pod: Obj, source: Obj) -> str | None:
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
            if path in {"status.podIP", "status.hostIP"}:
                return "127.0.0.1"
            return field_value(pod, path)
        if "resourceFieldRef" in source:
            return "0"
        return None

    def _environment(self, pod: Obj, container: Obj) -> dict[str, str]:
        namespace, name = meta(pod)["namespace"], meta(pod)["name"]
        home = self.pod_dir(namespace, name) / "home"
        home.mkdir(parents=True, exist_ok=True)
        env: dict[str, str] = {
            key: os.environ[key] for key in PASSED_ENVIRONMENT if key in os.environ
        }
        bin_dir = str(Path(sys.executable).parent)
        env.update(
            PATH=os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)]),
            HOME=str(home),
            HOSTNAME=name,
            TMPDIR=str(home),
            PYTHONUNBUFFERED="1",
            KUBECONFIG=str(self._kubeconfig_for(namespace)),
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
                value = self._value_from(pod, entry["valueFrom"])
                if value is None:
                    continue
            else:
                value = expand_references(str(entry.get("value", "")), env)
            env[str(entry.get("name"))] = value
        return env

    # -- processes --------------------------------------------------------------------------

    def _mounts(self, container: Obj, volumes: dict[str, Path]) -> list[tuple[str, str]]:
        mounts: list[tuple[str, str]] = []
        for mount in container.get("volumeMounts") or []:
            host = volumes.get(str(mount.get("name")))
            if host is None:
                continue
            sub_path = str(mount.get("subPath") or "")
            target = host / sub_path if sub_path else host
            if sub_path and not target.suffix and not target.exists():
                target.mkdir(parents=True, exist_ok=True)
            mounts.append((str(mount.get("mountPath", "")), str(target)))
        return sorted(mounts, key=lambda item: len(item[0]), reverse=True)

    async def _run_container(
        self, run: _PodRun, pod: Obj, container: Obj, volumes: dict[str, Path], env: dict[str, str]
    ) -> Obj:
        name = str(container.get("name"))
        mounts = self._mounts(container, volumes)
        env = copy.deepcopy(env)
        env["KYAI_DEVCLUSTER_VOLUMES"] = json.dumps(dict(mounts))
        declared = {str(entry.get("name")) for entry in container.get("env") or []}
        for key, value in list(env.items()):
            # Host paths the kubelet itself hands the process (its kubeconfig, PATH, HOME...)
            # are real already: a mount at /tmp must not turn /tmp/workdir/... into nonsense.
            if key in declared or key not in KUBELET_ENVIRONMENT:
                env[key] = rewrite_mounts(value, mounts)
        command = [str(part) for part in container.get("command") or []]
        args = [str(part) for part in container.get("args") or []]
        argv = [expand_references(part, env) for part in (command or list(self.entrypoint)) + args]
        argv = [rewrite_mounts(part, mounts) for part in argv]
        workdir = container.get("workingDir")
        cwd = Path(rewrite_mounts(str(workdir), mounts)) if workdir else Path(env["HOME"])
        log_dir = self.pod_dir(run.namespace, run.name) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        if not argv:
            return self._start_error("no command given and the image has no entrypoint")
        executable = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env["PATH"])
        if executable is None or not Path(executable).exists():
            return self._start_error(f'exec: "{argv[0]}": executable file not found in $PATH')
        if not cwd.is_dir():
            cwd.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            try:
                process = await asyncio.create_subprocess_exec(
                    executable,
                    *argv[1:],
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                    cwd=str(cwd),
                    start_new_session=True,
                )
            except OSError as exc:
                return self._start_error(f"could not start {argv[0]}: {exc}")
            run.processes[name] = process
            run.running.add(name)
            try:
                code = await process.wait()
            finally:
                run.running.discard(name)
        if code < 0:
            code = 128 - code
        return {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}

    @staticmethod
    def _start_error(message: str) -> Obj:
        return {"exitCode": 128, "reason": "StartError", "message": message}
