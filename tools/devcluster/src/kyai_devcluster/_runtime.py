"""Container runtimes of the simulated kubelet: local processes or podman containers.

A runtime starts one container from a :class:`Launch` (what the kubelet resolved from the
pod: argv, env, mounts, security context) and returns a :class:`Handle` to wait for, stop
and exec into it. ``process`` runs the argv as a child process (mount paths already
rewritten by the kubelet); ``podman`` runs ``podman run`` with the pod's volumes, env,
security context, host network and the devcluster's hosts file as ``/etc/hosts``.

A process container is a process group (its main process leads a new session): stopping it
signals the whole group, and when its main process ends, whatever is left of the group is
killed, as the processes of a container end with its PID 1 (vLLM's engine processes, for
one, outlive its API server's SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kyai_devcluster import _forkserver

Obj = dict[str, Any]
logger = logging.getLogger(__name__)

#: Global podman flags: crun refuses hybrid cgroups on some hosts, runc does not.
PODMAN_RUNTIME = "runc"
#: Explicit rlimits: podman's defaults are refused on some hosts.
PODMAN_ULIMITS: tuple[str, ...] = ("nofile=20000:20000", "nproc=4096:4096")
#: Variables podman itself needs; pod values for them are passed as -e KEY=VALUE.
_PODMAN_OWN = frozenset({"PATH", "HOME", "TMPDIR", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"})


class StartError(Exception):
    """A container could not start (the kubelet reports ``StartError``)."""


@dataclass
class Mount:
    """One mount of a container: a host path at ``path``, or a tmpfs there."""

    path: str
    host: str
    read_only: bool = False
    tmpfs: bool = False


@dataclass
class Launch:
    """Everything a runtime needs to start one container."""

    pod_uid: str
    pod_name: str
    namespace: str
    name: str
    image: str
    #: Full argv; ``entrypoint`` False means "the image's entrypoint, with argv as args".
    argv: list[str]
    entrypoint: bool
    env: dict[str, str]
    mounts: list[Mount]
    working_dir: str | None
    log_path: Path
    termination_path: Path
    termination_message_path: str
    security: Obj = field(default_factory=dict)
    memory_limit: int | None = None
    #: Runs instead of a process when set (``--entrypoint-function``): ``argv`` is the
    #: container's args only.
    function: EntryFunction | None = None


#: An entrypoint run inside the devcluster's event loop instead of a process: it gets the
#: launch (args in ``argv``, ``env``, ``log_path``, ``termination_path``) and returns the
#: exit code. For benchmarks: 2,000 pods cost no 2,000 interpreter start-ups.
EntryFunction = Callable[["Launch"], Awaitable[int]]


@dataclass
class Exit:
    """How a container ended."""

    code: int
    oom_killed: bool = False


class Handle(Protocol):
    """A started container."""

    async def wait(self) -> Exit:
        """Wait for the container to end."""

    async def stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""

    async def exec(self, argv: list[str], timeout: float) -> tuple[int, str]:
        """Run ``argv`` in the container; exit code and output."""

    def running(self) -> bool:
        """Whether the container is still running."""


class Runtime(Protocol):
    """Starts containers."""

    name: str

    async def image_present(self, image: str) -> bool:
        """Whether ``image`` can run without a pull."""

    async def start(self, launch: Launch) -> Handle:
        """Start a container (raises :class:`StartError`)."""


# -- local processes -------------------------------------------------------------------------


class _LocalHandle:
    """A container that is a local process (executed or forked): exec runs beside it."""

    def __init__(self, launch: Launch, cwd: str) -> None:
        self.launch = launch
        self.cwd = cwd

    @staticmethod
    def _exit(code: int) -> Exit:
        """A process's exit code as a container's (killed by signal n: 128 + n)."""
        return Exit(128 - code if code < 0 else code)

    async def exec(self, argv: list[str], timeout: float) -> tuple[int, str]:
        return await _run(argv, timeout, env=self.launch.env, cwd=self.cwd)


class _ProcessHandle(_LocalHandle):
    def __init__(self, process: asyncio.subprocess.Process, launch: Launch, cwd: str) -> None:
        super().__init__(launch, cwd)
        self.process = process
        self._group_killed = False

    async def wait(self) -> Exit:
        code = await self.process.wait()
        if not self._group_killed:  # once, right as it ends: never a later group of that id
            self._group_killed = True
            _kill_group(self.process.pid)
        return self._exit(code)

    def running(self) -> bool:
        return self.process.returncode is None

    async def stop(self, grace: float) -> None:
        if self.process.returncode is not None:
            return
        await _stop_group(self.process.pid, grace, self.process.wait)


def _kill_group(pid: int) -> None:
    """SIGKILL what is left of the process group ``pid`` once its leader has ended.

    A container's other processes end with its main one (PID 1 of a PID namespace takes
    them with it). The group's id cannot go to a new process while any member is left, so
    this reaches only the container's own processes.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _stop_group(pid: int, grace: float, wait: Callable[[], Awaitable[object]]) -> None:
    """SIGTERM to the process group ``pid``, SIGKILL after ``grace`` seconds; until ``wait``.

    ``wait`` kills what is left of the group once its leader has ended.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    try:
        async with asyncio.timeout(grace):
            await wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        await wait()


async def _run(
    argv: list[str], timeout: float, *, env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[int, str]:
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return 126, str(exc)
    try:
        async with asyncio.timeout(timeout):
            out, _ = await process.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        return -1, f"timed out after {timeout:g}s"
    except asyncio.CancelledError:
        # Reap the child before giving up: an unreaped one outlives the event loop.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        raise
    return int(process.returncode or 0), out.decode(errors="replace")


class _FunctionHandle:
    """A container that is a task of the devcluster's event loop (an entry function)."""

    def __init__(self, launch: Launch, function: EntryFunction) -> None:
        self.launch = launch
        self.task = asyncio.get_running_loop().create_task(
            self._main(function), name=f"devcluster-entry-{launch.pod_name}/{launch.name}"
        )

    async def _main(self, function: EntryFunction) -> int:
        try:
            return int(await function(self.launch))
        except asyncio.CancelledError:
            return 128 + signal.SIGTERM
        except Exception as exc:  # what a crashing process would print, then exit 1
            with self.launch.log_path.open("a", encoding="utf-8") as log:
                log.write(f"{type(exc).__name__}: {exc}\n")
            return 1

    async def wait(self) -> Exit:
        return Exit(await asyncio.shield(self.task))

    def running(self) -> bool:
        return not self.task.done()

    async def stop(self, grace: float) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def exec(self, argv: list[str], timeout: float) -> tuple[int, str]:
        return 126, "an entry function runs in the devcluster: nothing to exec into"


