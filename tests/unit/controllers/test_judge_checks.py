"""A run's judges answer before its candidate is asked anything (issue 42).

Before the generation Job is made, the operator checks the run's LLM judge as ``kyai run``
does (reachable, the model served, the key taken): a judge that fails ends the run with the
check's reason, and no Job exists. The default judge behind the judge gateway is checked
through the gateway's check route. Runs asking the same judge at once share one check. A run
generating against a Workload that turns Stalled (its engine crash-looped past its restart
limit) fails at once, naming it, instead of waiting for it without end.
"""

from __future__ import annotations

import asyncio
import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kyai.builders import evaluation as build
from kyai.controllers import _conditions as c
from kyai.controllers._endpoints import EndpointChecks
from kyai.controllers._services import Services
from kyai.evaluation._preflight import Problem

sys.path.insert(0, str(Path(__file__).parent))
from test_engine_away import SERVED, with_ready
from test_kueue import DeletingKube
from test_worker_pods import (
    JUDGE_KEY,
    NS,
    RUN_NAME,
    SNAPSHOT,
    Endpoints,
    condition,
    run_object,
    step,
    world,
)
from test_worker_pods import stamp as ago

GENERATION_JOB = build.generation_job_name(RUN_NAME)
UNREACHABLE = Problem(
    "JudgeUnreachable: spec.judge.llm.endpoint: Cannot reach http://j/v1/models (4 attempts "
    "in 7.0 s): connection refused",
    server=True,
    reason="JudgeUnreachable",
)
GATEWAY_CHECK = "http://gw.kyai-system.svc:9090/upstream/v1"


def keyed_run() -> dict[str, Any]:
    return run_object(apiKeySecretRef={"name": "judge-key", "key": "api-key"})


async def test_the_judge_is_checked_with_its_key_and_model_before_the_generation_job() -> None:
    endpoints = Endpoints()
    svc, kube = world(copy.deepcopy(JUDGE_KEY), endpoints=endpoints)
    kube.put(keyed_run())
    status = await step(svc, kube)
    assert status.phase == "Generating"
    # Asked once, with the key's text from the Secret (base64 "a2V5" is "key").
    assert endpoints.asked == [
        ("judge", "spec.judge.llm.endpoint", "http://j/v1", (("model", "judge"),), "key")
    ]
    assert await kube.get("Job", NS, GENERATION_JOB) is not None


async def test_a_judge_that_fails_its_check_ends_the_run_before_any_job() -> None:
    svc, kube = world(endpoints=Endpoints(**{"http://j/v1": [UNREACHABLE]}))
    kube.put(run_object())
    status = await step(svc, kube)
    assert status.phase == "Failed"
    ready, reason, message = condition(status, "Ready")
    assert (ready, reason) == ("False", "JudgeUnreachable")
    assert message == (
        "spec.judge.llm.endpoint: Cannot reach http://j/v1/models (4 attempts in 7.0 s): "
        "connection refused (checked before the generation Job was made: the candidate was "
        "asked nothing)"
    )
    assert await kube.get("Job", NS, GENERATION_JOB) is None
    assert await kube.get("Job", NS, build.judge_job_name(RUN_NAME)) is None


async def test_every_problem_of_the_check_is_said_and_the_first_gives_the_reason() -> None:
    not_served = Problem(
        "JudgeModelNotServed: model judge: http://j/v1 does not serve judge (it serves: other)",
        server=True,
        reason="JudgeModelNotServed",
    )
    refused = Problem("JudgeKeyRefused: refused", server=True, reason="JudgeKeyRefused")
    svc, kube = world(endpoints=Endpoints(**{"http://j/v1": [not_served, refused]}))
    kube.put(run_object())
    status = await step(svc, kube)
    _, reason, message = condition(status, "Ready")
    assert reason == "JudgeModelNotServed"
    assert message.startswith(
        "model judge: http://j/v1 does not serve judge (it serves: other); refused (checked"
    )


@pytest.mark.parametrize(
    ("check_url", "asked"),
    [(GATEWAY_CHECK, [("judge", "the default judge (through the judge gateway)",
                       GATEWAY_CHECK, (("model", "platform-judge"),), None)]),
     (None, [])],
)  # fmt: skip
async def test_the_default_judge_behind_the_gateway_is_checked_through_its_check_route(
    check_url: str | None, asked: list[Any]
) -> None:
    endpoints = Endpoints()
    svc, kube = world(
        endpoints=endpoints,
        default_judge_model="platform-judge",
        default_judge_gateway="http://gw.kyai-system.svc:8080/v1",
        default_judge_gateway_check=check_url,
    )
    run = run_object()
    del run["spec"]["judge"]
    kube.put(run)
    assert (await step(svc, kube)).phase == "Generating"
    # Without the check route, the judge pod's own check is all there is.
    assert endpoints.asked == asked


