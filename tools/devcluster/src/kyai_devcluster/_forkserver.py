"""A fork server for the process runtime: `kyai` worker containers without a fresh interpreter.

A worker pod of the process runtime is a fresh ``kyai generate`` (or ``judge``, ``run``,
``lm-eval``) process; before it sends its first request it imports aiohttp, the Kubernetes
client (its status reports), the API models and, for a judge, scipy.stats: about 1 s of CPU
for a generator and 1.8 s for a judge, more than the work of a test's few rows. This server
imports those once (:data:`PRELOAD`) and forks a child per container, which then runs as the
process would have: its own session (the kubelet signals the group), working directory,
environment (``os.environ`` replaced, so subprocesses inherit it), ``sys.argv``, stdin from
``/dev/null``, stdout and stderr on the container's log (unbuffered with
``PYTHONUNBUFFERED``), default signal handlers, the ``sitecustomize`` shim of its
``PYTHONPATH`` imported with its environment, and its exit status reported as a process's.

What a fresh interpreter would differ in: modules already imported keep the state they had at
import (the preloaded modules read no environment at import; ``random`` is reseeded at fork
by CPython). ``KYAI_DEVCLUSTER_FORK_SERVER=0`` turns the server off (every container is
executed as before).

Protocol (one Unix stream connection per container): the client sends one JSON line
``{"argv", "env", "cwd"}`` with the log's file descriptor attached (``SCM_RIGHTS``); the
server answers ``{"pid": N}`` once forked and ``{"exit": CODE}`` (``os.waitstatus_to_exitcode``:
negative for a signal) when the child ends, then closes. A child is never left behind: when
the client's connection closes first, the server kills the child's group.

Run as ``python -m kyai_devcluster._forkserver SOCKET`` by :class:`ForkServer`; it exits when
its standard input (a pipe its parent holds) reaches end of file.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path
from typing import Any

#: The variable that turns the fork server off (``0``).
ENABLE_VARIABLE = "KYAI_DEVCLUSTER_FORK_SERVER"
#: The ``kyai`` subcommands of worker containers that run forked.
COMMANDS = frozenset({"generate", "judge", "run", "lm-eval"})
#: Imported once by the server (what those commands import before their first request).
PRELOAD = (
    "kyai.cli",
    "kyai.evaluation.cli",
    "kyai.evaluation._cli_run",
    "kyai.evaluation._generate",
    "kyai.evaluation._judge",
    "kyai.evaluation._report",
    "kyai.worker_status",
    "kyai.graders",
    "kyai.stats",
    "kyai.lmeval.cli",
    "kubernetes.client",
    "kubernetes.config",
    "aiohttp",
    "scipy.stats",
)
_MAX_REQUEST = 4 * 1024 * 1024


# -- the server (its own process) ------------------------------------------------------------


def _preload() -> dict[str, float]:
    """Import :data:`PRELOAD`; the modification times of the project's imported files."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    return {path: os.stat(path).st_mtime for path in _own_files()}


def _own_files() -> list[str]:
    files = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and name.split(".", 1)[0] in ("kyai", "kyai_devcluster", "kyai_testing"):
            files.append(path)
    return files


def _stale(stamps: dict[str, float]) -> bool:
    """Whether a preloaded file of the project changed (an edit while a devcluster runs)."""
    for path, stamp in stamps.items():
        try:
            if os.stat(path).st_mtime != stamp:
                return True
        except OSError:
            return True
    return False


def _child(request: dict[str, Any], log_fd: int) -> None:
    """Become the container's process (never returns)."""
    code = 1
    try:
        os.setsid()
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.set_wakeup_fd(-1)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])  # a container starts with none blocked
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.closerange(3, 65536)
        env: dict[str, str] = request["env"]
        os.environ.clear()
        os.environ.update(env)
        os.chdir(request["cwd"])
        unbuffered = bool(env.get("PYTHONUNBUFFERED"))
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        # As a fresh interpreter on a log file: stdout block-buffered, stderr line-buffered;
        # both written through with PYTHONUNBUFFERED (as every worker pod sets it).
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(
            2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
        )
        if unbuffered:
            sys.stdout.reconfigure(write_through=True)
            sys.stderr.reconfigure(write_through=True)
        for name in ("stdin", "stdout", "stderr"):
            setattr(sys, f"__{name}__", getattr(sys, name))
        with contextlib.suppress(AttributeError):
            import time

            time.tzset()
        extra = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        sys.path[1:1] = [entry for entry in extra if entry not in sys.path]
        if any((Path(entry) / "sitecustomize.py").is_file() for entry in extra):
            sys.modules.pop("sitecustomize", None)
            importlib.import_module("sitecustomize")
        argv: list[str] = request["argv"]
        sys.argv = [request["executable"], *argv[1:]]
        sys.path[0] = os.path.dirname(request["executable"])  # a script's own directory
        script = types.ModuleType("__main__")  # the console script, not this server
        script.__file__ = request["executable"]
        sys.modules["__main__"] = script
        from kyai.cli import main

        try:
            code = main(argv[1:])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = 128 + signal.SIGINT
    except BaseException:  # what an uncaught exception does to a process: traceback, 1
        import traceback

        with contextlib.suppress(Exception):
            traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF if isinstance(code, int) else 1)


