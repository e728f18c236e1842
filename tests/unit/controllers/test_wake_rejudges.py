"""A run that finishes wakes the Pending runs that re-judge it (not the 20 s resync)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.controllers import handlers

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, world


def _run(name: str, phase: str | None, source: str | None, namespace: str = NS) -> dict[str, Any]:
    spec: dict[str, Any] = {"judge": {"type": "llm"}}
    if source is not None:
        spec["generationFrom"] = {"runRef": {"name": source}}
    return {
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": phase} if phase else {},
    }


@pytest.fixture
def reconciled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    async def record(svc: Any, namespace: str, name: str, **_: Any) -> None:
        calls.append((namespace, name))

    monkeypatch.setattr(handlers, "reconcile_run", record)
    return calls


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
async def test_a_finished_run_wakes_only_the_pending_runs_that_rejudge_it(
    phase: str, reconciled: list[tuple[str, str]]
) -> None:
    svc, _ = world()
    for run in (
        _run("rejudge-b", "Pending", "source"),
        _run("rejudge-a", "Pending", "source"),
        _run("judging", "Judging", "source"),  # already going on
        _run("other", "Pending", "another-run"),
        _run("fresh", "Pending", None),
        _run("elsewhere", "Pending", "source", namespace="team-b"),
    ):
        svc.remember(run)
    await handlers.wake_rejudges(svc, NS, "source", {"phase": phase})
    assert reconciled == [(NS, "rejudge-a"), (NS, "rejudge-b")]


@pytest.mark.parametrize("status", [{"phase": "Generating"}, {"phase": "Judging"}, {}, None])
async def test_a_run_still_going_wakes_nobody(
    status: dict[str, Any] | None, reconciled: list[tuple[str, str]]
) -> None:
    svc, _ = world()
    svc.remember(_run("rejudge", "Pending", "source"))
    await handlers.wake_rejudges(svc, NS, "source", status)
    assert reconciled == []