async def test_a_run_judged_by_builtin_graders_checks_nothing() -> None:
    endpoints = Endpoints()
    svc, kube = world(endpoints=endpoints)
    run = run_object()
    run["spec"]["judge"] = {"type": "builtin"}
    kube.put(run)
    assert (await step(svc, kube)).phase == "Generating"
    assert endpoints.asked == []


async def test_a_retry_of_the_check_is_on_the_run_then_its_phase_message_is_back() -> None:
    seen: list[tuple[str, str]] = []

    async def slow_judge(*args: Any, say: Any = None, **kwargs: Any) -> Sequence[Problem]:
        await say("judge unreachable: connection refused; attempt 1 of 4, next in 1 s")
        run = await kube.get("EvaluationRun", NS, RUN_NAME)
        assert run is not None
        (ready,) = [cond for cond in run["status"]["conditions"] if cond["type"] == "Ready"]
        seen.append((ready["reason"], ready["message"]))
        return []

    svc, kube = world()
    svc.endpoints = EndpointChecks(slow_judge)
    kube.put(run_object())
    status = await step(svc, kube)
    assert seen == [(
        c.CHECKING_ENDPOINTS,
        "checking the endpoints the run calls before its generation Job: judge unreachable: "
        "connection refused; attempt 1 of 4, next in 1 s",
    )]  # fmt: skip
    assert condition(status, "Ready")[1] == c.GENERATING
    assert status.message.startswith("generating answers of m")


async def test_runs_asking_one_judge_at_once_share_one_check_and_a_pass_is_reused() -> None:
    calls: list[str] = []
    release = asyncio.Event()

    async def check(side: str, where: str, url: str, *args: Any, **kw: Any) -> list[Problem]:
        calls.append(url)
        await release.wait()
        return []

    checks = EndpointChecks(check, reuse_seconds=60)
    ask = [checks.check("judge", "f", "http://j/v1", (("model", "m"),), key="k",
                        key_source="s") for _ in range(3)]  # fmt: skip
    waiting = asyncio.gather(*ask)
    await asyncio.sleep(0)
    release.set()
    assert await waiting == [[], [], []]
    assert calls == ["http://j/v1"]
    # Passed: reused; another key is another check.
    assert await checks.check("judge", "f", "http://j/v1", [("model", "m")], key="k",
                              key_source="s") == ()  # fmt: skip
    await checks.check("judge", "f", "http://j/v1", [("model", "m")], key="k2", key_source="s")
    assert calls == ["http://j/v1", "http://j/v1"]


async def test_a_failed_check_is_asked_again_by_the_next_run() -> None:
    answers = [[UNREACHABLE], []]

    async def check(*args: Any, **kw: Any) -> list[Problem]:
        return answers.pop(0)

    checks = EndpointChecks(check)
    first = await checks.check("judge", "f", "u", [], key=None, key_source="s")
    assert [problem.reason for problem in first] == ["JudgeUnreachable"]
    assert await checks.check("judge", "f", "u", [], key=None, key_source="s") == []
    assert answers == []


async def generating_against_served() -> tuple[Services, DeletingKube]:
    """A run generating against a Workload the operator serves (its Job running)."""
    svc, _ = world()
    kube = DeletingKube(copy.deepcopy(SERVED), copy.deepcopy(SNAPSHOT))
    svc.kube = kube  # type: ignore[assignment]
    kube.put(run_object())
    assert (await step(svc, kube)).phase == "Generating"
    kube.objects[("Job", NS, GENERATION_JOB)]["status"] = {"active": 1, "startTime": ago(5)}
    return svc, kube


async def test_a_run_generating_against_a_workload_that_turns_stalled_fails_naming_it() -> None:
    svc, kube = await generating_against_served()
    crashing = with_ready(SERVED, False, "EngineCrashing", "exited with code 1: boom")
    crashing["status"]["phase"] = "Failed"
    crashing["status"]["conditions"].append(
        {"type": "Stalled", "status": "True", "reason": "EngineCrashing", "message": "boom",
         "lastTransitionTime": ago(1)}
    )  # fmt: skip
    kube.put(crashing)
    status = await step(svc, kube)
    assert status.phase == "Failed"
    _, reason, message = condition(status, "Ready")
    assert reason == c.WORKLOAD_FAILED
    assert message == (
        "the Workload cand cannot serve (EngineCrashing): exited with code 1: boom; the "
        f"generation Job {GENERATION_JOB} was stopped (the answers it stored stay on the "
        "results claim)"
    )
    assert kube.foreground == [GENERATION_JOB]


async def test_a_workload_crashing_below_its_restart_limit_is_still_waited_for() -> None:
    svc, kube = await generating_against_served()
    kube.put(with_ready(SERVED, False, "EngineCrashing", "exited with code 1: boom"))
    status = await step(svc, kube)
    assert status.phase == "Generating"
    assert condition(status, "Ready")[1] == c.WORKLOAD_NOT_READY
