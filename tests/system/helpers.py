"""kubectl and the operator process, for the system tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKER_IMAGE = "ghcr.io/kyai-io/kyai-operator:e2e"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Kubectl:
    kubeconfig: Path

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            ["kubectl", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        if check and completed.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {completed.stderr}")
        return completed

    def apply(
        self, *objects: dict[str, Any], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", stdin=yaml.safe_dump_all(objects), check=check)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(
            self.run("get", kind, name, "-n", namespace, "-o", "json").stdout
        )
        return result

    def items(self, kind: str, namespace: str, *selector: str) -> list[dict[str, Any]]:
        out = self.run("get", kind, "-n", namespace, "-o", "json", *selector).stdout
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def wait_for(
        self,
        kind: str,
        name: str,
        namespace: str,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            completed = self.run("get", kind, name, "-n", namespace, "-o", "json", check=False)
            if completed.returncode == 0:
                last = json.loads(completed.stdout)
                if predicate(last):
                    return last
            time.sleep(0.3)
        raise AssertionError(f"{kind}/{name} never matched; last status: {last.get('status')}")


class Operator:
    """``kyai operator`` as a subprocess; restartable."""

    def __init__(
        self, kubeconfig: Path, log_dir: Path, *, env: dict[str, str] | None = None
    ) -> None:
        self.kubeconfig = kubeconfig
        self.extra_env = dict(env or {})
        self.log_dir = log_dir
        self.metrics_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "KYAI_WORKER_IMAGE": WORKER_IMAGE,
            "KYAI_METRICS_PORT": str(self.metrics_port),
            "KYAI_HEALTH_PORT": "0",
            **self.extra_env,
        }
        with (self.log_dir / f"operator-{self.starts}.log").open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kyai.cli", "operator", "--all-namespaces"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1)
                return
            except httpx.HTTPError:
                assert self.process.poll() is None, self.logs()
                time.sleep(0.2)
        raise AssertionError("the operator did not start:\n" + self.logs())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        self.process = None

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def logs(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-4000:]
            for path in sorted(self.log_dir.glob("operator-*.log"))
        )


def secret(name: str, namespace: str, **data: str) -> dict[str, Any]:
    """A Secret manifest with ``data`` as its stringData."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    }


def keyed_judge(endpoint: str, secret: str = "judge-key", key: str = "token") -> dict[str, Any]:
    """An EvaluationRun's ``spec.judge``: the LLM judge at ``endpoint`` with a key Secret."""
    return {
        "type": "llm",
        "llm": {
            "endpoint": endpoint,
            "model": "judge",
            "apiKeySecretRef": {"name": secret, "key": key},
        },
    }


def pod_network_operator(
    cluster: Any, kubeconfig: Path, log_dir: Path, judge_url: str, **env: str
) -> Operator:
    """The operator as a process that resolves Service names as a pod does (the devcluster's
    ``network_env``), the double as default judge, offline; ``env`` added."""
    return Operator(
        kubeconfig,
        log_dir,
        env=cluster.network_env(
            {
                **os.environ,
                "KYAI_DEFAULT_JUDGE_ENDPOINT": judge_url,
                "KYAI_DEFAULT_JUDGE_MODEL": "judge",
                "HF_HUB_OFFLINE": "1",
                **env,
            }
        ),
    )
