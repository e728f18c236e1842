"""The project image for container tests: built once per test session with ``make image``.

Tests that need it are marked ``podman`` and skip (with the reason) only when podman is not
installed; CI installs it, so there they run. ``KYAI_TEST_IMAGE=<name>`` reuses an image
built before instead of building (local runs).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PODMAN = shutil.which("podman")
TEST_IMAGE = "localhost/kyai-operator:test"
PODMAN_RUN = [
    "--runtime",
    "runc",
    "run",
    "--rm",
    "--ulimit",
    "nofile=20000:20000",
    "--ulimit",
    "nproc=4096:4096",
]

needs_podman = pytest.mark.skipif(PODMAN is None, reason="podman is not installed (CI has it)")


@pytest.fixture(scope="session")
def podman_image() -> str:
    """The name of the project image (built on first use in the session)."""
    if PODMAN is None:
        pytest.skip("podman is not installed (CI has it)")
    return os.environ.get("KYAI_TEST_IMAGE") or build_test_image()


@functools.cache
def build_test_image() -> str:
    """Build the image once per process: every module importing the fixture shares it."""
    assert PODMAN is not None
    started = time.monotonic()
    result = subprocess.run(
        ["bash", "scripts/build-image.sh"],
        cwd=ROOT,
        env={**os.environ, "IMAGE": TEST_IMAGE, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    size = subprocess.run(
        [PODMAN, "image", "inspect", "--format", "{{.Size}}", TEST_IMAGE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(
        f"\nbuilt {TEST_IMAGE} in {time.monotonic() - started:.0f}s, {int(size) / 1e6:.0f} MB",
        file=sys.stderr,
    )
    return TEST_IMAGE
