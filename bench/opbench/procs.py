"""Child processes of the operator bench: spawning, CPU and run-queue figures, waiting."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from opbench.objects import CLOCK_TICKS, ROOT


class BenchError(RuntimeError):
    """The bench could not set up or measure what it should."""


class BenchTimeout(BenchError):
    """The bench ran out of its time budget."""


# -- child processes -----------------------------------------------------------------------


@dataclass
class Child:
    """A subprocess with its output in a log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 20) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise BenchError(
                f"The {self.name} exited with status {self.process.returncode}:\n{self.tail()}"
            )

    def stop(self, *, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL of its process group (it runs in its own session)."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def spawn(name: str, command: Sequence[str], log: Path, env: dict[str, str]) -> Child:
    with log.open("wb") as handle:
        process = subprocess.Popen(
            list(command),
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
    return Child(name, process, log)


@dataclass
class Usage:
    """CPU seconds and memory of one process, from /proc."""

    cpu_s: float
    children_cpu_s: float
    peak_rss_mib: float
    rss_mib: float
    runqueue_wait_s: float | None


def runqueue_wait(pid: int) -> float | None:
    """Seconds the process's threads were runnable but waited for a CPU (schedstat)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return total / 1e9


def usage(pid: int) -> Usage:
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after "(comm)": state is [0], utime [11], stime [12], cutime [13], cstime [14].
    fields_ = stat[stat.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(value) for value in fields_[11:15])
    memory: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            memory[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return Usage(
        cpu_s=(utime + stime) / CLOCK_TICKS,
        children_cpu_s=(cutime + cstime) / CLOCK_TICKS,
        peak_rss_mib=memory.get("VmHWM", 0.0),
        rss_mib=memory.get("VmRSS", 0.0),
        runqueue_wait_s=runqueue_wait(pid),
    )


def runnable_processes() -> int:
    """Processes running or ready to run on the host right now (/proc/loadavg)."""
    return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])


def prioritise(child: Child, nice: int) -> None:
    """Set the niceness of ``child``'s autogroup (its session; 0: leave it).

    With autogroup scheduling each session is a group that competes with the others as one,
    and a process's own niceness counts only inside its group. Every worker pod process has
    a session of its own, so the operator and the devcluster get ``nice`` as groups.
    """
    if not nice:
        return
    try:
        Path(f"/proc/{child.process.pid}/autogroup").write_text(str(nice))
    except OSError as exc:
        raise BenchError(
            f"Cannot set the niceness of the {child.name}'s autogroup: {exc}."
        ) from exc


def wait_until(
    what: str, check: Callable[[], bool], deadline: float, *, children: Sequence[Child] = ()
) -> None:
    while not check():
        for child in children:
            child.check_alive()
        if time.monotonic() > deadline:
            raise BenchTimeout(f"Timed out waiting for {what}.")
        time.sleep(0.1)


# -- objects -------------------------------------------------------------------------------


def host_speed() -> float:
    """CPU seconds of a fixed pure-Python loop (10 million additions), best of three.

    The bench's machines are shared: the same loop has taken 0.54 s and 0.92 s on one VM
    within minutes. Printed at the start and the end, so that figures of different runs can
    be compared for what the machine gave them.
    """
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        total = 0
        for number in range(10_000_000):
            total += number
        best = min(best, time.process_time() - started)
    return round(best, 3)
