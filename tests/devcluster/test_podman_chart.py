"""The chart's operator Deployment runs in its container with in-cluster configuration."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.helpers import KUBECTL
from devcluster.podman_image import podman_image
from kyai.devcluster import DevClusterThread

__all__ = ["podman_image"]  # the session fixture, imported for pytest

pytestmark = [pytest.mark.podman, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
HELM = shutil.which("helm") or str(Path(sys.executable).parent / "helm")


def test_the_charts_operator_runs_in_its_container_and_reconciles(
    tmp_path: Path, podman_image: str
) -> None:
    if KUBECTL is None or not Path(HELM).exists():
        pytest.skip("kubectl and helm are needed (make setup installs helm)")
    repository, _, tag = podman_image.rpartition(":")
    rendered = subprocess.run(
        [
            HELM, "template", "kyai", str(ROOT / "charts/kyai-operator"), "-n", "kyai-system",
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
            "--set", "image.pullPolicy=Never",
        ],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    with DevClusterThread(workdir=tmp_path / "work", runtime="podman", image=podman_image) as dc:

        def kubectl(*args: str, stdin: str | None = None) -> str:
            assert KUBECTL is not None
            result = subprocess.run(
                [KUBECTL, "--kubeconfig", str(dc.kubeconfig_path), *args],
                input=stdin, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            return result.stdout

        def get(*args: str) -> Any:
            return json.loads(kubectl("get", *args, "-o", "json"))

        kubectl("apply", "-f", str(ROOT / "charts/kyai-operator/crds"))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyai-system"}}
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump(namespace))
        kubectl("apply", "-n", "kyai-system", "-f", "-", stdin=rendered)
        kubectl(
            "-n", "kyai-system", "wait", "--for=condition=Available", "deployment",
            "--all", "--timeout=180s",
        )  # fmt: skip
        eas = {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "EngineArgsSet",
            "metadata": {"name": "owns-port", "namespace": "default"},
            "spec": {"framework": "vllm", "args": {"port": 9000}},
        }
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump(eas))
        deadline = time.monotonic() + 120
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = get("engineargsset", "owns-port").get("status") or {}
            if status.get("phase"):
                break
            time.sleep(0.5)
        assert status.get("phase") == "Invalid", status
        pod = get("pods", "-n", "kyai-system")["items"][0]
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
        logs = kubectl("-n", "kyai-system", "logs", pod["metadata"]["name"])
        assert "kyai operator started" in logs
        assert "Initial authentication has finished" in logs
