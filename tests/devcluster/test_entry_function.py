"""``--entrypoint-function``: local-image containers as coroutines of the devcluster's loop.

What a benchmark uses so that 2,000 worker pods cost no 2,000 interpreter start-ups: the
container's args, env, log and termination message are those a process would get, and a
Job's outcome follows the function's exit code.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from devcluster.helpers import Api, job
from kyai_devcluster import DevCluster
from kyai_devcluster._runtime import Launch

JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"

#: What each call saw, by the container's first argument.
SEEN: dict[str, Launch] = {}


async def entry(launch: Launch) -> int:
    """Exit with the code the first argument names; write the second to the message."""
    SEEN[launch.argv[0]] = launch
    with launch.log_path.open("a") as log:
        log.write(f"args {launch.argv} env {launch.env.get('GREETING')}\n")
    if launch.argv[0] == "sleep":
        await asyncio.sleep(3600)
    if launch.argv[0] == "crash":
        raise RuntimeError("the entry function crashed")
    if len(launch.argv) > 1:
        launch.termination_path.write_text(launch.argv[1])
    return int(launch.argv[0]) if launch.argv[0].isdigit() else 0


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    SEEN.clear()
    async with (
        DevCluster(
            workdir=tmp_path / "work", job_backoff_seconds=0.05, entrypoint_function=entry
        ) as cluster,
        aiohttp.ClientSession() as session,
    ):
        yield Api(session, cluster.url)


def terminated(pod: dict[str, object]) -> dict[str, object] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []  # type: ignore[attr-defined]
    return statuses[0]["state"].get("terminated") if statuses else None


async def wait_pod_done(api: Api, job_name: str) -> dict[str, object]:
    listing = await api.wait_for(
        f"{PODS}?labelSelector=job-name%3D{job_name}",
        lambda found: any(terminated(pod) is not None for pod in found["items"]),
        timeout=15,
    )
    return next(pod for pod in listing["items"] if terminated(pod) is not None)  # type: ignore[no-any-return]


async def test_exit_zero_completes_the_job_with_args_env_and_log(api: Api) -> None:
    await api.ok(
        "POST", JOBS, job("ok", args=["0", "all done"], env=[{"name": "GREETING", "value": "hi"}])
    )
    pod = await wait_pod_done(api, "ok")
    state = terminated(pod)
    assert state is not None and state["exitCode"] == 0 and state["reason"] == "Completed"
    assert state["message"] == "all done"
    assert SEEN["0"].argv == ["0", "all done"]  # the args alone: no entrypoint before them
    assert SEEN["0"].env["GREETING"] == "hi" and "KUBECONFIG" in SEEN["0"].env
    name = pod["metadata"]["name"]  # type: ignore[index]
    logs = await api.request("GET", f"{PODS}/{name}/log")
    assert logs == (200, "args ['0', 'all done'] env hi\n")
    await api.wait_for(
        f"{JOBS}/ok",
        lambda j: any(c["type"] == "Complete" for c in j["status"].get("conditions") or []),
        timeout=10,
    )


async def test_exit_code_and_crash_fail_the_job(api: Api) -> None:
    await api.ok("POST", JOBS, job("three", args=["3"]))
    await api.ok(
        "POST", JOBS, job("crash", args=["crash"], terminationMessagePolicy="FallbackToLogsOnError")
    )
    three = terminated(await wait_pod_done(api, "three"))
    assert three is not None and three["exitCode"] == 3 and three["reason"] == "Error"
    crash = terminated(await wait_pod_done(api, "crash"))
    # A crash is exit 1 with the exception in the log, which the policy falls back to.
    assert crash is not None and crash["exitCode"] == 1
    assert "RuntimeError: the entry function crashed" in str(crash["message"])


async def test_a_command_still_runs_as_a_process(api: Api) -> None:
    await api.ok(
        "POST", JOBS, job("proc", args=[], command=[sys.executable, "-c", "raise SystemExit(5)"])
    )
    state = terminated(await wait_pod_done(api, "proc"))
    assert state is not None and state["exitCode"] == 5
    assert SEEN == {}  # the function never ran


async def test_deleting_the_pod_cancels_the_function(api: Api) -> None:
    await api.ok("POST", JOBS, job("sleeper", args=["sleep"]))
    for _ in range(200):
        if "sleep" in SEEN:
            break
        await asyncio.sleep(0.05)
    listing = await api.ok("GET", PODS, params={"labelSelector": "job-name=sleeper"})
    name = listing["items"][0]["metadata"]["name"]
    await api.ok("DELETE", f"{PODS}/{name}")
    for _ in range(200):
        status, _ = await api.get(f"{PODS}/{name}")
        if status == 404:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the pod of a cancelled entry function was not removed")


def test_cli_refuses_what_is_not_a_coroutine_function(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kyai.cli", "devcluster", "--workdir", str(tmp_path),
         "--entrypoint-function", "json:dumps"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "json:dumps is not a coroutine function" in result.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "kyai.cli", "devcluster", "--workdir", str(tmp_path),
         "--entrypoint-function", "no_such_module_here:run"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert missing.returncode == 2 and "no_such_module_here" in missing.stderr
