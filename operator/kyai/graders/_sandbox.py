r"""Run untrusted Python in a confined child process and get its JSON answer back.

One call, one fresh interpreter (``python -I -B``): no inherited environment (no API keys, no
``KUBERNETES_*``), its own temporary working directory (removed afterwards), resource limits
(CPU time, address space, file size, open files, processes), a wall-clock timeout that kills the
child's whole process group, caps on its output, and, where the kernel has them, Landlock
(writes only inside the working directory; reads only below the Python installation and its
import path, so ``/var/run/secrets`` and the rest of the file system stay unreadable) and a
seccomp filter (no sockets, no ``fork``/``exec``, no signals to other processes, no raising of
limits). The child side is :mod:`kyai.graders._sandbox_child`; its docstring lists the steps.

The parent survives whatever the child does: every failure comes back as a
:class:`SandboxResult` with ``ok=False`` and an ``error_kind`` (see :data:`ERROR_KINDS`).

Protocol: newline-delimited JSON. The parent writes the configuration line to the child's
stdin; the child writes ``ready`` (the layers it could apply), any number of ``call`` messages
(answered by the parent with ``reply`` lines on stdin, through the ``bridge`` coroutine), then
one ``result`` or ``error``. Whatever the code prints goes to the captured output, of which
the tail is kept. The protocol shares the process with the code it runs, so a sandboxed
program that learns it can forge its own ``result``: the sandbox protects the machine, not the
honesty of a result against code written to attack this protocol.

Typical use::

    result = await run_sandboxed(source="def f(x):\n    return x * 2\n", function="f",
                                 payload=21, limits=SandboxLimits(timeout_seconds=5))
    result.ok, result.value            # True, 42
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ERROR_KINDS",
    "BridgeHandler",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "run_sandboxed",
    "sandbox_layers",
]

#: Why a sandboxed run failed (``SandboxResult.error_kind``):
#:
#: - ``timeout``: the wall-clock limit passed; the process group was killed.
#: - ``cpu_limit``: the CPU-time limit killed the child (SIGXCPU / SIGKILL).
#: - ``memory``: the code raised ``MemoryError`` (address-space limit).
#: - ``exception``: the code raised; ``exception_type`` and ``message`` say what.
#: - ``syntax``: inline source did not compile.
#: - ``unserializable``: the value could not be sent back as JSON.
#: - ``crash``: the child ended without a result (a signal, ``os._exit``, a segfault).
#: - ``output_limit``: the child printed more than ``max_output_bytes`` or sent a message
#:   longer than ``max_message_bytes``.
#: - ``protocol``: the child sent something that is not a protocol message.
#: - ``sandbox_error``: the sandbox itself could not start or load its target.
ERROR_KINDS = (
    "timeout",
    "cpu_limit",
    "memory",
    "exception",
    "syntax",
    "unserializable",
    "crash",
    "output_limit",
    "protocol",
    "sandbox_error",
)

_CHILD_FILE = Path(__file__).with_name("_sandbox_child.py")
_GIB = 1024**3
_MIB = 1024**2
#: Time the child gets to exit after its result, before it is killed.
_EXIT_GRACE_SECONDS = 2.0

#: ``bridge(method, params)``: the parent-side handler of the child's ``call`` messages. It
#: returns a JSON value for the child, or raises to make the child's call fail with the
#: exception's message.
BridgeHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]


class SandboxError(RuntimeError):
    """The sandbox was misused (bad arguments); failures of the child never raise."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandboxed run may use. Every field has a default.

    Attributes:
        timeout_seconds: wall-clock limit for the whole run, start-up and bridge calls
            included; then the process group is killed (``timeout``).
        cpu_seconds: CPU-time limit (RLIMIT_CPU); default ``ceil(timeout_seconds) + 1``.
        memory_bytes: address-space limit (RLIMIT_AS), 1 GiB by default.
        file_size_bytes: largest file the code may write (RLIMIT_FSIZE), 16 MiB.
        open_files: file descriptors (RLIMIT_NOFILE), 64.
        max_processes: RLIMIT_NPROC, 64; it does not bind root, which is why seccomp refuses
            process creation as well.
        max_output_bytes: printed output (stdout + stderr) beyond which the child is killed
            (``output_limit``), 4 MiB.
        output_tail_bytes: how much of the end of that output the result keeps, 8 KiB.
        max_message_bytes: longest protocol message (the result included), 16 MiB.
        max_calls: bridge calls allowed per run; later calls are refused (the child's call
            raises), 0 by default.
        extra_read_paths: more paths the code may read (Landlock), e.g. a data directory.
    """

    timeout_seconds: float = 30.0
    cpu_seconds: int | None = None
    memory_bytes: int = 1 * _GIB
    file_size_bytes: int = 16 * _MIB
    open_files: int = 64
    max_processes: int = 64
    max_output_bytes: int = 4 * _MIB
    output_tail_bytes: int = 8 * 1024
    max_message_bytes: int = 16 * _MIB
    max_calls: int = 0
    extra_read_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.timeout_seconds > 0 and math.isfinite(self.timeout_seconds)):
            raise SandboxError(
                f"timeout_seconds must be a positive number, got {self.timeout_seconds!r}."
            )
        for name in ("memory_bytes", "file_size_bytes", "open_files", "max_processes"):
            if getattr(self, name) < 1:
                raise SandboxError(f"{name} must be at least 1, got {getattr(self, name)!r}.")
        if self.max_calls < 0:
            raise SandboxError(f"max_calls must not be negative, got {self.max_calls!r}.")

    @property
    def effective_cpu_seconds(self) -> int:
        """The CPU-time limit in force."""
        if self.cpu_seconds is not None:
            return max(1, int(self.cpu_seconds))
        return math.ceil(self.timeout_seconds) + 1


@dataclass(frozen=True)
class SandboxResult:
    """What came back from one sandboxed run.

    Attributes:
        ok: the target returned; ``value`` is its return value (JSON-decoded; non-finite
            floats survive as ``nan``/``inf``; a value JSON cannot hold arrives as
            ``{"$unserializable": <type name>, "repr": ...}``).
        error_kind: one of :data:`ERROR_KINDS` when not ok.
        message: a one-line description of the failure.
        exception_type: the exception's class name for ``exception`` / ``memory`` / ``syntax``.
        traceback: the child's traceback (its tail), when it raised.
        output_tail: the end of what the code printed (stdout and stderr together).
        output_bytes: how much it printed in all.
        returncode: the child's exit status (negative: killed by that signal).
        duration_seconds: wall-clock time of the run.
        calls: bridge calls the child made (refused ones included).
        layers: which confinement layers the child applied (``rlimits``, ``landlock``,
            ``seccomp``); empty when it never got that far.
        notes: why a layer is missing, and other remarks.
    """

    ok: bool
    value: Any = None
    error_kind: str | None = None
    message: str | None = None
    exception_type: str | None = None
    traceback: str | None = None
    output_tail: str = ""
    output_bytes: int = 0
    returncode: int | None = None
    duration_seconds: float = 0.0
    calls: int = 0
    layers: Mapping[str, bool] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _child_env(workdir: str) -> dict[str, str]:
    """The child's whole environment: nothing from the parent."""
    return {
        "HOME": workdir,
        "TMPDIR": workdir,
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


class _Run:
    """The parent's side of one run: the conversation, the output drain and the verdict."""

    def __init__(self, limits: SandboxLimits, bridge: BridgeHandler | None) -> None:
        self.limits = limits
        self.bridge = bridge
        self.tail = bytearray()
        self.output_bytes = 0
        self.output_overrun = False
        self.layers: dict[str, bool] = {}
        self.notes: list[str] = []
        self.final: dict[str, Any] | None = None
        self.failure: tuple[str, str] | None = None
        self.calls = 0

    async def drain(self, stream: asyncio.StreamReader, proc: asyncio.subprocess.Process) -> None:
        keep = self.limits.output_tail_bytes
        while chunk := await stream.read(65536):
            self.output_bytes += len(chunk)
            self.tail += chunk
            if len(self.tail) > keep:
                del self.tail[: len(self.tail) - keep]
            if self.output_bytes > self.limits.max_output_bytes and not self.output_overrun:
                self.output_overrun = True
                _kill_group(proc)

    async def converse(self, proc: asyncio.subprocess.Process, config: bytes) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(config)
            await proc.stdin.drain()
        while True:
            try:
                line = await proc.stdout.readline()
            except ValueError:  # longer than the stream limit
                self.failure = (
                    "output_limit",
                    "The sandboxed code sent a message longer than "
                    f"{self.limits.max_message_bytes} bytes.",
                )
                return
            if not line:
                return
            try:
                message = json.loads(line)
                kind = message["type"]
            except (ValueError, TypeError, KeyError):
                self.failure = ("protocol", "The sandboxed code broke the message protocol.")
                return
            if kind == "ready":
                self.layers = {str(k): bool(v) for k, v in dict(message["layers"]).items()}
                self.notes.extend(str(note) for note in message.get("notes", ()))
            elif kind == "call":
                await self._answer(proc, message)
            elif kind in ("result", "error"):
                self.final = message
                return
            else:
                self.failure = ("protocol", f"Unknown message type {kind!r} from the child.")
                return

    async def _answer(self, proc: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        self.calls += 1
        reply: dict[str, Any] = {"type": "reply", "id": message.get("id")}
        if self.bridge is None:
            reply.update(ok=False, error="No calls to the parent are allowed in this sandbox.")
        elif self.calls > self.limits.max_calls:
            reply.update(
                ok=False,
                error=f"The call limit ({self.limits.max_calls} per run) is exhausted; "
                "the call was refused.",
            )
        else:
            method = str(message.get("method"))
            params = message.get("params")
            try:
                value = await self.bridge(method, dict(params) if isinstance(params, dict) else {})
                reply.update(ok=True, value=value)
            except Exception as exc:
                reply.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        try:
            data = json.dumps(reply, ensure_ascii=False).encode("utf-8") + b"\n"
        except (TypeError, ValueError) as exc:
            data = (
                json.dumps(
                    {
                        "type": "reply",
                        "id": message.get("id"),
                        "ok": False,
                        "error": f"The answer could not be encoded as JSON: {exc}",
                    }
                ).encode("utf-8")
                + b"\n"
            )
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(data)
            await proc.stdin.drain()


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's process group (its session; the child leads it).

    Not ``proc.kill()``: it polls first, and reaping the child there races asyncio's own
    child watcher (which would then report exit status 255).
    """
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _config(
    *,
    source: str | None,
    module_file: Path | None,
    function: str | None,
    filename: str,
    payload: Any,
    limits: SandboxLimits,
) -> bytes:
    target: dict[str, Any]
    if module_file is not None:
        target = {"module_file": str(module_file), "function": function}
    else:
        target = {"source": source, "function": function, "filename": filename}
    config = {
        "target": target,
        "payload": payload,
        "limits": {
            "cpu_seconds": limits.effective_cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "file_size_bytes": limits.file_size_bytes,
            "open_files": limits.open_files,
            "max_processes": limits.max_processes,
        },
        "extra_read_paths": [
            *limits.extra_read_paths,
            *([str(module_file.parent)] if module_file is not None else []),
        ],
    }
    try:
        return json.dumps(config, ensure_ascii=False).encode("utf-8") + b"\n"
    except (TypeError, ValueError) as exc:
        raise SandboxError(f"The payload must be JSON-serialisable: {exc}") from exc


async def run_sandboxed(
    function: str | None = None,
    payload: Any = None,
    *,
    source: str | None = None,
    module_file: str | os.PathLike[str] | None = None,
    filename: str = "<sandbox>",
    limits: SandboxLimits | None = None,
    bridge: BridgeHandler | None = None,
) -> SandboxResult:
    """Run code in a fresh confined interpreter and return what it returned.

    Give exactly one of:

    - ``source``: Python source compiled and run as a module (``filename`` names it in
      tracebacks); then ``function(payload)`` is called and its return value is the result,
      or, without ``function``, the result is ``None`` once the module ran to its end.
    - ``module_file``: a trusted harness module, loaded before the confinement starts; then
      ``function(payload, host)`` is called after it, where ``host.call(method, params)``
      sends a request to ``bridge`` and returns its answer (at most ``limits.max_calls``).

    ``payload`` must be JSON-serialisable (non-finite floats allowed). The function never
    raises for anything the child does; it raises :class:`SandboxError` for bad arguments.
    """
    limits = limits or SandboxLimits()
    if (source is None) == (module_file is None):
        raise SandboxError("Give exactly one of source= and module_file=.")
    if module_file is not None and not function:
        raise SandboxError("A module_file target needs the name of its entry function.")
    harness = Path(module_file).resolve() if module_file is not None else None
    config = _config(
        source=source,
        module_file=harness,
        function=function,
        filename=filename,
        payload=payload,
        limits=limits,
    )
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="kyai-sandbox-")
    run = _Run(limits, bridge)
    proc: asyncio.subprocess.Process | None = None
    try:
        try:
            proc = await _start_child(workdir, limits)
        except OSError as exc:
            return SandboxResult(
                ok=False,
                error_kind="sandbox_error",
                message=f"The sandbox process could not start: {exc}",
                duration_seconds=time.monotonic() - started,
            )
        timed_out = await _supervise(run, proc, config)
        return _verdict(run, proc.returncode, timed_out, time.monotonic() - started)
    finally:
        if proc is not None and proc.returncode is None:
            _kill_group(proc)
            with contextlib.suppress(Exception):
                await proc.wait()
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
        shutil.rmtree(workdir, ignore_errors=True)


async def _start_child(workdir: str, limits: SandboxLimits) -> asyncio.subprocess.Process:
    """The confined interpreter, in its own session, in a fresh working directory."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-B",
        str(_CHILD_FILE),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=workdir,
        env=_child_env(workdir),
        start_new_session=True,
        limit=limits.max_message_bytes,
    )


async def _supervise(run: _Run, proc: asyncio.subprocess.Process, config: bytes) -> bool:
    """Talk to the child until it answers, fails or runs out of time; True when it timed out.

    The child (and, where seccomp is missing, its descendants) is gone when this returns.
    """
    limits = run.limits
    timed_out = False
    assert proc.stderr is not None
    drain = asyncio.create_task(run.drain(proc.stderr, proc))
    try:
        async with asyncio.timeout(limits.timeout_seconds):
            await run.converse(proc, config)
            if run.final is None and run.failure is None:
                await proc.wait()
    except TimeoutError:
        timed_out = True
    if run.failure is not None or timed_out:
        _kill_group(proc)
    try:
        async with asyncio.timeout(_EXIT_GRACE_SECONDS):
            await proc.wait()
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
    # The child's own descendants (only possible where seccomp is missing) go too.
    if not run.layers.get("seccomp"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        async with asyncio.timeout(_EXIT_GRACE_SECONDS):
            await drain
    except TimeoutError:
        drain.cancel()
    return timed_out


def _verdict(run: _Run, returncode: int | None, timed_out: bool, duration: float) -> SandboxResult:
    limits = run.limits
    common: dict[str, Any] = {
        "output_tail": run.tail.decode("utf-8", errors="replace"),
        "output_bytes": run.output_bytes,
        "returncode": returncode,
        "duration_seconds": duration,
        "calls": run.calls,
        "layers": dict(run.layers),
        "notes": tuple(run.notes),
    }
    if timed_out:
        return SandboxResult(
            ok=False,
            error_kind="timeout",
            message=f"The code did not finish within {limits.timeout_seconds:g} s.",
            **common,
        )
    if run.output_overrun:
        return SandboxResult(
            ok=False,
            error_kind="output_limit",
            message=f"The code printed more than {limits.max_output_bytes} bytes.",
            **common,
        )
    if run.failure is not None:
        kind, message = run.failure
        return SandboxResult(ok=False, error_kind=kind, message=message, **common)
    final = run.final
    if final is None:
        return SandboxResult(ok=False, **_no_result(returncode, limits), **common)
    if final["type"] == "result":
        return SandboxResult(ok=True, value=final.get("value"), **common)
    kind = str(final.get("kind") or "exception")
    if kind not in ERROR_KINDS:
        kind = "protocol"
    message = str(final.get("message") or kind)
    if kind == "memory":
        message = (
            f"{message}: the code exceeded its memory limit "
            f"({limits.memory_bytes} bytes of address space)."
        )
    return SandboxResult(
        ok=False,
        error_kind=kind,
        message=message,
        exception_type=final.get("exception_type"),
        traceback=final.get("traceback"),
        **common,
    )


def _no_result(returncode: int | None, limits: SandboxLimits) -> dict[str, Any]:
    """Name the reason a child ended without a result."""
    if returncode is not None and returncode < 0:
        signum = -returncode
        name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
        if signum == signal.SIGXCPU:
            return {
                "error_kind": "cpu_limit",
                "message": f"The code used up its CPU time ({limits.effective_cpu_seconds} s).",
            }
        hint = " (the CPU-time hard limit or the out-of-memory killer)" if signum == 9 else ""
        return {"error_kind": "crash", "message": f"The code was killed by {name}{hint}."}
    return {
        "error_kind": "crash",
        "message": f"The code ended (exit status {returncode}) without returning a result.",
    }


async def sandbox_layers(*, timeout_seconds: float = 30.0) -> SandboxResult:
    """Start an empty sandbox and report which confinement layers this machine applies.

    ``result.layers`` maps ``rlimits``, ``landlock`` and ``seccomp`` to whether they were
    applied; ``result.notes`` says why one was not. Useful at start-up and in diagnostics.
    """
    return await run_sandboxed(source="", limits=SandboxLimits(timeout_seconds=timeout_seconds))
