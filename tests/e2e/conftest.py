"""Fixtures of the real-cluster checks: the cluster of ``--kubeconfig`` and the Helm release."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Release:
    """The operator's Helm release in the cluster of ``kubeconfig``."""

    kubeconfig: Path
    namespace: str
    name: str

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the cluster."""
        completed = subprocess.run(
            ["kubectl", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        if check and completed.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {completed.stderr}")
        return completed

    @property
    def selector(self) -> str:
        """The label selector of the operator's Deployment, pods and Service."""
        return f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component=operator"

    def one(self, kind: str) -> dict[str, Any]:
        """The release's only object of ``kind`` (deployments, services, pods...)."""
        out = self.kubectl("get", kind, "-n", self.namespace, "-l", self.selector, "-o", "json")
        items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
        assert len(items) == 1, f"{len(items)} {kind} labelled {self.selector} in {self.namespace}"
        return items[0]


@pytest.fixture(scope="session")
def release(request: pytest.FixtureRequest) -> Release:
    kubeconfig = request.config.getoption("--kubeconfig")
    if kubeconfig is None:  # only reachable without --with-e2e, where e2e tests are skipped
        pytest.skip("needs --with-e2e --kubeconfig PATH")
    return Release(
        Path(kubeconfig).resolve(),
        request.config.getoption("--e2e-namespace"),
        request.config.getoption("--e2e-release"),
    )
