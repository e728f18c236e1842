"""Fixtures for the devcluster conformance tests.

* ``cluster`` — an in-process :class:`DevCluster` per test (starting one takes milliseconds);
* ``api`` — a small JSON client for it (aiohttp), returning ``(status, body)``;
* ``thread_cluster`` — one :class:`DevClusterThread` per module, for subprocess-driven tests
  (``kubectl``, ``kopf``, the synchronous ``kubernetes`` client);
* ``kubectl`` — runs the real ``kubectl`` against ``thread_cluster``;
* ``podman_image``, ``standin_image`` — the project's and the stand-ins' images (built once
  per session, :mod:`devcluster.podman_image`).
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from devcluster.helpers import KUBECTL, Api
from devcluster.podman_image import podman_image, podman_images, standin_image
from kyai_devcluster import DevCluster, DevClusterThread

__all__ = ["podman_image", "podman_images", "standin_image"]  # session fixtures for pytest


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[DevCluster]:
    async with DevCluster(
        workdir=tmp_path / "work", bookmark_interval=0.2, job_backoff_seconds=0.05
    ) as running:
        yield running


@pytest.fixture
async def api(cluster: DevCluster) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, cluster.url)


@pytest.fixture(scope="module")
def thread_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevClusterThread]:
    workdir = tmp_path_factory.mktemp("devcluster")
    with DevClusterThread(workdir=workdir, job_backoff_seconds=0.05) as running:
        yield running


@pytest.fixture(scope="module")
def kubectl(
    thread_cluster: DevClusterThread, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., subprocess.CompletedProcess[str]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    cache = tmp_path_factory.mktemp("kubectl-cache")

    def run(
        *args: str, stdin: str | None = None, check: bool = True, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        command = [
            str(KUBECTL),
            "--kubeconfig",
            str(thread_cluster.kubeconfig_path),
            "--cache-dir",
            str(cache),
            *args,
        ]
        result = subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    return run
