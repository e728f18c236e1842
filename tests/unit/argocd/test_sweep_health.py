"""The EvaluationSweep health check on statuses kyai.sweeps itself writes (with the
conditions a controller derives from its report), run in real Lua."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from kyai.api import status_patch
from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.sweeps import expand, plan, sweep_status

pytest.importorskip("lupa", reason="lupa (the dev extra) runs the Lua health checks")

_SPEC = importlib.util.spec_from_file_location(
    "argocd_health", Path(__file__).resolve().parents[2] / "system" / "argocd_health.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_health = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_health)
health = _health.health

SWEEP = {
    "apiVersion": "kyai.io/v1alpha1",
    "kind": "EvaluationSweep",
    "metadata": {"name": "pick", "namespace": "evals", "uid": "u", "generation": 1},
}


def obj(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "evals", "labels": {}}, "spec": spec}


WORKLOADS = [obj(name, model="m", endpoint={"url": f"http://{name}/v1"}) for name in "abc"]


class Sweep:
    """A sweep of three endpoint Workloads whose runs a test moves along."""

    def __init__(self, **fields: Any) -> None:
        self.spec = EvaluationSweepSpec.model_validate(
            {"workloads": [{"name": n} for n in "abc"], "snapshots": [{"name": "s"}],
             "parallelism": 3, **fields}
        )  # fmt: skip
        self.runs: list[dict[str, Any]] = []

    def expansion(self, workloads: list[dict[str, Any]] = WORKLOADS) -> Any:
        return expand("pick", self.spec, workloads=workloads, engine_args_sets=[],
                      snapshots=[obj("s")])  # fmt: skip

    def start(self) -> None:
        decided = plan(SWEEP, self.spec, self.expansion(), runs=self.runs, workloads=[])
        self.runs += [dict(run) for run in decided.create_runs]

    def end(self, index: int, phase: str) -> None:
        scores = [1.0, 0.0, 1.0]
        self.runs[index]["status"] = (
            {"phase": phase, "avgScore": 2 / 3, "comparisonKey": "k", "scores": scores}
            if phase == "Succeeded" else {"phase": phase}
        )  # fmt: skip

    def health(self, workloads: list[dict[str, Any]] = WORKLOADS) -> dict[str, str]:
        report = sweep_status(SWEEP, self.spec, self.expansion(workloads), self.runs)
        status = status_patch(report.status)
        reconciling = report.status.phase in ("Pending", "Running") and not report.stalled
        status["conditions"] = [
            {"type": kind, "status": str(value), "reason": report.reason,
             "message": report.message, "lastTransitionTime": "2026-01-31T12:00:00Z"}
            for kind, value in (("Ready", report.ready), ("Reconciling", reconciling),
                                ("Stalled", report.stalled))
        ]  # fmt: skip
        return health({**SWEEP, "spec": self.spec.to_k8s(), "status": status})


def test_the_life_of_a_sweep_as_argo_cd_sees_it() -> None:
    sweep = Sweep()
    assert sweep.health() == {
        "status": "Progressing", "message": "Pending: 0/3 cells succeeded, 3 pending",
    }  # fmt: skip
    sweep.start()
    assert sweep.health() == {
        "status": "Progressing", "message": "Running: 0/3 cells succeeded, 3 running",
    }  # fmt: skip
    for index in range(3):
        sweep.end(index, "Succeeded")
    assert sweep.health() == {
        "status": "Healthy", "message": "3/3 cells succeeded; best: a, b, c",
    }  # fmt: skip


def test_a_failed_cell_is_degraded_at_once() -> None:
    sweep = Sweep()
    sweep.start()
    sweep.end(0, "Failed")
    assert sweep.health() == {
        "status": "Degraded",
        "message": "1 of 3 cells failed (2 still running)",
    }
    sweep.end(1, "Succeeded")
    sweep.end(2, "Succeeded")
    assert sweep.health() == {"status": "Degraded", "message": "1 of 3 cells failed"}


def test_a_missing_workload_waits_and_an_invalid_spec_is_degraded() -> None:
    sweep = Sweep()
    assert sweep.health(WORKLOADS[:2])["status"] == "Progressing"
    invalid = Sweep(workloadSelector={}, baseline={"workload": "zzz"})
    verdict = invalid.health()
    assert verdict["status"] == "Degraded"
    assert verdict["message"].startswith("spec.baseline.workload: zzz is not among")
