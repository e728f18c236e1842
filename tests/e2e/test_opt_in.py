"""Real-cluster runs are opt-in: the flags are checked, and without them e2e tests skip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pytest_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_e2e_tests_are_skipped_without_the_flags() -> None:
    collected = pytest_run("tests/e2e/test_installed_chart.py", "--collect-only")
    count = sum(1 for line in collected.stdout.splitlines() if "::" in line)
    assert count >= 8, collected.stdout
    done = pytest_run("tests/e2e/test_installed_chart.py", "-rs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{count} skipped" in done.stdout and "passed" not in done.stdout, done.stdout
    assert "needs a real Kubernetes cluster (opt-in with --with-e2e)" in done.stdout


def test_kubeconfig_alone_is_refused(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    done = pytest_run("tests/e2e/test_installed_chart.py", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 4
    assert "--kubeconfig points the tests at a real cluster, which is opt-in" in done.stderr


def test_with_e2e_needs_a_kubeconfig_file_and_the_double_address(tmp_path: Path) -> None:
    done = pytest_run("tests/e2e/test_installed_chart.py", "--with-e2e")
    assert done.returncode == 4 and "--with-e2e needs --kubeconfig PATH" in done.stderr
    missing = tmp_path / "missing"
    done = pytest_run(
        "tests/e2e/test_installed_chart.py", "--with-e2e", "--kubeconfig", str(missing)
    )
    assert done.returncode == 4 and f"--kubeconfig {missing}: no such file." in done.stderr
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    done = pytest_run(
        "tests/e2e/test_installed_chart.py", "--with-e2e", "--kubeconfig", str(kubeconfig)
    )
    assert done.returncode == 4 and "--with-e2e needs --e2e-double-host ADDR" in done.stderr
