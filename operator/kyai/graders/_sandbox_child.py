"""The sandbox's child side: confine this process, then run one piece of untrusted Python.

This file runs as a script (``python -I -B _sandbox_child.py``) in a fresh interpreter started
by :mod:`kyai.graders._sandbox`; it imports only the standard library (plus ``pyseccomp`` and
``landlock`` when installed), never ``kyai``, so that start-up stays fast and nothing of the
parent leaks in.

Start-up, in order:

1. read one JSON line from stdin: the configuration (target, payload, limits);
2. load the trusted harness module, if the target names one (before any confinement);
3. move the protocol off the standard streams: messages go out on a private copy of fd 1 and
   come in on a private copy of fd 0; fd 1 then points at fd 2 (so ``print`` lands in the
   captured output) and fd 0 at ``/dev/null``;
4. resource limits (CPU seconds, address space, file size, open files, processes, no core);
5. Landlock: reads only below the Python installation, its import path and a few devices,
   writes only below the working directory;
6. seccomp: no sockets, no process creation or ``exec``, no signals to other processes, no
   raising of limits, no ptrace, mounts, namespaces, io_uring, chmod/chown...;
7. report which layers are active (a ``ready`` message), then run the target and report its
   value (``result``) or its failure (``error``), and leave with ``os._exit``.

A layer that cannot be applied (an old kernel, no libseccomp) is skipped with a note in the
``ready`` message; the parent records it.
"""

from __future__ import annotations

import builtins
import errno
import importlib
import importlib.util
import json
import numbers
import os
import resource
import signal
import sys
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: Syscalls refused with EPERM once the target runs.
DENIED_SYSCALLS = (
    # network
    "socket",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    # process creation and replacement (clone is handled apart: threads stay allowed)
    "fork",
    "vfork",
    "execve",
    "execveat",
    # other processes
    "kill",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    # raising limits (getrlimit goes through prlimit64 with a null new limit: allowed)
    "setrlimit",
    # what Landlock does not cover: metadata and path truncation
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "truncate",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "open_by_handle_at",
    "name_to_handle_at",
    # the system as a whole
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "swapon",
    "swapoff",
    "reboot",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "acct",
    "quotactl",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "fanotify_init",
    "keyctl",
    "add_key",
    "request_key",
    "syslog",
    "vhangup",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)

_CLONE_THREAD = 0x00010000
_MAX_TEXT = 4000


class SandboxCallError(RuntimeError):
    """The parent refused or failed a call the sandboxed code asked for."""


class Host:
    """The sandboxed code's line to the parent: synchronous request/response messages."""

    def __init__(self, send: Callable[[dict[str, Any]], None], receive: Callable[[], Any]):
        self._send = send
        self._receive = receive
        self._next_id = 0

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """Ask the parent to run ``method`` with ``params``; return its JSON answer."""
        self._next_id += 1
        call_id = self._next_id
        self._send({"type": "call", "id": call_id, "method": method, "params": params})
        reply = self._receive()
        if not isinstance(reply, dict) or reply.get("id") != call_id:
            raise SandboxCallError("The parent answered out of turn; the call failed.")
        if not reply.get("ok"):
            raise SandboxCallError(str(reply.get("error") or "The call failed."))
        return reply.get("value")


