"""What engine images run, per image pattern, and a container's processes ending with it.

``engine_commands`` (``kyai devcluster --engine-command PATTERN=COMMAND``) maps an engine
image pattern to a real executable: the real-engine tier (``make test-engines``) runs the
real ``vllm serve`` for vLLM's images that way, the stand-in still serving the others. A
process container is a process group: when its main process ends, or when it is stopped,
nothing of the group is left behind (vLLM's engine processes outlive its API server's
SIGTERM; a container's processes do not outlive its PID 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devcluster.helpers import IMAGE, Api, job
from kyai_devcluster import DevCluster
from kyai_devcluster._images import ImagePlan, parse_engine_command
from kyai_devcluster.cli import register

NS = "/api/v1/namespaces/default"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
JOBS = "/apis/batch/v1/namespaces/default/jobs"

#: Records which command ran (its first argument), the container's argv and the pod's
#: address, then serves HTTP there.
RECORDER = (
    "import http.server, json, os, sys\n"
    "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
    "host = os.environ['KYAI_DEVCLUSTER_POD_IP']\n"
    "print(json.dumps({'tag': sys.argv[1], 'argv': sys.argv[2:]}), flush=True)\n"
    "http.server.HTTPServer((host, port), http.server.SimpleHTTPRequestHandler)"
    ".serve_forever()\n"
)

#: Starts a child that ignores SIGTERM (in the container's process group) and, once it does,
#: writes its pid to the file named by argv[1]; then sleeps (or, with "exit", ends at once).
SPAWNER = (
    "import os, subprocess, sys, time\n"
    "child = (\n"
    "    'import os, signal, sys, time\\n'\n"
    "    'signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n'\n"
    '    \'open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))\\n\'\n'
    "    'os.replace(sys.argv[1] + \".tmp\", sys.argv[1])\\n'\n"
    "    'time.sleep(600)\\n'\n"
    ")\n"
    "subprocess.Popen([sys.executable, '-c', child, sys.argv[1]])\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.01)\n"
    "if sys.argv[2:] != ['exit']:\n"
    "    time.sleep(600)\n"
)


def deployment(name: str, image: str, command: list[str], args: list[str]) -> dict[str, Any]:
    container = {
        "name": "engine",
        "image": image,
        "command": command,
        "args": args,
        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1},
    }
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container]},
            },
        },
    }


async def pod_of(api: Api, app: str, timeout: float = 20.0) -> dict[str, Any]:
    def found(items: dict[str, Any]) -> bool:
        return any(p["metadata"]["labels"].get("app") == app for p in items["items"])

    listing = await api.wait_for(f"{NS}/pods", found, timeout=timeout)
    return next(p for p in listing["items"] if p["metadata"]["labels"].get("app") == app)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def assert_gone(pid: int, why: str, timeout: float = 10.0) -> None:
    """Wait until ``pid`` has ended; fail (killing it, not to leave it behind) if it does not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        await asyncio.sleep(0.05)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"process {pid} {why}")


async def read_pid(path: Path, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return int(path.read_text())
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def test_engine_commands_parse_as_pattern_and_command() -> None:
    assert parse_engine_command("vllm/vllm-openai*=/venv/bin/python /x/launcher.py") == (
        "vllm/vllm-openai*",
        ("/venv/bin/python", "/x/launcher.py"),
    )
    assert parse_engine_command("a*= 'my python' -u") == ("a*", ("my python", "-u"))
    for bad in ("vllm/vllm-openai*", "=python", "vllm*=", "vllm*=  "):
        with pytest.raises(ValueError):
            parse_engine_command(bad)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        ["devcluster", "--engine-command", "vllm/*=py l.py", "--engine-command", "x*=y"]
    )
    assert dict(args.engine_commands) == {"vllm/*": ("py", "l.py"), "x*": ("y",)}
    with pytest.raises(SystemExit):
        parser.parse_args(["devcluster", "--engine-command", "no-command"])


def test_an_engine_commands_pattern_makes_its_images_engines() -> None:
    plan = ImagePlan(engine_commands=(("vllm/*", ("a",)), ("*/engine:*", ("b",))))
    assert plan.engine_command("vllm/vllm-openai:v0.32.0") == ("a",)
    assert plan.engine_command("registry.local/engine:1") == ("b",)
    assert plan.engine_command("lmsysorg/sglang:v0.5.3") is None  # the stand-in
    assert plan.is_engine("registry.local/engine:1") and not plan.is_engine("nginx:1.27")


