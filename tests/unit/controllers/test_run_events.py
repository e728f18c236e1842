"""Which watch events of a run call for a reconcile (runs have no kopf create/update)."""

from __future__ import annotations

from typing import Any

import pytest

from kyai.controllers._services import NEW, NORMAL
from kyai.controllers.scheduling import run_priority


def run(phase: str | None = None, *, generation: int = 1, observed: int | None = 1,
        deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": "r", "namespace": "n", "generation": generation}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if observed is not None and phase is not None:
        status["observedGeneration"] = observed
    return {"metadata": meta, "spec": {}, "status": status}


@pytest.mark.parametrize("event", ["ADDED", "MODIFIED", None])
def test_a_run_not_looked_at_yet_is_new(event: str | None) -> None:
    assert run_priority(event, run()) == NEW


@pytest.mark.parametrize("phase", ["Pending", "Generating", "Judging"])
def test_status_writes_of_a_run_going_on_move_nothing(phase: str) -> None:
    assert run_priority("MODIFIED", run(phase)) is None


@pytest.mark.parametrize("phase", ["Pending", "Generating", "Judging"])
def test_every_unfinished_run_is_looked_at_when_the_operator_starts(phase: str) -> None:
    assert run_priority(None, run(phase)) == NORMAL  # kopf's listing: what resume was


def test_a_changed_spec_is_looked_at_once_until_the_status_describes_it() -> None:
    assert run_priority("MODIFIED", run("Generating", generation=2, observed=1)) == NORMAL
    assert run_priority("MODIFIED", run("Generating", generation=2, observed=2)) is None


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
@pytest.mark.parametrize("event", ["ADDED", "MODIFIED", None])
def test_finished_or_deleted_runs_are_left_alone(phase: str, event: str | None) -> None:
    assert run_priority(event, run(phase, generation=3, observed=1)) is None
    assert run_priority(event, run("Generating", deleting=True)) is None
    assert run_priority(event, run(None, deleting=True)) is None


async def test_a_failed_api_call_is_a_warning_and_a_later_look(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import sys
    from pathlib import Path

    from kyai.controllers import scheduling
    from kyai.controllers._kube import KubeError
    from kyai.controllers._result import Result

    sys.path.insert(0, str(Path(__file__).parent))
    from test_worker_pods import world

    svc, _ = world(api_retry_seconds=7)
    scheduler = scheduling.Scheduler(svc)
    looks: list[tuple[str, str, Result]] = []
    monkeypatch.setattr(scheduler, "requeue", lambda ns, name, result: looks.append(
        (ns, name, result)))  # fmt: skip

    async def timed_out(*_: Any, **__: Any) -> None:
        raise KubeError("PATCH /apis/...: TimeoutError: ")

    monkeypatch.setattr(scheduling, "reconcile_run", timed_out)
    await scheduler.reconcile("n", "r")
    assert looks == [("n", "r", Result(7.0))]  # the api_retry_seconds setting
    (record,) = [r for r in caplog.records if r.name == scheduling.__name__]
    assert record.levelname == "WARNING" and "run n/r: PATCH" in record.getMessage()
    assert record.exc_info is None  # no traceback for the API server's state

    async def broken(*_: Any, **__: Any) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(scheduling, "reconcile_run", broken)
    with pytest.raises(ValueError, match="a bug"):  # a bug is kopf's to log, with its traceback
        await scheduler.reconcile("n", "r")
    assert len(looks) == 1

    async def later(*_: Any, **__: Any) -> Result:
        return Result(16.0)

    monkeypatch.setattr(scheduling, "reconcile_run", later)
    await scheduler.reconcile("n", "r")  # the step's own wish is passed on
    assert looks[-1] == ("n", "r", Result(16.0))
