"""The images for container tests, built once per test session: the project's (``make image``)
and the stand-ins' on top of it (``make standin-image``).

Tests that need them are marked ``podman`` and skip (with the reason) only when podman is not
installed; CI installs it, so there they run. ``KYAI_TEST_IMAGE=<name>`` and
``KYAI_TEST_STANDIN_IMAGE=<name>`` reuse images built before instead of building (local runs).
The build starts in the background as the session starts (``start_building``, called by
``tests/conftest.py``), under a file lock in the session's temporary directory that the
xdist workers share: the tests that need the images wait for the lock and read the names it
recorded, the others run meanwhile.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PODMAN = shutil.which("podman")
TEST_IMAGE = "localhost/kyai-operator:test"
TEST_STANDIN_IMAGE = "localhost/kyai-standins:test"
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


def shared_dir(config: pytest.Config) -> Path:
    """The session's temporary directory that the xdist workers and their controller share."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return Path(base.parent if hasattr(config, "workerinput") else base)


def wanted(config: pytest.Config) -> bool:
    """Whether this session may run the podman tests and must build the images itself."""
    if PODMAN is None or os.environ.get("KYAI_TEST_IMAGE") or config.option.collectonly:
        return False
    if "not podman" in (config.option.markexpr or ""):
        return False
    paths = [str(arg).split("::")[0].rstrip("/") for arg in config.args]
    return any(p in ("tests", "tests/devcluster") or "podman" in p for p in paths) or not paths


def start_building(config: pytest.Config) -> None:
    """Start the build in the background as the session starts (the xdist controller, or the
    single process), so that the workers run other tests meanwhile; the fixture waits for it.
    The lock is taken here, before any worker exists, and released when the build ends."""
    shared = shared_dir(config)
    record = shared / "kyai-test-images.json"
    lock = (shared / "kyai-test-images.lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)

    def build() -> None:
        try:
            record.write_text(json.dumps(build_test_images()))
        except BaseException as exc:  # the fixture reports it in every podman test
            record.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()

    threading.Thread(target=build, name="kyai-test-images", daemon=True).start()


@pytest.fixture(scope="session")
def podman_images(request: pytest.FixtureRequest) -> dict[str, str]:
    """``{"project": ..., "standins": ...}``: the image names (built once per session)."""
    if PODMAN is None:
        pytest.skip("podman is not installed (CI has it)")
    given = os.environ.get("KYAI_TEST_IMAGE")
    if given:
        return {"project": given, "standins": os.environ.get("KYAI_TEST_STANDIN_IMAGE", given)}
    shared = shared_dir(request.config)
    record = shared / "kyai-test-images.json"
    with (shared / "kyai-test-images.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for a build under way
        if not record.exists():
            record.write_text(json.dumps(build_test_images()))
        names: dict[str, str] = json.loads(record.read_text())
    assert "error" not in names, f"building the test images failed: {names.get('error')}"
    return names


@pytest.fixture(scope="session")
def podman_image(podman_images: dict[str, str]) -> str:
    """The name of the project image."""
    return podman_images["project"]


@pytest.fixture(scope="session")
def standin_image(podman_images: dict[str, str]) -> str:
    """The name of the stand-in image (kyai-testing on top of the project image)."""
    return podman_images["standins"]


def build_test_images() -> dict[str, str]:
    """Build both images; print how long each took and its size."""
    assert PODMAN is not None
    env = {**os.environ, "PYTHON": sys.executable}
    for script, extra in (
        ("scripts/build-image.sh", {"IMAGE": TEST_IMAGE}),
        (
            "scripts/build-standin-image.sh",
            {"IMAGE": TEST_STANDIN_IMAGE, "BASE": TEST_IMAGE, "KYAI_REUSE_WHEELHOUSE": "1"},
        ),
    ):
        started = time.monotonic()
        result = subprocess.run(
            ["bash", script], cwd=ROOT, env={**env, **extra},
            capture_output=True, text=True, timeout=1200, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        size = subprocess.run(
            [PODMAN, "image", "inspect", "--format", "{{.Size}}", extra["IMAGE"]],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        print(
            f"\nbuilt {extra['IMAGE']} in {time.monotonic() - started:.0f}s, "
            f"{int(size) / 1e6:.0f} MB",
            file=sys.stderr,
        )
    return {"project": TEST_IMAGE, "standins": TEST_STANDIN_IMAGE}