async def test_each_engine_image_runs_the_command_its_pattern_maps_to(tmp_path: Path) -> None:
    recorder = tmp_path / "engine.py"
    recorder.write_text(RECORDER)

    def command(tag: str) -> tuple[str, ...]:
        return (sys.executable, str(recorder), tag)

    args = ["--host", "0.0.0.0", "--port", "8000"]
    async with (
        DevCluster(
            workdir=tmp_path / "work",
            engine_command=command("fallback"),
            engine_commands={"vllm/vllm-openai*": command("real"), "*/engine:*": command("own")},
        ) as cluster,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, cluster.url)
        pods = {
            "vllm": ("vllm/vllm-openai:v0.32.0", ["vllm", "serve"], ["/models/tiny", *args]),
            "own": ("registry.local/engine:1", ["serve"], args),
            "sglang": ("lmsysorg/sglang:v0.5.3", ["python3", "-m", "sglang"], args),
        }
        for name, (image, cmd, arguments) in pods.items():
            await api.ok("POST", DEPLOYMENTS, deployment(name, image, cmd, arguments))
        seen = {}
        for name, (_, cmd, arguments) in pods.items():
            pod = await pod_of(api, name)
            path = f"{NS}/pods/{pod['metadata']['name']}"
            await api.wait_for(path, lambda p: bool(p["status"].get("podIP")), timeout=20)
            log = ""
            deadline = time.monotonic() + 20
            while not log and time.monotonic() < deadline:
                status, log = await api.get(f"{path}/log")
                log = log if status == 200 and isinstance(log, str) else ""
                await asyncio.sleep(0.1)
            record = json.loads(log.splitlines()[0])
            assert record["argv"] == [*cmd, *arguments], name
            seen[name] = record["tag"]
        assert seen == {"vllm": "real", "own": "own", "sglang": "fallback"}


async def test_a_deleted_pods_processes_all_end(api: Api, cluster: DevCluster) -> None:
    marker = cluster.workdir / "child.pid"
    pod = {
        "metadata": {"name": "spawner"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": IMAGE, "command": ["python", "-c", SPAWNER, str(marker)]}
            ],
        },
    }
    await api.ok("POST", f"{NS}/pods", pod)
    child = await read_pid(marker)
    assert alive(child)
    await api.ok("DELETE", f"{NS}/pods/spawner")
    await api.wait_for(f"{NS}/pods", lambda items: not items["items"], timeout=20)
    # The main process ended at SIGTERM; the child, which ignores it, goes with it.
    await assert_gone(child, "of the deleted pod's group was still running")


async def test_a_containers_processes_end_with_its_main_one(api: Api, cluster: DevCluster) -> None:
    marker = cluster.workdir / "child.pid"
    await api.ok(
        "POST",
        JOBS,
        job("spawner", command=["python", "-c", SPAWNER, str(marker), "exit"]),
    )
    child = await read_pid(marker)
    await api.wait_for(
        "/apis/batch/v1/namespaces/default/jobs/spawner",
        lambda j: bool((j.get("status") or {}).get("succeeded")),
        timeout=20,
    )
    await assert_gone(child, "outlived its container's main process")


async def test_a_pods_temp_dir_is_short_and_goes_with_it(api: Api, cluster: DevCluster) -> None:
    # A Unix socket path holds at most 107 bytes: vLLM binds its engine's at $TMPDIR/<uuid>.
    script = "import tempfile, time; print(tempfile.gettempdir(), flush=True); time.sleep(600)"
    pod = {
        "metadata": {"name": "temp"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": IMAGE, "command": ["python", "-c", script]}],
        },
    }
    await api.ok("POST", f"{NS}/pods", pod)
    log = ""
    deadline = time.monotonic() + 20
    while not log.strip() and time.monotonic() < deadline:
        status, log = await api.get(f"{NS}/pods/temp/log")
        log = log if status == 200 and isinstance(log, str) else ""
        await asyncio.sleep(0.05)
    temp = Path(log.splitlines()[0])
    assert temp.is_dir() and len(str(temp)) + 37 < 107, temp
    assert not temp.is_relative_to(cluster.workdir)
    await api.ok("DELETE", f"{NS}/pods/temp")
    await api.wait_for(f"{NS}/pods", lambda items: not items["items"], timeout=20)
    deadline = time.monotonic() + 10
    while temp.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not temp.exists()