class _ForkedHandle(_LocalHandle):
    """A container forked by the fork server: signalled by its group, its exit reported."""

    def __init__(
        self,
        pid: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        launch: Launch,
        cwd: str,
    ) -> None:
        super().__init__(launch, cwd)
        self.pid = pid
        self._writer = writer
        self._ended: Exit | None = None
        self._waiter = asyncio.get_running_loop().create_task(self._wait_exit(reader))

    async def _wait_exit(self, reader: asyncio.StreamReader) -> Exit:
        try:
            line = await reader.readline()
            code = int(json.loads(line)["exit"]) if line else None
        except (OSError, ValueError, KeyError):
            code = None
        finally:
            self._writer.close()
        # The child has ended (or the server is gone, and so is the child: it kills them
        # when it goes): what is left of its group goes with it.
        _kill_group(self.pid)
        if code is None:
            code = -signal.SIGKILL
        self._ended = self._exit(code)
        return self._ended

    async def wait(self) -> Exit:
        return await asyncio.shield(self._waiter)

    def running(self) -> bool:
        return self._ended is None

    async def stop(self, grace: float) -> None:
        if self._ended is not None:
            return
        await _stop_group(self.pid, grace, self.wait)


class ProcessRuntime:
    """Containers as child processes of the devcluster (the fast default).

    ``kyai`` worker containers of this environment (:data:`_forkserver.COMMANDS`) are forked
    from the fork server (:mod:`kyai_devcluster._forkserver`) unless
    ``KYAI_DEVCLUSTER_FORK_SERVER=0``; a container it cannot start is executed instead.
    """

    name = "process"

    def __init__(self, *, fork_server: bool | None = None) -> None:
        self.fork_server = _forkserver.enabled() if fork_server is None else fork_server

    def _forkable(self, executable: str, argv: list[str]) -> bool:
        if not self.fork_server or len(argv) < 2 or argv[1] not in _forkserver.COMMANDS:
            return False
        own = Path(sys.executable).parent / "kyai"
        with contextlib.suppress(OSError):
            return os.path.samefile(executable, own)
        return False

    async def image_present(self, image: str) -> bool:
        return False  # only the kubelet's local-image patterns run

    async def start(self, launch: Launch) -> Handle:
        if launch.function is not None:
            return _FunctionHandle(launch, launch.function)
        argv = launch.argv
        if not argv:
            raise StartError("no command given and the image has no entrypoint")
        path = launch.env.get("PATH", os.defpath)
        executable = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=path)
        if executable is None or not Path(executable).exists():
            raise StartError(f'exec: "{argv[0]}": executable file not found in $PATH')
        cwd = Path(launch.working_dir or launch.env.get("HOME", "/"))
        cwd.mkdir(parents=True, exist_ok=True)
        with launch.log_path.open("ab") as log:
            if self._forkable(executable, argv):
                try:
                    server = await asyncio.to_thread(_forkserver.ForkServer.shared)
                    pid, reader, writer = await server.start(
                        executable, argv, launch.env, str(cwd), log.fileno()
                    )
                except (_forkserver.ForkServerError, OSError) as exc:
                    logger.warning("fork server: %s; executing %s instead", exc, argv[0])
                else:
                    return _ForkedHandle(pid, reader, writer, launch, str(cwd))
            try:
                process = await asyncio.create_subprocess_exec(
                    executable,
                    *argv[1:],
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    env=launch.env,
                    cwd=str(cwd),
                    start_new_session=True,
                )
            except OSError as exc:
                raise StartError(f"could not start {argv[0]}: {exc}") from exc
        return _ProcessHandle(process, launch, str(cwd))


