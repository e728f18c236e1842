"""Re-judges in a circle are Stalled at once (CircularRejudge); a re-judge of a re-judge works.

A re-judge waits for its source run to succeed. One that names itself, or re-judges that
re-judge each other (a re-judges b, b re-judges a), waited forever (SourceRunNotReady): the
chain of sources is now followed, bounded, and a chain that comes round again is a wait no
time ends. Against the in-memory API of test_worker_pods (no API server).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EvaluationRunStatus, RejudgePlan
from kyai.controllers import _conditions as c
from kyai.controllers._references import (
    SOURCE_CHAIN_LIMIT,
    circle_message,
    source_circle,
)
from kyai.controllers.evaluationrun import RunEngine
from kyai.controllers.scheduling import Scheduler

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import JUDGE_KEY, NS, MemoryKube, condition, obj, world

KIND = "EvaluationRun"
JUDGE = {"type": "llm", "llm": {"endpoint": "http://j/v1", "model": "judge",
                                "apiKeySecretRef": {"name": "judge-key"}}}  # fmt: skip


def rejudge(name: str, source: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {"generationFrom": {"runRef": {"name": source}}, "judge": copy.deepcopy(JUDGE)}
    return obj(KIND, name, spec, status if status is not None else {})


def generating(name: str, phase: str = "Generating") -> dict[str, Any]:
    spec = {"workloadRef": {"name": "cand"}, "snapshotRef": {"name": "snap"}}
    return obj(KIND, name, spec, {"phase": phase})


def reader(*runs: dict[str, Any]) -> tuple[Any, list[str]]:
    by_name = {run["metadata"]["name"]: run for run in runs}
    reads: list[str] = []

    async def read(name: str) -> Mapping[str, Any] | None:
        reads.append(name)
        return by_name.get(name)

    return read, reads


# -- the chain of sources ---------------------------------------------------------------------


async def test_a_run_naming_itself_is_a_circle_without_a_read() -> None:
    read, reads = reader()
    assert await source_circle("a", "a", read) == ["a", "a"]
    assert reads == []


@pytest.mark.parametrize(
    ("runs", "chain"),
    [
        ((rejudge("b", "a"),), ["a", "b", "a"]),
        ((rejudge("b", "c"), rejudge("c", "a")), ["a", "b", "c", "a"]),
        # a waits on a circle it is not in: b and c re-judge each other.
        ((rejudge("b", "c"), rejudge("c", "b")), ["a", "b", "c", "b"]),
        ((rejudge("b", "b"),), ["a", "b", "b"]),
        # A run not looked at yet (no status) is waiting too.
        ((obj(KIND, "b", {"generationFrom": {"runRef": {"name": "a"}}}, {}),), ["a", "b", "a"]),
    ],
)
async def test_a_chain_that_comes_round_again_is_a_circle(
    runs: tuple[dict[str, Any], ...], chain: list[str]
) -> None:
    read, _ = reader(*runs)
    assert await source_circle("a", "b", read) == chain


@pytest.mark.parametrize(
    "runs",
    [
        (),  # the source does not exist (yet)
        (generating("b"),),  # a run that generates: the chain ends at its answers
        (rejudge("b", "c"), generating("c", "Pending")),
        (rejudge("b", "c"),),  # c does not exist
        # b has started (its source c succeeded): whatever its spec, the chain ends there.
        (rejudge("b", "a", {"phase": "Judging"}),),
        (rejudge("b", "a", {"phase": "Failed"}),),
        (obj(KIND, "b", {"generationFrom": {}}, {}),),
    ],
)
async def test_a_chain_that_ends_is_no_circle(runs: tuple[dict[str, Any], ...]) -> None:
    read, _ = reader(*runs)
    assert await source_circle("a", "b", read) is None


async def test_the_chain_is_followed_a_bounded_number_of_runs() -> None:
    long = [rejudge(f"r{i}", f"r{i + 1}") for i in range(100)]
    read, reads = reader(*long, rejudge("r100", "a"))
    assert await source_circle("a", "r0", read) is None  # too long to tell: a plain wait
    assert len(reads) == SOURCE_CHAIN_LIMIT
    read, _ = reader(*long[: SOURCE_CHAIN_LIMIT - 1], rejudge(f"r{SOURCE_CHAIN_LIMIT - 1}", "a"))
    chain = await source_circle("a", "r0", read)
    assert chain is not None and len(chain) == SOURCE_CHAIN_LIMIT + 2


def test_the_message_names_the_chain_and_the_field() -> None:
    assert circle_message(["a", "a"]) == (
        "a re-judges itself: it would wait for its own answers forever; "
        "spec.generationFrom.runRef.name must name another run, one that generated answers "
        "(or a re-judge of one)"
    )
    assert circle_message(["a", "b", "a"]) == (
        "a re-judges b, b re-judges a: re-judges in a circle wait for each other's answers "
        "forever; spec.generationFrom.runRef.name of one of them must name another run, one "
        "that generated answers (or a re-judge of one)"
    )
    upstream = circle_message(["u", "a", "b", "a"])
    assert upstream.startswith(
        "u re-judges a, a re-judges b, b re-judges a: its source waits in a circle of "
        "re-judges forever; spec.generationFrom.runRef.name of a or b must name"
    )
    assert circle_message(["u", "a", "a"]).startswith("u re-judges a, a re-judges itself: ")


# -- the run engine -----------------------------------------------------------------------------


async def step(kube: MemoryKube, svc: Any, name: str) -> EvaluationRunStatus:
    run = await kube.get(KIND, NS, name)
    assert run is not None
    await RunEngine(svc, run).reconcile()
    fresh = await kube.get(KIND, NS, name)
    assert fresh is not None
    return EvaluationRunStatus.model_validate(fresh["status"])


async def test_rejudges_of_each_other_are_both_stalled_at_once_and_recover() -> None:
    svc, kube = world(copy.deepcopy(JUDGE_KEY), rejudge("a", "b"), rejudge("b", "a"))
    for name, other in (("a", "b"), ("b", "a")):
        status = await step(kube, svc, name)
        assert status.phase == "Pending"
        stalled, reason, message = condition(status, c.STALLED)
        assert (stalled, reason) == ("True", c.CIRCULAR_REJUDGE)
        assert message.startswith(f"{name} re-judges {other}, {other} re-judges {name}: ")
        assert condition(status, c.RECONCILING)[0] == "False"
        assert condition(status, c.READY)[1] == c.CIRCULAR_REJUDGE
    # Looked at again, it says the same (its status is written once).
    assert await step(kube, svc, "a") == await step(kube, svc, "a")
    # b now re-judges a run that generates: a waits for b, b for its source, neither stalled.
    kube.put(generating("src"))
    kube.objects[(KIND, NS, "b")]["spec"]["generationFrom"]["runRef"]["name"] = "src"
    for name, source in (("a", "b"), ("b", "src")):
        status = await step(kube, svc, name)
        assert condition(status, c.STALLED)[0] == "False"
        assert condition(status, c.READY)[1] == c.SOURCE_RUN_NOT_READY
        assert f"the EvaluationRun {source} has not succeeded yet" in (status.message or "")


async def test_a_run_naming_itself_is_stalled_at_once() -> None:
    svc, kube = world(copy.deepcopy(JUDGE_KEY), rejudge("a", "a"))
    status = await step(kube, svc, "a")
    assert status.phase == "Pending"
    assert condition(status, c.STALLED)[:2] == ("True", c.CIRCULAR_REJUDGE)
    assert (status.message or "").startswith("a re-judges itself: ")


async def test_a_rejudge_of_a_rejudge_judges_the_answers_of_the_run_that_generated_them() -> None:
    plan = RejudgePlan(
        results_claim="gen-results", own_claim=False, judges={"useLlm": True},
        generations_path="/results/gen",
    )  # fmt: skip
    first = rejudge("first", "gen", {
        "phase": "Succeeded", "resultsClaim": "gen-results", "resultsPath": "/results/first",
        "workload": "cand", "snapshot": "snap", "plan": plan.to_status(),
    })  # fmt: skip
    svc, kube = world(copy.deepcopy(JUDGE_KEY), first, rejudge("second", "first"))
    status = await step(kube, svc, "second")
    assert status.phase == "Judging", status.message
    assert isinstance(status.plan, RejudgePlan)
    # The first re-judge's own folder holds only its judgements: the answers are gen's.
    assert (status.plan.results_claim, status.plan.generations_path) == (
        "gen-results", "/results/gen",
    )  # fmt: skip
    assert (status.results_path, status.workload, status.snapshot) == (
        "/results/second", "cand", "snap",
    )  # fmt: skip
    job = next(o for (kind, _, _), o in kube.objects.items() if kind == "Job")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--generations") + 1] == "/results/gen"
    assert args[args.index("--output") + 1] == "/results/second"


# -- waking -------------------------------------------------------------------------------------


def _stalled(reason: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [{"type": "Stalled", "status": "True", "reason": reason, "message": "m"}],
    }


async def test_a_run_stalled_in_a_circle_wakes_its_waiting_rejudges_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, str]] = []

    async def record(self: Scheduler, namespace: str, name: str, **_: Any) -> None:
        calls.append((namespace, name))

    monkeypatch.setattr(Scheduler, "reconcile", record)
    svc, _ = world()
    scheduler = Scheduler(svc)
    for run in (rejudge("a", "b", {"phase": "Pending"}), rejudge("u", "a", {"phase": "Pending"})):
        svc.remember(run)
    # Waiting, or Stalled for another cause: nothing new for the runs re-judging it.
    await scheduler.reference_changed(KIND, NS, "a", {"phase": "Pending"})
    await scheduler.reference_changed(KIND, NS, "a", _stalled(c.SOURCE_RUN_FAILED))
    assert calls == []
    # a in a circle: u waits on it, and is told at once (not at the resync).
    await scheduler.reference_changed(KIND, NS, "a", _stalled(c.CIRCULAR_REJUDGE))
    assert calls == [(NS, "u")]