def _jsonable(value: Any) -> Any:
    """``json.dumps`` fallback: real numbers as floats, anything else as a marker object."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return {"$unserializable": type(value).__name__, "repr": repr(value)[:_MAX_TEXT]}


def _read_paths(extra: list[str]) -> list[str]:
    """Directories and files the code may read: the interpreter and its import path."""
    candidates = [
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *sys.path,
        "/usr/lib",
        "/usr/lib64",
        "/usr/local/lib",
        "/lib",
        "/lib64",
        "/usr/share/zoneinfo",
        "/dev/urandom",
        "/dev/random",
        "/dev/zero",
        *extra,
    ]
    seen: list[str] = []
    for path in candidates:
        if not path or not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        # Never open the whole file system because some prefix happens to be "/".
        if real == "/" or real in seen:
            continue
        seen.append(real)
    return seen


def _apply_rlimits(limits: dict[str, Any], notes: list[str]) -> bool:
    cpu = int(limits["cpu_seconds"])
    wanted = [
        # Soft CPU limit: SIGXCPU; one second later the hard limit: SIGKILL.
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, int(limits["memory_bytes"]), None),
        (resource.RLIMIT_FSIZE, int(limits["file_size_bytes"]), None),
        (resource.RLIMIT_NOFILE, int(limits["open_files"]), None),
        (resource.RLIMIT_NPROC, int(limits["max_processes"]), None),
        (resource.RLIMIT_CORE, 0, None),
    ]
    try:
        for which, soft, hard in wanted:
            resource.setrlimit(which, (soft, soft if hard is None else hard))
    except (ValueError, OSError) as exc:
        notes.append(f"resource limits incomplete: {exc}")
        return False
    # Past the file-size limit, write() fails with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return True


def _import_optional(name: str, notes: list[str]) -> Any:
    """Import a confinement library now, while the file system is still open to us."""
    try:
        return importlib.import_module(name)
    except Exception as exc:
        notes.append(f"{name} cannot be imported ({type(exc).__name__}: {exc})")
        return None


def _apply_landlock(landlock: Any, workdir: str, extra_read: list[str], notes: list[str]) -> bool:
    if landlock is None:
        notes.append(
            "landlock is not applied: file access is not confined to the working directory"
        )
        return False
    try:
        import ctypes

        access = landlock.FSAccess
        ctypes.set_errno(0)
        ruleset = landlock.Ruleset()
        read_dir = access.READ_FILE | access.READ_DIR | access.EXECUTE
        read_file = access.READ_FILE | access.EXECUTE
        for path in _read_paths(extra_read):
            ctypes.set_errno(0)
            ruleset.allow(path, rules=read_dir if os.path.isdir(path) else read_file)
        ctypes.set_errno(0)
        ruleset.allow("/dev/null", rules=access.READ_FILE | access.WRITE_FILE)
        ctypes.set_errno(0)
        ruleset.allow(workdir)
        ctypes.set_errno(0)
        ruleset.apply()
    except Exception as exc:
        notes.append(
            f"landlock unavailable ({type(exc).__name__}: {exc}); file access is not "
            "confined to the working directory"
        )
        return False
    return True


def _apply_seccomp(seccomp: Any, notes: list[str]) -> bool:
    if seccomp is None:
        notes.append(
            "seccomp is not applied: network, process creation and signals are not blocked"
        )
        return False
    try:
        deny = seccomp.ERRNO(errno.EPERM)
        flt = seccomp.SyscallFilter(seccomp.ALLOW)
        unknown: list[str] = []
        for name in DENIED_SYSCALLS:
            try:
                flt.add_rule(deny, name)
            except (OSError, ValueError, RuntimeError):
                unknown.append(name)
        # Threads are fine, new processes are not: clone without CLONE_THREAD is refused;
        # clone3 hides its flags in memory, so it says ENOSYS and libc falls back to clone.
        flt.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))
        flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        # Reading limits passes a null new limit; setting one does not.
        flt.add_rule(deny, "prlimit64", seccomp.Arg(2, seccomp.NE, 0))
        flt.load()
    except Exception as exc:
        notes.append(
            f"seccomp unavailable ({type(exc).__name__}: {exc}); network, process "
            "creation and signals are not blocked"
        )
        return False
    if unknown:
        notes.append("seccomp: syscalls unknown here, not filtered: " + ", ".join(unknown))
    return True


def _load_target(target: dict[str, Any]) -> tuple[ModuleType | None, str | None]:
    """Load a trusted harness module (before confinement); None for inline source."""
    module_file = target.get("module_file")
    if not module_file:
        return None, None
    spec = importlib.util.spec_from_file_location("__sandbox_harness__", module_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"Cannot load the harness {module_file!r}.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module, str(target["function"])


def main() -> None:
    """Run the sandboxed target described by the configuration line on stdin."""
    config = json.loads(sys.stdin.buffer.readline())
    target: dict[str, Any] = config["target"]
    limits: dict[str, Any] = config["limits"]
    workdir = os.getcwd()

    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.set_inheritable(proto_in.fileno(), False)
    os.set_inheritable(proto_out.fileno(), False)

    def send(message: dict[str, Any]) -> None:
        data = json.dumps(message, default=_jsonable, ensure_ascii=False).encode("utf-8")
        proto_out.write(data + b"\n")

    def receive() -> Any:
        line = proto_in.readline()
        if not line:
            raise SandboxCallError("The parent closed the channel.")
        return json.loads(line)

    def fail(kind: str, exc: BaseException) -> None:
        tb = "".join(traceback.format_exception(exc))
        send(
            {
                "type": "error",
                "kind": kind,
                "exception_type": type(exc).__name__,
                "message": (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)[
                    :_MAX_TEXT
                ],
                "traceback": tb[-_MAX_TEXT:],
            }
        )

    try:
        harness, function = _load_target(target)
    except BaseException as exc:
        fail("sandbox_error", exc)
        os._exit(0)

    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)

    notes: list[str] = []
    landlock = _import_optional("landlock", notes)
    seccomp = _import_optional("pyseccomp", notes)
    extra_read = [str(path) for path in config.get("extra_read_paths", [])]
    layers = {
        "rlimits": _apply_rlimits(limits, notes),
        "landlock": _apply_landlock(landlock, workdir, extra_read, notes),
        "seccomp": _apply_seccomp(seccomp, notes),
    }
    send({"type": "ready", "layers": layers, "notes": notes})

    host = Host(send, receive)
    try:
        if harness is not None and function is not None:
            value = getattr(harness, function)(config.get("payload"), host)
        else:
            value = _run_source(target, config.get("payload"))
    except MemoryError as exc:
        fail("memory", exc)
    except BaseException as exc:
        fail("syntax" if isinstance(exc, SyntaxError) and _is_own(exc) else "exception", exc)
    else:
        try:
            send({"type": "result", "value": value})
        except (TypeError, ValueError, RecursionError) as exc:
            fail("unserializable", exc)
        except MemoryError as exc:
            fail("memory", exc)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)


_SOURCE_FILENAME = "<sandbox>"


def _is_own(exc: SyntaxError) -> bool:
    """Whether a SyntaxError is the target source's own (not one raised while it ran)."""
    return getattr(exc, "_kyai_compile", False) is True


def _run_source(target: dict[str, Any], payload: Any) -> Any:
    filename = str(target.get("filename") or _SOURCE_FILENAME)
    try:
        code = compile(str(target["source"]), filename, "exec")
    except SyntaxError as exc:
        exc._kyai_compile = True  # type: ignore[attr-defined]
        raise
    namespace: dict[str, Any] = {"__name__": "__sandbox__", "__builtins__": builtins}
    exec(code, namespace)
    function = target.get("function")
    if not function:
        return None
    fn = namespace.get(str(function))
    if not callable(fn):
        raise NameError(f"The code defines no function {function!r}.")
    return fn(payload)


if __name__ == "__main__":
    main()
