"""Multi-node launches of the engine stand-ins: vLLM on Ray (LWS's example), SGLang --nnodes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Standin:
    def __init__(self, argv: list[str], tmp_path: Path, name: str, **env: str) -> None:
        self.log = tmp_path / f"{name}.log"
        environ = {
            **os.environ,
            "KYAI_STANDIN_LOAD_SECONDS": "0",
            "KYAI_DEVCLUSTER_POD_IP": "127.0.0.1",
            **env,
        }
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kyai_testing.engines", *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environ,
            )

    def output(self) -> str:
        return self.log.read_text()

    def wait_output(self, text: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in: {self.output()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Standin]]:
    running: list[Standin] = []
    yield running
    for standin in running:
        standin.stop()


def health(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return None


def wait_health(port: int, want: int = 200, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if health(port) == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"/health on {port} never answered {want}")


def vllm_pair(
    tmp_path: Path, started: list[Standin], *, tp: int = 1, pp: int = 2, gpus: str = "GPU-a"
) -> tuple[Standin, int, int]:
    ray_port, http_port = free_port(), free_port()
    leader = Standin(
        [
            "sh",
            "-c",
            f"bash {SCRIPT} leader --ray_cluster_size=2 --ray_port={ray_port}; "
            f"vllm serve {MODEL} --port {http_port} --tensor-parallel-size {tp} "
            f"--pipeline-parallel-size {pp}",
        ],
        tmp_path,
        "leader",
        NVIDIA_VISIBLE_DEVICES=gpus,
    )
    started.append(leader)
    return leader, ray_port, http_port


def vllm_worker(
    tmp_path: Path, started: list[Standin], ray_port: int, gpus: str = "GPU-b"
) -> Standin:
    worker = Standin(
        [
            "sh",
            "-c",
            f"bash {SCRIPT} worker --ray_address=localhost --ray_port={ray_port}",
        ],
        tmp_path,
        "worker",
        NVIDIA_VISIBLE_DEVICES=gpus,
    )
    started.append(worker)
    return worker


def test_vllm_leader_serves_only_once_its_worker_joined(
    tmp_path: Path, started: list[Standin]
) -> None:
    leader, ray_port, http_port = vllm_pair(tmp_path, started)
    leader.wait_output("Ray runtime started.")
    time.sleep(1.0)
    assert health(http_port) is None  # vllm serve has not started: nothing listens
    assert "Wait for all ray workers to be active. 1/2 is active" in leader.output()
    worker = vllm_worker(tmp_path, started, ray_port)
    wait_health(http_port)
    assert "All ray workers are active" in leader.output()
    worker.wait_output("This command will now block forever")
    assert worker.process.poll() is None
    # A node leaving kills the engine, as a dead Ray actor does.
    worker.stop()
    assert leader.process.wait(10) == 1
    assert "Ray node of the engine died" in leader.output()


def test_vllm_waits_for_gpus_as_its_placement_group_does(
    tmp_path: Path, started: list[Standin]
) -> None:
    # tp 2 × pp 2 needs 4 GPUs; two nodes with one each have 2.
    leader, ray_port, http_port = vllm_pair(tmp_path, started, tp=2, pp=2)
    vllm_worker(tmp_path, started, ray_port)
    leader.wait_output("The number of required GPUs exceeds the total number of available GPUs")
    time.sleep(0.5)
    assert health(http_port) is None
    assert leader.process.poll() is None


def test_vllm_refuses_a_head_without_gpus(tmp_path: Path, started: list[Standin]) -> None:
    leader, ray_port, _ = vllm_pair(tmp_path, started, gpus="void")
    vllm_worker(tmp_path, started, ray_port)
    assert leader.process.wait(15) == 1
    assert "ValueError: Current node has no GPU available." in leader.output()


def test_sglang_rank_zero_serves_once_rank_one_joined(
    tmp_path: Path, started: list[Standin]
) -> None:
    dist, http0, http1 = free_port(), free_port(), free_port()

    def rank(index: int, port: int) -> Standin:
        argv = [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            MODEL,
            "--tp",
            "2",
            "--dist-init-addr",
            f"localhost:{dist}",
            "--nnodes",
            "2",
            "--node-rank",
            str(index),
            "--trust-remote-code",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ]
        standin = Standin(argv, tmp_path, f"rank{index}", NVIDIA_VISIBLE_DEVICES="GPU-x")
        started.append(standin)
        return standin

    zero = rank(0, http0)
    zero.wait_output("Waiting for 1 other node(s)")
    time.sleep(0.5)
    assert health(http0) is None
    one = rank(1, http1)
    wait_health(http0)
    wait_health(http1)  # the dummy health server of a non-zero rank
    one.stop()
    assert zero.process.wait(10) == 1


def test_sglang_refuses_tp_not_divisible_by_nodes(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kyai_testing.engines",
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            MODEL,
            "--tp",
            "3",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--dist-init-addr",
            "localhost:1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "AssertionError: tp_size must be divisible by number of nodes" in result.stderr


def test_an_unknown_script_command_is_not_found(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kyai_testing.engines", "sh", "-c", "echo hi && frobnicate"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 127
    assert result.stdout == "hi\n"
    assert "sh: 1: frobnicate: not found" in result.stderr