# -- podman ----------------------------------------------------------------------------------


def parse_quantity(text: str) -> int:
    """Bytes of a Kubernetes memory quantity (``512Mi``, ``1G``, ``1e9``)."""
    match = re.fullmatch(r"([0-9.]+(?:[eE][0-9]+)?)([KMGTPE]i?|[mk])?", text.strip())
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = float(match.group(1)), match.group(2) or ""
    factors = {
        "": 1,
        "m": 0.001,
        "k": 1e3,
        "K": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "P": 1e15,
        "E": 1e18,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
        "Ei": 2**60,
    }
    return int(number * factors[suffix])


def container_name(launch: Launch) -> str:
    """The podman name of a container (unique per pod uid and container)."""
    return f"kyai-{launch.namespace}-{launch.pod_name}-{launch.name}-{launch.pod_uid[:8]}"[:250]


def podman_run_argv(
    launch: Launch, *, podman: str = "podman", name: str | None = None
) -> list[str]:
    """The ``podman run`` command line for ``launch`` (env values are not in it)."""
    argv = [
        podman,
        "--runtime",
        PODMAN_RUNTIME,
        "run",
        "--name",
        name or container_name(launch),
        "--network",
        "host",
        "--no-hosts",
        "--pull",
        "never",
        "--stop-timeout",
        "2",
    ]
    for ulimit in PODMAN_ULIMITS:
        argv += ["--ulimit", ulimit]
    security = launch.security
    user = security.get("runAsUser")
    group = security.get("runAsGroup")
    if user is not None:
        argv += ["--user", f"{user}:{group}" if group is not None else str(user)]
    elif group is not None:
        raise StartError("runAsGroup without runAsUser is not supported by the devcluster")
    if security.get("readOnlyRootFilesystem"):
        argv += ["--read-only", "--read-only-tmpfs=false"]
    capabilities = security.get("capabilities") or {}
    for cap in capabilities.get("drop") or []:
        argv += ["--cap-drop", str(cap)]
    for cap in capabilities.get("add") or []:
        argv += ["--cap-add", str(cap)]
    if security.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    if security.get("privileged"):
        argv += ["--privileged"]
    if launch.memory_limit:
        argv += ["--memory", str(launch.memory_limit), "--memory-swap", str(launch.memory_limit)]
    for mount in launch.mounts:
        if mount.tmpfs:
            argv += ["--mount", f"type=tmpfs,destination={mount.path},tmpfs-mode=1777"]
        else:
            options = "ro" if mount.read_only else "rw"
            argv += ["--volume", f"{mount.host}:{mount.path}:{options}"]
    argv += ["--volume", f"{launch.termination_path}:{launch.termination_message_path}:rw"]
    for key in launch.env:
        if key in _PODMAN_OWN:
            argv += ["--env", f"{key}={launch.env[key]}"]
        else:
            argv += ["--env", key]  # the value comes from podman's environment
    if launch.working_dir:
        argv += ["--workdir", launch.working_dir]
    args = launch.argv
    if launch.entrypoint:
        if not args:
            raise StartError("empty command")
        argv += ["--entrypoint", json.dumps(args[:1])]
        args = args[1:]
    argv.append(launch.image)
    return argv + args


