"""A run generating against a served Workload waits while its engine is away.

Whatever takes the engine away (Kueue, a LeaderWorkerSet group recreated after a pod failed,
an engine pod replaced), the Workload says so by its ``Ready`` condition; the run stops its
generation Job and makes it again once the Workload is Ready, never counting the engine's
absence as failed rows. An endpoint-only Workload's engine is not the operator's: its
trouble is left to the run's requests.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.builders import evaluation as build
from kyai.controllers import _conditions as c
from kyai.controllers._engine import engine_down
from kyai.controllers.scheduling import _engine_away

sys.path.insert(0, str(Path(__file__).parent))
from test_kueue import DeletingKube
from test_worker_pods import NS, RUN_NAME, SNAPSHOT, WORKLOAD, condition, run_object, step, world
from test_worker_pods import stamp as ago

#: A Workload the operator serves on two nodes (a LeaderWorkerSet group), Ready.
SERVED = copy.deepcopy(WORKLOAD)
SERVED["spec"] = {"framework": "vllm", "model": "m", "nodes": 2, "resources": {"gpus": 1}}
SERVED["status"]["endpoint"] = "http://cand-engine.team-a.svc:8000/v1"
GROUPS_DOWN = (
    "waiting for the engine's groups to become ready (0/1 groups of 2 pods ready, "
    "LeaderWorkerSet cand-lws; model downloads can take many minutes)"
)


def with_ready(workload: dict[str, Any], ready: bool, reason: str, message: str) -> dict[str, Any]:
    changed = copy.deepcopy(workload)
    changed["status"] = {
        **changed["status"],
        "phase": "Ready" if ready else "Deploying",
        "conditions": [{"type": "Ready", "status": str(ready), "reason": reason,
                        "message": message, "lastTransitionTime": ago(1)}],
    }  # fmt: skip
    return changed


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        (with_ready(SERVED, False, c.DEPLOYING, GROUPS_DOWN), (c.DEPLOYING, GROUPS_DOWN)),
        (with_ready(SERVED, False, c.ENDPOINT_UNREACHABLE, "refused"),
         (c.ENDPOINT_UNREACHABLE, "refused")),
        (with_ready(SERVED, False, c.PREEMPTED, "evicted"), (c.PREEMPTED, "evicted")),
        (with_ready(SERVED, True, c.SERVING, "serving m"), None),
        (SERVED, None),  # no Ready condition (yet): nothing says the engine went away
        (None, None),  # gone or unknown
        # An endpoint-only Workload: its server is someone else's.
        (with_ready(WORKLOAD, False, c.ENDPOINT_UNREACHABLE, "refused"), None),
        (with_ready(WORKLOAD, False, c.MODEL_NOT_SERVED, "lists no model"), None),
    ],
)  # fmt: skip
def test_only_a_served_workload_not_ready_takes_its_engine_away(
    workload: dict[str, Any] | None, expected: tuple[str, str] | None
) -> None:
    assert engine_down(workload) == expected


async def test_a_run_waits_while_its_workloads_group_is_recreated_then_goes_on() -> None:
    svc, _ = world()
    kube = DeletingKube(copy.deepcopy(SERVED), copy.deepcopy(SNAPSHOT))
    svc.kube = kube  # type: ignore[assignment]
    kube.put(run_object())
    assert (await step(svc, kube)).phase == "Generating"
    name = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, name)]["status"] = {"active": 1, "startTime": ago(5)}
    # A worker pod failed: LWS recreates the group, the Workload goes Deploying.
    kube.put(with_ready(SERVED, False, c.DEPLOYING, GROUPS_DOWN))
    status = await step(svc, kube)
    assert status.phase == "Generating"
    ready, reason, message = condition(status, "Ready")
    assert (ready, reason) == ("False", c.WORKLOAD_NOT_READY)
    assert message == (
        f"the Workload cand is not Ready (Deploying): {GROUPS_DOWN}; the generation Job "
        f"{name} is stopped and goes on from the answers it stored once the Workload is Ready "
        "again"
    )
    assert condition(status, "Progressing")[0] == "False"  # waiting: the Workload wakes it
    assert condition(status, "Stalled")[0] == "False"  # no deadline runs meanwhile
    assert kube.foreground == [name]
    # Gone while the group is not back: nothing is made, the run keeps waiting.
    del kube.objects[("Job", NS, name)]
    kube.put(with_ready(SERVED, False, c.ENDPOINT_UNREACHABLE, "connection refused"))
    status = await step(svc, kube)
    assert await kube.get("Job", NS, name) is None
    assert condition(status, "Ready")[1] == c.WORKLOAD_NOT_READY
    assert "is not Ready (EndpointUnreachable): connection refused;" in status.message
    # Ready again: the Job is made again and the run is Generating again at once.
    kube.put(with_ready(SERVED, True, c.SERVING, "serving m"))
    status = await step(svc, kube)
    assert await kube.get("Job", NS, name) is not None
    assert condition(status, "Ready")[1] == c.GENERATING
    assert condition(status, "Progressing")[0] == "True"
    assert kube.foreground == [name]


async def test_a_run_against_an_endpoint_workload_keeps_its_job_when_the_probe_fails() -> None:
    svc, _ = world()
    kube = DeletingKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT))
    svc.kube = kube  # type: ignore[assignment]
    kube.put(run_object())
    assert (await step(svc, kube)).phase == "Generating"
    name = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, name)]["status"] = {"active": 1, "startTime": ago(5)}
    kube.put(with_ready(WORKLOAD, False, c.ENDPOINT_UNREACHABLE, "connection refused"))
    status = await step(svc, kube)
    assert condition(status, "Ready")[1] == c.GENERATING
    assert kube.foreground == [] and await kube.get("Job", NS, name) is not None


def test_a_served_workload_going_away_wakes_the_runs_generating_against_it() -> None:
    svc, _ = world()
    down = with_ready(SERVED, False, c.DEPLOYING, GROUPS_DOWN)["status"]
    svc.remember(copy.deepcopy(SERVED) | {"kind": "Workload"})
    assert _engine_away(svc, NS, "cand", down)
    assert not _engine_away(svc, NS, "cand", with_ready(SERVED, True, c.SERVING, "")["status"])
    assert not _engine_away(svc, NS, "cand", None)
    # An endpoint-only Workload's probe failing stops nothing.
    svc.remember(copy.deepcopy(WORKLOAD) | {"kind": "Workload"})
    unreachable = with_ready(WORKLOAD, False, c.ENDPOINT_UNREACHABLE, "refused")["status"]
    assert not _engine_away(svc, NS, "cand", unreachable)
