"""Units of the kubelet side: podman command lines, quantities, probes' timing, addresses."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from kyai_devcluster._images import ImagePlan
from kyai_devcluster._kubelet import Kubelet
from kyai_devcluster._network import POD_NETWORK, AddressPool, HostsFile, service_names
from kyai_devcluster._probes import ProbeTiming, resolve_port
from kyai_devcluster._runtime import Launch, Mount, StartError, parse_quantity, podman_run_argv
from kyai_devcluster._store import Store


def launch(tmp_path: Path, **overrides: object) -> Launch:
    values: dict[str, object] = {
        "pod_uid": "0123456789abcdef",
        "pod_name": "worker-x",
        "namespace": "team",
        "name": "main",
        "image": "localhost/kyai-operator:dev",
        "argv": ["generate", "--run", "r1"],
        "entrypoint": False,
        "env": {"API_KEY": "s3cret-value", "PATH": "/opt/kyai/bin:/usr/bin"},
        "mounts": [
            Mount("/data", str(tmp_path / "claim")),
            Mount("/etc/cfg", str(tmp_path / "cfg"), read_only=True),
        ],
        "working_dir": None,
        "log_path": tmp_path / "main.log",
        "termination_path": tmp_path / "termination",
        "termination_message_path": "/dev/termination-log",
        "security": {},
    }
    values.update(overrides)
    return Launch(**values)  # type: ignore[arg-type]


def test_podman_command_line_keeps_env_values_off_it(tmp_path: Path) -> None:
    argv = podman_run_argv(launch(tmp_path))
    assert "s3cret-value" not in " ".join(argv)
    assert argv[argv.index("API_KEY") - 1] == "--env"
    assert "--env" in argv and "PATH=/opt/kyai/bin:/usr/bin" in argv
    assert argv[:3] == ["podman", "--runtime", "runc"]
    assert argv[argv.index("--network") + 1] == "host"
    assert f"{tmp_path / 'claim'}:/data:rw" in argv
    assert f"{tmp_path / 'cfg'}:/etc/cfg:ro" in argv
    assert f"{tmp_path / 'termination'}:/dev/termination-log:rw" in argv
    assert argv[-4:] == ["localhost/kyai-operator:dev", "generate", "--run", "r1"]
    assert "--entrypoint" not in argv and "--user" not in argv and "--read-only" not in argv


def test_podman_command_line_maps_the_security_context(tmp_path: Path) -> None:
    security = {
        "runAsUser": 65532,
        "runAsGroup": 65533,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    }
    argv = podman_run_argv(
        launch(
            tmp_path,
            security=security,
            argv=["python", "-m", "x"],
            entrypoint=True,
            memory_limit=2**30,
        )
    )
    assert argv[argv.index("--user") + 1] == "65532:65533"
    assert "--read-only" in argv and "--read-only-tmpfs=false" in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--cap-add") + 1] == "NET_BIND_SERVICE"
    assert argv[argv.index("--security-opt") + 1] == "no-new-privileges"
    assert argv[argv.index("--memory") + 1] == str(2**30)
    assert argv[argv.index("--entrypoint") + 1] == '["python"]'
    assert argv[-3:] == ["localhost/kyai-operator:dev", "-m", "x"]
    with pytest.raises(StartError, match="runAsGroup"):
        podman_run_argv(launch(tmp_path, security={"runAsGroup": 1}))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("512Mi", 512 * 2**20), ("1Gi", 2**30), ("2G", 2 * 10**9), ("1e3", 1000), ("100", 100)],
)
def test_memory_quantities(text: str, expected: int) -> None:
    assert parse_quantity(text) == expected


def test_bad_quantity_is_named() -> None:
    with pytest.raises(ValueError, match="12 bytes"):
        parse_quantity("12 bytes")


def test_probe_timing_defaults_and_cap() -> None:
    timing = ProbeTiming.of({}, max_period=None)
    assert timing == ProbeTiming(0.0, 10.0, 1.0, 1, 3)
    capped = ProbeTiming.of(
        {"periodSeconds": 10, "initialDelaySeconds": 30, "failureThreshold": 60}, max_period=1
    )
    assert (capped.period, capped.initial_delay, capped.failure_threshold) == (1, 30, 60)


def test_probe_ports_by_number_or_name() -> None:
    container = {"ports": [{"name": "http", "containerPort": 8000}]}
    assert resolve_port(container, "http") == 8000
    assert resolve_port(container, 9000) == 9000
    assert resolve_port(container, "9001") == 9001
    with pytest.raises(ValueError, match="'metrics'"):
        resolve_port(container, "metrics")


def test_addresses_are_unique_loopback_and_reused_after_release() -> None:
    pool = AddressPool(POD_NETWORK)
    first, second = pool.allocate("a"), pool.allocate("b")
    assert first != second and first.startswith("127.10.") and pool.allocate("a") == first
    assert not first.endswith((".0", ".1", ".255"))
    pool.release("a")
    assert pool.get("a") is None
    assert len({pool.allocate(str(n)) for n in range(300)}) == 300


def test_each_pool_starts_at_a_random_subnet_and_wraps_around(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two devclusters side by side (parallel test sessions) must not bind the same address.
    # The blocks are visible machine-wide: the wrap from the last block to the first is only
    # shown while no other devcluster (another xdist worker's) holds either of them.
    if not _blocks_free(255, 0):
        pytest.skip("another devcluster on this machine holds block 255 or 0 right now")
    monkeypatch.setattr("kyai_devcluster._network.random.randrange", lambda *_: 255)
    pool = AddressPool(POD_NETWORK)
    addresses = [pool.allocate(str(n)) for n in range(260)]
    assert addresses[0] == "127.10.255.2" and addresses[252] == "127.10.255.254"
    assert addresses[253] == "127.10.0.2" and len(set(addresses)) == 260
    pool.close()
    monkeypatch.undo()
    starts = {AddressPool(POD_NETWORK).allocate("a") for _ in range(20)}
    assert len(starts) > 1


def _blocks_free(*blocks: int) -> bool:
    """Whether no pool on this machine holds any of ``blocks`` now."""
    probes = []
    try:
        for block in blocks:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probes.append(probe)
            probe.bind(f"\0kyai-devcluster/127.10.{block}.0")
    except OSError:
        return False
    finally:
        for probe in probes:
            probe.close()
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets: Linux")
def _two_free_blocks() -> int:
    """A block index whose block and the next no pool on this machine holds now."""
    for index in range(5, 250):
        probes = []
        try:
            for block in (index, index + 1):
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                probes.append(probe)
                probe.bind(f"\0kyai-devcluster/127.10.{block}.0")
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
        return index
    raise AssertionError("no two free address blocks on this machine")


def test_pools_side_by_side_never_share_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both draw the same random start (parallel xdist workers may): the second skips the
    # block the first holds, and gets it once the first is closed. The start is a block other
    # devclusters on the machine do not hold (the blocks are visible machine-wide).
    start = _two_free_blocks()
    monkeypatch.setattr("kyai_devcluster._network.random.randrange", lambda *_: start)
    first, second = AddressPool(POD_NETWORK), AddressPool(POD_NETWORK)
    assert first.allocate("a") == f"127.10.{start}.2"
    assert second.allocate("a") == f"127.10.{start + 1}.2"
    first.close()
    third = AddressPool(POD_NETWORK)
    assert third.allocate("a") == f"127.10.{start}.2"
    second.close()
    third.close()


def test_hosts_file_is_rewritten_in_place(tmp_path: Path) -> None:
    hosts = HostsFile(tmp_path / "hosts")
    inode = hosts.path.stat().st_ino
    hosts.set("uid-1", "127.96.0.2", service_names("llm", "team"))
    text = hosts.path.read_text()
    assert "127.96.0.2\tllm llm.team llm.team.svc llm.team.svc.cluster.local\n" in text
    assert "127.0.0.1\tlocalhost" in text
    hosts.remove("uid-1")
    assert "llm" not in hosts.path.read_text()
    assert hosts.path.stat().st_ino == inode  # bind mounts of the file keep seeing it


async def test_image_plans_of_the_process_runtime(tmp_path: Path) -> None:
    kubelet = Kubelet(
        Store(),
        workdir=tmp_path,
        kubeconfig_for=lambda namespace, token=None: tmp_path / "kubeconfig",
        claim_dir=lambda namespace, claim: tmp_path / claim,
    )
    assert await kubelet.plan_image("ghcr.io/kyai-io/kyai-operator:1.0") == (
        "local",
        "ghcr.io/kyai-io/kyai-operator:1.0",
    )
    for engine in (
        "vllm/vllm-openai:v0.8.5",
        "lmsysorg/sglang:v0.4.6-cu124",
        "nvcr.io/nvidia/tensorrt-llm/release:0.20.0",
    ):
        assert (await kubelet.plan_image(engine))[0] == "engine"
    assert await kubelet.plan_image("nginx") == ("missing", "nginx")
    assert (await kubelet.plan_image("vllm/vllm-openai-rocm:v0.9"))[0] == "engine"
    assert await kubelet.plan_image("vllm/other:1") == ("missing", "vllm/other:1")
    assert await kubelet.plan_image("ghcr.io/kyai-io/kyai-standins:dev") == (
        "local",
        "ghcr.io/kyai-io/kyai-standins:dev",
    )


async def test_image_plans_of_the_podman_runtime_use_the_project_and_stand_in_images() -> None:
    """Podman: what its store holds runs as itself; the project's patterns run ``--image``,
    the stand-ins' and the engines' run ``--standin-image`` (the product image has no
    kyai_testing)."""
    plan = ImagePlan(project_image="localhost/p:1", standin_image="localhost/s:1")
    store = {"localhost/kyai-operator:mine"}

    async def present(image: str) -> bool:
        return image in store

    async def planned(image: str) -> tuple[str, str]:
        return await plan.plan(image, runtime="podman", present=present)

    assert await planned("localhost/kyai-operator:mine") == (
        "local",
        "localhost/kyai-operator:mine",
    )
    assert await planned("ghcr.io/kyai-io/kyai-operator:dev") == ("local", "localhost/p:1")
    assert await planned("ghcr.io/kyai-io/kyai-standins:dev") == ("local", "localhost/s:1")
    assert await planned("vllm/vllm-openai:v0.8.5") == ("engine", "localhost/s:1")
    assert await planned("nginx") == ("missing", "nginx")
