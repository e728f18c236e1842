"""Guards of the sandbox child's confinement steps (issue 14, survivors of ``make mutation``,
group sandbox-child): threads stay allowed in numbers while processes are refused, the paths
an ordinary Python program reads stay readable, and each degraded seccomp layer says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.graders import SandboxLimits, run_sandboxed
from kyai.graders import _sandbox_child as child

LIMITS = SandboxLimits(timeout_seconds=30)


async def test_many_threads_at_once_run_while_fork_is_refused() -> None:
    # 32 threads alive together, each on its own stack (the clone rule reads the flags, never
    # the stack address), and a fork refused with EPERM.
    source = (
        "import os, threading\n"
        "def f(payload):\n"
        "    threading.stack_size(256 * 1024)\n"
        "    go = threading.Event()\n"
        "    done = []\n"
        "    threads = [threading.Thread(target=lambda: (go.wait(), done.append(1)))\n"
        "               for _ in range(32)]\n"
        "    for thread in threads:\n"
        "        thread.start()\n"
        "    go.set()\n"
        "    for thread in threads:\n"
        "        thread.join()\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as exc:\n"
        "        return [len(done), exc.errno]\n"
        "    if pid == 0:\n"
        "        os._exit(0)\n"
        "    return [len(done), 'forked']\n"
    )
    result = await run_sandboxed("f", None, source=source, limits=LIMITS)
    assert result.ok, result
    assert result.value == [32, 1]  # errno 1: EPERM


async def test_the_resource_limits_in_force_are_the_ones_asked_for() -> None:
    mib = 1024 * 1024
    limits = SandboxLimits(
        timeout_seconds=20,
        cpu_seconds=7,
        memory_bytes=768 * mib,
        file_size_bytes=3 * mib,
        open_files=40,
        max_processes=50,
    )
    source = (
        "import resource, signal\n"
        "def f(payload):\n"
        "    names = ['CPU', 'AS', 'FSIZE', 'NOFILE', 'NPROC', 'CORE']\n"
        "    get = resource.getrlimit\n"
        "    found = {n: list(get(getattr(resource, 'RLIMIT_' + n))) for n in names}\n"
        "    found['SIGXFSZ ignored'] = signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN\n"
        "    return found\n"
    )
    result = await run_sandboxed("f", None, source=source, limits=limits)
    assert result.ok, result
    assert result.value == {
        "CPU": [7, 8],  # SIGXCPU at 7 s, SIGKILL one second later
        "AS": [768 * mib, 768 * mib],
        "FSIZE": [3 * mib, 3 * mib],
        "NOFILE": [40, 40],
        "NPROC": [50, 50],
        "CORE": [0, 0],
        "SIGXFSZ ignored": True,
    }
    assert result.layers["rlimits"] is True


# What the Python standard library reads in ordinary use (time zones, random devices, shared
# libraries), checked where this machine has it.
READABLE = [
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/share/zoneinfo",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
]


async def test_the_paths_python_needs_stay_readable() -> None:
    present = [path for path in READABLE if os.path.exists(path)]
    assert "/usr/lib" in present and "/dev/urandom" in present
    source = (
        "import os\n"
        "def f(paths):\n"
        "    seen = {}\n"
        "    for path in paths:\n"
        "        try:\n"
        "            if os.path.isdir(path):\n"
        "                os.listdir(path)\n"
        "            else:\n"
        "                with open(path, 'rb') as handle:\n"
        "                    handle.read(1)\n"
        "            seen[path] = 'read'\n"
        "        except OSError as exc:\n"
        "            seen[path] = type(exc).__name__\n"
        "    return seen\n"
    )
    result = await run_sandboxed("f", present, source=source, limits=LIMITS)
    assert result.ok, result
    assert result.value == dict.fromkeys(present, "read")


class FakeFilter:
    def __init__(self, seccomp: FakeSeccomp) -> None:
        self.seccomp = seccomp

    def add_rule(self, action: Any, name: str, *args: Any) -> None:
        if name in self.seccomp.unknown:
            raise ValueError(f"unknown syscall {name}")
        self.seccomp.rules.append(name)

    def load(self) -> None:
        if self.seccomp.fail_load:
            raise RuntimeError("the kernel refused the filter")
        self.seccomp.loaded = True


class FakeSeccomp:
    """What the child uses of the seccomp module, with syscalls it does not know and a load
    that fails (neither happens on this machine with the real module)."""

    ALLOW = "allow"
    MASKED_EQ = "masked_eq"
    NE = "ne"

    def __init__(self, unknown: tuple[str, ...] = (), fail_load: bool = False) -> None:
        self.unknown = unknown
        self.fail_load = fail_load
        self.rules: list[str] = []
        self.loaded = False

    def ERRNO(self, number: int) -> tuple[str, int]:
        return ("errno", number)

    def Arg(self, *args: Any) -> tuple[Any, ...]:
        return args

    def SyscallFilter(self, default: Any) -> FakeFilter:
        return FakeFilter(self)


def test_seccomp_missing_is_a_note() -> None:
    notes: list[str] = []
    assert child._apply_seccomp(None, notes) is False
    assert notes == [
        "seccomp is not applied: network, process creation and signals are not blocked"
    ]


def test_syscalls_unknown_here_are_named_and_the_rest_is_filtered() -> None:
    notes: list[str] = []
    fake = FakeSeccomp(unknown=("kcmp", "fchmodat2"))
    assert child._apply_seccomp(fake, notes) is True
    assert fake.loaded
    assert notes == ["seccomp: syscalls unknown here, not filtered: kcmp, fchmodat2"]
    assert "socket" in fake.rules and "clone" in fake.rules and "kcmp" not in fake.rules


def test_a_filter_the_kernel_refuses_is_reported_as_not_applied() -> None:
    notes: list[str] = []
    assert child._apply_seccomp(FakeSeccomp(fail_load=True), notes) is False
    assert notes == [
        "seccomp unavailable (RuntimeError: the kernel refused the filter); network, process "
        "creation and signals are not blocked"
    ]


@pytest.mark.parametrize("name", ["socket", "execve", "kill"])
def test_every_known_syscall_gets_its_rule(name: str) -> None:
    fake = FakeSeccomp()
    assert child._apply_seccomp(fake, []) is True
    assert name in fake.rules


def test_landlock_missing_is_a_note() -> None:
    notes: list[str] = []
    assert child._apply_landlock(None, "/tmp", [], notes) is False
    assert notes == [
        "landlock is not applied: file access is not confined to the working directory"
    ]


def test_limits_the_kernel_refuses_are_reported_as_incomplete() -> None:
    # In a separate interpreter: the limits apply to the process that sets them.
    script = (
        "from kyai.graders import _sandbox_child as child\n"
        "notes = []\n"
        "limits = {'cpu_seconds': 100, 'memory_bytes': 2**40, 'file_size_bytes': 2**30,\n"
        "          'open_files': 10**9, 'max_processes': 100}\n"
        "print(child._apply_rlimits(limits, notes), notes)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert completed.stdout.strip() == (
        "False ['resource limits incomplete: not allowed to raise maximum limit']"
    )


async def test_a_readable_directory_is_not_writable(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("42")
    source = (
        "import os\n"
        "def f(directory):\n"
        "    found = [open(os.path.join(directory, 'data.txt')).read()]\n"
        "    try:\n"
        "        open(os.path.join(directory, 'new.txt'), 'w').write('x')\n"
        "        found.append('written')\n"
        "    except OSError as exc:\n"
        "        found.append(type(exc).__name__)\n"
        "    return found\n"
    )
    limits = SandboxLimits(timeout_seconds=30, extra_read_paths=(str(tmp_path),))
    result = await run_sandboxed("f", str(tmp_path), source=source, limits=limits)
    assert result.value == ["42", "PermissionError"]
    assert not (tmp_path / "new.txt").exists()


async def test_dev_null_stays_writable() -> None:
    source = "import os\ndef f(payload):\n    return open(os.devnull, 'w').write('discarded')\n"
    result = await run_sandboxed("f", None, source=source, limits=LIMITS)
    assert result.ok, result
    assert result.value == 9


class FakeLandlock:
    """What the child uses of the landlock module, with a kernel that refuses the ruleset."""

    class FSAccess:
        READ_FILE = 1
        READ_DIR = 2
        EXECUTE = 4
        WRITE_FILE = 8

    class Ruleset:
        def allow(self, *paths: str, rules: int | None = None) -> None:
            pass

        def apply(self) -> None:
            raise RuntimeError("the kernel refused the ruleset")


def test_a_ruleset_the_kernel_refuses_is_reported_as_not_applied() -> None:
    notes: list[str] = []
    assert child._apply_landlock(FakeLandlock(), "/tmp", [], notes) is False
    assert notes == [
        "landlock unavailable (RuntimeError: the kernel refused the ruleset); file access is "
        "not confined to the working directory"
    ]