class _PodmanHandle:
    def __init__(
        self,
        process: asyncio.subprocess.Process,
        name: str,
        podman: str,
        memory_limit: int | None = None,
    ) -> None:
        self.process = process
        self.name = name
        self.podman = podman
        self.memory_limit = memory_limit
        self._stopping = False
        self._exit: Exit | None = None

    def running(self) -> bool:
        return self.process.returncode is None

    async def wait(self) -> Exit:
        if self._exit is None:
            code = await self.process.wait()
            oom = False
            rc, out = await _run(
                [
                    self.podman,
                    "inspect",
                    "--format",
                    "{{.State.OOMKilled}} {{.State.ExitCode}}",
                    self.name,
                ],
                30,
            )
            if rc == 0 and out.split():
                fields = out.split()
                oom = fields[0] == "true"
                with contextlib.suppress(ValueError, IndexError):
                    code = int(fields[1])
            await _run([self.podman, "rm", "--force", "--time", "0", self.name], 30)
            code = 128 - code if code < 0 else code
            # With runc on hybrid cgroups podman does not see the OOM kill: a SIGKILL of a
            # memory-limited container that the kubelet did not stop is one.
            oom = oom or (code == 137 and bool(self.memory_limit) and not self._stopping)
            self._exit = Exit(code, oom_killed=oom)
        return self._exit

    async def stop(self, grace: float) -> None:
        self._stopping = True
        if self.process.returncode is None:
            await _run(
                [self.podman, "stop", "--time", str(max(int(grace), 1)), self.name], grace + 30
            )
        try:
            async with asyncio.timeout(grace + 10):
                await self.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.wait()

    async def exec(self, argv: list[str], timeout: float) -> tuple[int, str]:
        return await _run([self.podman, "exec", self.name, *argv], timeout)


class PodmanRuntime:
    """Containers run by podman (root, host network, ``--runtime runc``)."""

    name = "podman"

    def __init__(self, podman: str | None = None) -> None:
        found = podman or shutil.which("podman")
        if found is None:
            raise RuntimeError("the podman runtime needs podman (apt-get install podman runc)")
        self.podman = found

    async def image_present(self, image: str) -> bool:
        code, _ = await _run([self.podman, "image", "exists", image], 60)
        return code == 0

    async def start(self, launch: Launch) -> Handle:
        name = container_name(launch)
        await _run([self.podman, "rm", "--force", "--time", "0", name], 30)
        argv = podman_run_argv(launch, podman=self.podman, name=name)
        env = {k: v for k, v in os.environ.items() if k in _PODMAN_OWN or k.startswith("LC_")}
        env.update({k: v for k, v in launch.env.items() if k not in _PODMAN_OWN})
        env.setdefault("PATH", os.defpath)
        with launch.log_path.open("ab") as log:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                    # conmon drops an "oom" marker in its working directory when a container
                    # is OOM-killed: keep it in the pod's log folder, not wherever we run.
                    cwd=str(launch.log_path.parent),
                    start_new_session=True,
                )
            except OSError as exc:
                raise StartError(f"could not run podman: {exc}") from exc
        return _PodmanHandle(process, name, self.podman, launch.memory_limit)
