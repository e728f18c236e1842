"""``kyai operator`` fails fast, with a message and a non-zero exit, when it cannot listen.

Real sockets on loopback: the port is taken by this test before the operator starts. No
cluster is needed: the check comes before kopf connects to anything.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai.settings import OperatorSettings


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


def operator(tmp_path: Path, *args: str, **env: str) -> tuple[int, str, float]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    start = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "kyai.cli", "operator", "--all-namespaces", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(kubeconfig), "KYAI_HEALTH_PORT": "0", **env},
    )
    return completed.returncode, completed.stdout + completed.stderr, time.monotonic() - start


def test_a_metrics_port_clash_exits_at_once_naming_the_port(
    tmp_path: Path, taken_port: int
) -> None:
    code, output, took = operator(
        tmp_path, "--metrics-port", str(taken_port), "--metrics-bind-address", "127.0.0.1"
    )
    assert code == 1, output
    assert f"cannot listen on 127.0.0.1:{taken_port} (/metrics)" in output
    assert "Address already in use" in output
    assert took < 20  # not kopf's 60-second start-up retry


def test_a_health_port_clash_exits_at_once(tmp_path: Path, taken_port: int) -> None:
    code, output, _ = operator(tmp_path, "--metrics-port", "0", "--health-port", str(taken_port))
    assert code == 1, output
    assert f":{taken_port} (/healthz)" in output


def test_a_bad_bind_address_is_a_usage_error_naming_the_setting(tmp_path: Path) -> None:
    code, output, _ = operator(tmp_path, KYAI_METRICS_BIND_ADDRESS="localhost:80")
    assert code == 2, output
    assert "metrics_bind_address" in output and "not an IP address" in output


def test_the_bind_address_setting_and_its_default() -> None:
    assert OperatorSettings().metrics_bind_address == "0.0.0.0"
    env = {"KYAI_METRICS_BIND_ADDRESS": "::1"}
    assert OperatorSettings.from_env(env).metrics_bind_address == "::1"
    assert OperatorSettings.from_env({}, metrics_bind_address="127.0.0.1").metrics_bind_address == (
        "127.0.0.1"
    )
