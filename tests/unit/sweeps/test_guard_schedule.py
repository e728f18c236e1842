"""A cell's run is kept while a Snapshot or EngineArgsSet the spec names is missing, as it is
for a missing Workload (issue 36's mutation pass)."""

from __future__ import annotations

from typing import Any

from kyai.api.evaluationsweep import EvaluationSweepSpec


def names(*values: str) -> list[dict[str, str]]:
    return [{"name": value} for value in values]


def test_runs_of_a_named_snapshot_that_went_missing_are_kept(ns: Any) -> None:
    ns.add_workload("a", endpoint=True)
    for name in ("s", "t"):
        ns.add_snapshot(name)
    sweep = EvaluationSweepSpec.model_validate(
        {"workloads": names("a"), "snapshots": names("s", "t"), "parallelism": 2}
    )
    ns.step(sweep)
    ns.succeed(ns.run_of("a", "t"), [1, 1])
    del ns.snapshots["t"]
    decided = ns.step(sweep)
    assert decided.delete_runs == () and len(ns.runs) == 2


def test_runs_of_a_named_engine_args_set_that_went_missing_are_kept(ns: Any) -> None:
    ns.add_workload("qwen", model="Qwen/Qwen2.5-7B-Instruct")
    ns.add_snapshot("s")
    for name in ("default", "fp8-kv"):
        ns.add_engine_args_set(name)
    sweep = EvaluationSweepSpec.model_validate(
        {"workloads": names("qwen"), "engineArgsSets": names("default", "fp8-kv"),
         "snapshots": names("s"), "parallelism": 2}
    )  # fmt: skip
    ns.step(sweep)
    ns.succeed(ns.run_of("qwen", "s", "fp8-kv"), [1, 1])
    runs = dict(ns.runs)
    del ns.engine_args_sets["fp8-kv"]
    decided = ns.step(sweep)
    assert decided.delete_runs == () and ns.runs.keys() == runs.keys()