def _send(connection: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        connection.sendall(json.dumps(message).encode() + b"\n")


def serve(path: str) -> None:
    """Serve on the Unix socket ``path`` until standard input ends.

    A request that finds a preloaded file of the project changed is refused and the server
    exits: the client executes that container and starts a new server for the next.
    """
    stamps = _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    children: dict[int, socket.socket] = {}
    owners: dict[socket.socket, int] = {}
    retired = False
    print("ready", flush=True)
    while not (retired and not children):
        for key, _ in selector.select(timeout=1.0 if retired else None):
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):
                    for pid in children:
                        with contextlib.suppress(OSError):
                            os.killpg(pid, signal.SIGKILL)
                    return
            elif key.data == "accept":
                connection, _ = listener.accept()
                if _stale(stamps):
                    _send(connection, {"error": "the project's code changed since it started"})
                    connection.close()
                    # No new request; the running children are still reported, then it exits.
                    selector.unregister(listener)
                    listener.close()
                    retired = True
                    continue
                _start(connection, children, owners, selector)
            elif key.data == "child":
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
                _reap(children, owners, selector)
            else:  # a client's connection: closed (or unexpected data) kills its child
                client = key.fileobj
                assert isinstance(client, socket.socket)
                with contextlib.suppress(OSError):
                    if client.recv(4096):
                        continue
                owned = owners.pop(client, None)
                selector.unregister(client)
                client.close()
                if owned is not None:
                    children.pop(owned, None)
                    with contextlib.suppress(OSError):
                        os.killpg(owned, signal.SIGKILL)
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(owned, 0)


def _start(
    connection: socket.socket,
    children: dict[int, socket.socket],
    owners: dict[socket.socket, int],
    selector: selectors.BaseSelector,
) -> None:
    try:
        data, fds, _flags, _address = socket.recv_fds(connection, _MAX_REQUEST, 4)
        while not data.endswith(b"\n"):
            more = connection.recv(_MAX_REQUEST)
            if not more:
                raise OSError("the request ended early")
            data += more
        request = json.loads(data)
        if len(fds) != 1:
            raise OSError(f"expected one file descriptor, got {len(fds)}")
    except (OSError, ValueError) as exc:
        _send(connection, {"error": str(exc)})
        connection.close()
        return
    pid = os.fork()
    if pid == 0:
        _child(request, fds[0])
    os.close(fds[0])
    children[pid] = connection
    owners[connection] = pid
    _send(connection, {"pid": pid})
    selector.register(connection, selectors.EVENT_READ, "client")


def _reap(
    children: dict[int, socket.socket],
    owners: dict[socket.socket, int],
    selector: selectors.BaseSelector,
) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is None:
            continue
        owners.pop(connection, None)
        _send(connection, {"exit": os.waitstatus_to_exitcode(status)})
        selector.unregister(connection)
        connection.close()


# -- the client (in the devcluster) ----------------------------------------------------------


class ForkServerError(Exception):
    """The fork server cannot start a container (the runtime then executes it)."""


class ForkServer:
    """One server process, shared by the devclusters of this process; started on first use."""

    _lock = threading.Lock()
    _shared: ForkServer | None = None

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="kyai-forkserver-")
        #: Set when it refused a request (the project's code changed): not used again.
        self.retired = False
        self.path = os.path.join(self._directory, "socket")
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kyai_devcluster._forkserver", self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=self._directory,  # nothing to import from: ``-m`` puts it on sys.path
            start_new_session=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            self.process.kill()
            self.close()
            raise ForkServerError("the fork server did not start")

    @classmethod
    def shared(cls) -> ForkServer:
        """The process's fork server (a new one if the last one is gone or retired)."""
        with cls._lock:
            current = cls._shared
            if current is not None and current.process.poll() is not None:
                current.close()
                current = None
            if current is None or current.retired:
                # A retired server still reports its running children until they end; it is
                # kept (closing its pipe would end them) and closed at exit.
                current = cls._shared = ForkServer()
                atexit.register(current.close)
            return current

    def close(self) -> None:
        """Stop the server (its children are killed) and remove its socket."""
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self._directory, ignore_errors=True)

    async def start(
        self, executable: str, argv: list[str], env: dict[str, str], cwd: str, log_fd: int
    ) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter]:
        """Fork a child running ``argv``; its pid and the connection that reports its exit."""
        message = {"executable": executable, "argv": argv, "env": env, "cwd": cwd}
        payload = json.dumps(message).encode() + b"\n"
        request = asyncio.ensure_future(asyncio.to_thread(self._request, payload, log_fd))
        try:
            sock, answer = await asyncio.shield(request)
        except (OSError, ValueError) as exc:
            self.retired = True
            raise ForkServerError(f"the fork server: {exc}") from exc
        except asyncio.CancelledError:
            # Abandoned: its connection closes when the request is done, which ends the child.
            request.add_done_callback(_close_connection)
            raise
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock)
        except BaseException:
            sock.close()
            raise
        return int(answer["pid"]), reader, writer

    def _request(self, payload: bytes, log_fd: int) -> tuple[socket.socket, dict[str, Any]]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
            # The descriptor travels with the first bytes, the rest follows.
            sent = socket.send_fds(sock, [payload[:4096]], [log_fd])
            sock.sendall(payload[sent:])
            line = b""
            while not line.endswith(b"\n"):
                chunk = sock.recv(1)
                if not chunk:
                    raise OSError("the fork server closed the connection")
                line += chunk
            answer = json.loads(line)
            if "pid" not in answer:
                raise OSError(str(answer.get("error")))
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        return sock, answer


def _close_connection(request: asyncio.Future[tuple[socket.socket, dict[str, Any]]]) -> None:
    if not request.cancelled() and request.exception() is None:
        request.result()[0].close()


def enabled() -> bool:
    """Whether worker containers run forked (``KYAI_DEVCLUSTER_FORK_SERVER`` is not ``0``)."""
    return os.environ.get(ENABLE_VARIABLE, "1").strip() not in ("0", "false", "no")


if __name__ == "__main__":
    serve(sys.argv[1])
