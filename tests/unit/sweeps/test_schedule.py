"""Scheduling: which cells start (bounded by parallelism), which derived Workloads come and go,
which runs go; run against a namespace that carries each plan out as the controller would."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from kyai.api import EvaluationRunSpec, WorkloadSpec
from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.sweeps import derived_workload_name, run_name


def spec(**fields: Any) -> EvaluationSweepSpec:
    return EvaluationSweepSpec.model_validate(fields)


def names(*values: str) -> list[dict[str, str]]:
    return [{"name": value} for value in values]


def uids(ns: Any) -> dict[str, str]:
    return {name: run["metadata"]["uid"] for name, run in ns.runs.items()}


def test_three_endpoints_parallelism_two_never_more_than_two_unfinished(ns: Any) -> None:
    for name in ("a", "b", "c"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b", "c"), snapshots=names("s"), parallelism=2)
    first = ns.step(sweep)
    assert [r["spec"]["workloadRef"]["name"] for r in first.create_runs] == ["a", "b"]
    assert len(ns.unfinished()) == 2
    # Nothing finished: deciding again starts nothing (and never duplicates).
    assert ns.step(sweep).create_runs == ()
    ns.set_phase(ns.run_of("a", "s"), "Generating")
    assert ns.step(sweep).create_runs == ()
    ns.succeed(ns.run_of("a", "s"), [1, 0, 1])
    third = ns.step(sweep)
    assert [r["spec"]["workloadRef"]["name"] for r in third.create_runs] == ["c"]
    assert len(ns.unfinished()) == 2
    ns.fail(ns.run_of("b", "s"))
    ns.succeed(ns.run_of("c", "s"), [1, 1, 1])
    assert ns.step(sweep).create_runs == () and ns.unfinished() == []
    assert sorted(ns.created_runs) == sorted(ns.runs) and len(ns.created_runs) == 3


@pytest.mark.parametrize("seed", range(5))
def test_random_completions_keep_the_bound_and_run_each_cell_once(ns: Any, seed: int) -> None:
    rng = random.Random(seed)
    workloads = [f"w{index}" for index in range(10)]
    for name in workloads:
        ns.add_workload(name, endpoint=True)
    for name in ("s1", "s2", "s3"):
        ns.add_snapshot(name)
    sweep = spec(workloads=names(*workloads), snapshots=names("s1", "s2", "s3"), parallelism=4)
    for _ in range(200):
        ns.step(sweep)
        unfinished = ns.unfinished()
        assert len(unfinished) <= 4
        if not unfinished:
            break
        for name in rng.sample(unfinished, rng.randint(0, len(unfinished))):
            if rng.random() < 0.1:
                ns.fail(name)
            else:
                ns.succeed(name, [rng.randint(0, 1) for _ in range(5)])
    assert ns.unfinished() == [] and len(ns.runs) == 30
    assert len(ns.created_runs) == len(set(ns.created_runs)) == 30


def test_a_plan_made_twice_creates_nothing_twice(ns: Any) -> None:
    """A restarted operator decides the same names: a second create is refused (409)."""
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b"), snapshots=names("s"), parallelism=2)
    before_restart = ns.plan(sweep)
    ns.step(sweep)
    after_restart = ns.plan(sweep)
    assert after_restart.create_runs == ()
    from_conftest = type(ns).create.__globals__["AlreadyExists"]
    for manifest in before_restart.create_runs:
        with pytest.raises(from_conftest):
            ns.create(ns.runs, manifest)
    assert len(ns.runs) == 2


def test_adding_a_workload_to_a_finished_sweep_creates_exactly_one_run(ns: Any) -> None:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b"), snapshots=names("s"), parallelism=2)
    ns.step(sweep)
    for name in list(ns.runs):
        ns.succeed(name, [1, 0])
    old = uids(ns)
    ns.add_workload("c", endpoint=True)
    grown = spec(workloads=names("a", "b", "c"), snapshots=names("s"), parallelism=2)
    decided = ns.step(grown)
    assert [r["spec"]["workloadRef"]["name"] for r in decided.create_runs] == ["c"]
    assert decided.delete_runs == () and decided.delete_workloads == ()
    assert {name: uids(ns)[name] for name in old} == old  # the old runs keep their uids


def test_a_changed_run_block_reruns_nothing(ns: Any) -> None:
    ns.add_workload("a", endpoint=True)
    ns.add_snapshot("s")
    ns.step(spec(workloads=names("a"), snapshots=names("s")))
    ns.succeed(ns.run_of("a", "s"), [1, 1])
    changed = spec(workloads=names("a"), snapshots=names("s"),
                   run={"judge": {"type": "builtin"}}, parallelism=3)  # fmt: skip
    decided = ns.step(changed)
    assert decided.create_runs == () and decided.delete_runs == ()
    # Deleting a cell's run is how to run it again (with the current run block).
    (name,) = ns.runs
    del ns.runs[name]
    (again,) = ns.step(changed).create_runs
    assert again["metadata"]["name"] == name
    assert again["spec"]["judge"] == {"type": "builtin"}


def test_removed_cells_lose_their_runs_others_keep_theirs(ns: Any) -> None:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    for name in ("s", "t"):
        ns.add_snapshot(name)
    ns.step(spec(workloads=names("a", "b"), snapshots=names("s", "t"), parallelism=4))
    kept = {ns.run_of("a", "s"), ns.run_of("a", "t")}
    removed = {ns.run_of("b", "s"), ns.run_of("b", "t")}
    decided = ns.step(spec(workloads=names("a"), snapshots=names("s", "t"), parallelism=4))
    assert set(decided.delete_runs) == removed
    assert set(ns.runs) == kept


def test_runs_of_a_named_workload_that_went_missing_are_kept(ns: Any) -> None:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b"), snapshots=names("s"), parallelism=2)
    ns.step(sweep)
    ns.succeed(ns.run_of("b", "s"), [1, 1])
    del ns.workloads["b"]
    decided = ns.step(sweep)
    assert decided.delete_runs == () and len(ns.runs) == 2


def test_a_workload_that_leaves_the_selector_leaves_the_sweep(ns: Any) -> None:
    ns.add_workload("a", endpoint=True, labels={"pick": "yes"})
    ns.add_workload("b", endpoint=True, labels={"pick": "yes"})
    ns.add_snapshot("s")
    sweep = spec(workloadSelector={"matchLabels": {"pick": "yes"}}, snapshots=names("s"),
                 parallelism=2)  # fmt: skip
    ns.step(sweep)
    gone = ns.run_of("b", "s")
    ns.workloads["b"]["metadata"]["labels"] = {}
    assert ns.step(sweep).delete_runs == (gone,)


def test_an_invalid_spec_starts_and_deletes_nothing(ns: Any) -> None:
    ns.add_workload("a", endpoint=True, labels={"t": "1"})
    ns.add_workload("b", endpoint=True)
    ns.add_snapshot("s")
    ns.step(spec(workloads=names("b"), snapshots=names("s")))
    invalid = spec(workloadSelector={"matchLabels": {"t": "1"}}, snapshots=names("s"),
                   baseline={"workload": "zzz"})  # fmt: skip
    decided = ns.step(invalid)
    assert (decided.create_runs, decided.delete_runs, decided.create_workloads) == ((), (), ())
    assert decided.waiting == (
        "spec.baseline.workload: zzz is not among the sweep's Workloads (a)",
    )
    (cell,) = ns.expand(spec(workloads=names("b"), snapshots=names("s"))).cells
    assert list(ns.runs) == [run_name("pick", cell)]


# -- derived Workloads --------------------------------------------------------------------------


def served_sweep(ns: Any, **fields: Any) -> EvaluationSweepSpec:
    ns.add_workload(
        "qwen",
        image="vllm/vllm-openai:v0.11.0",
        resources={"gpus": 2, "memory": "64Gi"},
        engineArgsSetRef={"name": "base-flags"},
        labels={"app.kubernetes.io/instance": "argo-app", "team": "a"},
    )
    ns.add_engine_args_set("default")
    ns.add_engine_args_set("fp8-kv")
    return spec(workloads=names("qwen"), engineArgsSets=names("default", "fp8-kv"), **fields)


def test_one_served_workload_times_two_sets_parallelism_one(ns: Any) -> None:
    ns.add_snapshot("mmlu")
    sweep = served_sweep(ns, snapshots=names("mmlu"))
    ns.slow_deletion = True
    first = ns.step(sweep)
    default = derived_workload_name("pick", "qwen", "default")
    fp8 = derived_workload_name("pick", "qwen", "fp8-kv")
    assert [w["metadata"]["name"] for w in first.create_workloads] == [default]
    assert [r["spec"]["workloadRef"]["name"] for r in first.create_runs] == [default]
    ns.succeed(ns.run_of("qwen", "mmlu", "default"), [1, 0, 1])
    # The first derived Workload goes; its pods hold the place until they are gone.
    second = ns.step(sweep)
    assert second.delete_workloads == (default,) and second.create_runs == ()
    third = ns.step(sweep)
    assert (third.create_runs, third.create_workloads, third.delete_workloads) == ((), (), ())
    assert third.unfinished == 1
    ns.gone(default)
    fourth = ns.step(sweep)
    assert [w["metadata"]["name"] for w in fourth.create_workloads] == [fp8]
    assert [r["spec"]["workloadRef"]["name"] for r in fourth.create_runs] == [fp8]
    ns.succeed(ns.run_of("qwen", "mmlu", "fp8-kv"), [1, 1, 1])
    assert ns.step(sweep).delete_workloads == (fp8,)
    ns.gone(fp8)
    assert ns.derived() == [] and ns.created_workloads == [default, fp8]


def test_a_derived_workload_is_the_base_with_the_sets_flags(ns: Any) -> None:
    ns.add_snapshot("mmlu")
    sweep = served_sweep(ns, snapshots=names("mmlu"), parallelism=2)
    decided = ns.plan(sweep)
    base = ns.workloads["qwen"]
    assert len(decided.create_workloads) == 2
    for manifest, eas in zip(decided.create_workloads, ("default", "fp8-kv"), strict=True):
        derived = WorkloadSpec.model_validate(manifest["spec"])
        assert derived.engine_args_set_ref is not None
        assert derived.engine_args_set_ref.name == eas
        expected = {**base["spec"], "engineArgsSetRef": {"name": eas}}
        assert manifest["spec"] == expected  # same model, image, resources
        meta = manifest["metadata"]
        assert meta["namespace"] == "evals"
        assert meta["ownerReferences"] == [
            {"apiVersion": "kyai.io/v1alpha1", "kind": "EvaluationSweep", "name": "pick",
             "uid": "sweep-uid-1", "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
        assert meta["labels"]["kyai.io/sweep"] == "pick"
        assert len(meta["labels"]["kyai.io/sweep-variant"]) == 16
        # The base's labels are not copied (a GitOps tracking label would claim it).
        assert meta["labels"]["app.kubernetes.io/instance"] == "pick"
        assert "team" not in meta["labels"]
        assert meta["annotations"] == {
            "kyai.io/sweep-workload": "qwen",
            "kyai.io/sweep-engine-args-set": eas,
        }
    # The base object is left as it was.
    assert base["spec"]["engineArgsSetRef"] == {"name": "base-flags"}


def test_a_derived_workload_serves_its_cells_one_after_the_other(ns: Any) -> None:
    for name in ("s1", "s2"):
        ns.add_snapshot(name)
    sweep = served_sweep(ns, snapshots=names("s1", "s2"))
    default = derived_workload_name("pick", "qwen", "default")
    ns.step(sweep)
    ns.succeed(ns.run_of("qwen", "s1", "default"), [1, 0])
    decided = ns.step(sweep)  # the next cell of the same derived Workload: kept, no new one
    assert decided.delete_workloads == () and decided.create_workloads == ()
    assert [r["spec"]["workloadRef"]["name"] for r in decided.create_runs] == [default]
    ns.succeed(ns.run_of("qwen", "s2", "default"), [1, 0])
    assert ns.step(sweep).delete_workloads == (default,)


def test_keep_workloads_keeps_them(ns: Any) -> None:
    ns.add_snapshot("s")
    sweep = served_sweep(ns, snapshots=names("s"), parallelism=2, keepWorkloads=True)
    ns.step(sweep)
    for name in list(ns.runs):
        ns.succeed(name, [1, 1])
    assert ns.step(sweep).delete_workloads == ()
    assert len(ns.derived()) == 2


def test_a_derived_workload_with_pending_cells_starts_them_first(ns: Any) -> None:
    for name in ("s1", "s2"):
        ns.add_snapshot(name)
    ns.add_workload("remote", endpoint=True)
    sweep = served_sweep(ns, snapshots=names("s1", "s2"), parallelism=2)
    sweep = spec(**{**sweep.model_dump(by_alias=True, exclude_unset=True),
                    "workloads": names("remote", "qwen")})  # fmt: skip
    ns.step(sweep)  # remote/s1, remote/s2
    ns.succeed(ns.run_of("remote", "s1"), [1, 1])
    ns.step(sweep)  # qwen/default/s1
    ns.succeed(ns.run_of("remote", "s2"), [1, 1])
    ns.succeed(ns.run_of("qwen", "s1", "default"), [1, 1])
    decided = ns.step(sweep)
    # The default variant's Workload is up: its s2 cell goes before fp8-kv's first.
    workloads = [r["spec"]["workloadRef"]["name"] for r in decided.create_runs]
    assert workloads == [derived_workload_name("pick", "qwen", "default"),
                         derived_workload_name("pick", "qwen", "fp8-kv")]  # fmt: skip


def test_a_rerun_waits_while_an_up_workload_finishes_its_cells(ns: Any) -> None:
    """A cell whose Workload is up goes before an earlier cell that needs a new Workload."""
    for name in ("s1", "s2"):
        ns.add_snapshot(name)
    sweep = served_sweep(ns, snapshots=names("s1", "s2"))
    default = derived_workload_name("pick", "qwen", "default")
    fp8 = derived_workload_name("pick", "qwen", "fp8-kv")
    ns.step(sweep)
    ns.fail(ns.run_of("qwen", "s1", "default"))
    ns.step(sweep)
    ns.succeed(ns.run_of("qwen", "s2", "default"), [1, 0])
    assert ns.step(sweep).delete_workloads == (default,)
    (started,) = ns.step(sweep).create_runs
    assert started["spec"]["workloadRef"]["name"] == fp8
    del ns.runs[ns.run_of("qwen", "s1", "default")]  # to run the failed cell again
    ns.succeed(ns.run_of("qwen", "s1", "fp8-kv"), [1, 1])
    decided = ns.step(sweep)
    assert [
        r["metadata"]["annotations"]["kyai.io/sweep-snapshot"] for r in decided.create_runs
    ] == ["s2"]
    assert [r["spec"]["workloadRef"]["name"] for r in decided.create_runs] == [fp8]
    assert decided.create_workloads == ()


def test_a_running_cell_that_lost_its_workload_gets_it_back(ns: Any) -> None:
    """The operator died between creating the run and its Workload: the next plan repairs."""
    ns.add_snapshot("s")
    sweep = served_sweep(ns, snapshots=names("s"))
    ns.step(sweep)
    default = derived_workload_name("pick", "qwen", "default")
    del ns.workloads[default]
    decided = ns.step(sweep)
    assert [w["metadata"]["name"] for w in decided.create_workloads] == [default]
    assert decided.create_runs == ()


def test_a_removed_set_loses_its_workload_once_no_run_uses_it(ns: Any) -> None:
    ns.add_snapshot("s")
    sweep = served_sweep(ns, snapshots=names("s"), parallelism=2)
    ns.step(sweep)
    fp8 = derived_workload_name("pick", "qwen", "fp8-kv")
    fewer = spec(workloads=names("qwen"), engineArgsSets=names("default"), snapshots=names("s"),
                 parallelism=2)  # fmt: skip
    decided = ns.plan(fewer)
    # Its run goes now; its Workload once the run is gone (the run is unfinished).
    assert decided.delete_runs == (ns.run_of("qwen", "s", "fp8-kv"),)
    assert decided.delete_workloads == ()
    ns.step(fewer)
    assert ns.step(fewer).delete_workloads == (fp8,)


# -- objects the sweep does not own ------------------------------------------------------------


def test_a_run_of_another_owner_holding_a_cells_name_keeps_it_waiting(ns: Any) -> None:
    ns.add_workload("a", endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a"), snapshots=names("s"))
    (manifest,) = ns.plan(sweep).create_runs
    stranger = copy.deepcopy(manifest)
    stranger["metadata"]["ownerReferences"][0]["uid"] = "an-older-sweep-of-that-name"
    ns.create(ns.runs, stranger)
    decided = ns.step(sweep)
    assert decided.create_runs == ()
    assert decided.waiting == (
        f"the EvaluationRun {manifest['metadata']['name']} exists and is not this sweep's",
    )


def test_a_duplicate_run_of_one_cell_is_deleted(ns: Any) -> None:
    ns.add_workload("a", endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a"), snapshots=names("s"))
    ns.step(sweep)
    (name,) = ns.runs
    duplicate = copy.deepcopy(ns.runs[name])
    duplicate["metadata"]["name"] = "copied-by-hand"
    ns.create(ns.runs, duplicate)
    assert ns.step(sweep).delete_runs == ("copied-by-hand",)
    assert list(ns.runs) == [name]


def test_cell_runs_are_valid_evaluation_runs(ns: Any) -> None:
    ns.add_workload("a", endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a"), snapshots=names("s"),
                 run={"judges": [{"name": "j1", "type": "builtin"}, {"name": "j2"}],
                      "thresholds": {"avgScore": 0.5}})  # fmt: skip
    (manifest,) = ns.plan(sweep).create_runs
    run = EvaluationRunSpec.model_validate(manifest["spec"])
    assert run.workload_ref is not None and run.workload_ref.name == "a"
    assert run.snapshot_ref is not None and run.snapshot_ref.name == "s"
    assert manifest["spec"]["judges"] == [{"name": "j1", "type": "builtin"}, {"name": "j2"}]
    labels = manifest["metadata"]["labels"]
    assert labels["kyai.io/sweep"] == "pick"
    assert labels["kyai.io/sweep-cell"] == ns.expand(sweep).cells[0].hash
    assert manifest["metadata"]["ownerReferences"][0]["controller"] is True
    assert manifest["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True


def test_a_deleted_workload_a_running_cell_uses_holds_one_place_not_two(ns: Any) -> None:
    """A derived Workload deleted while its cell still runs: its place is counted once.

    While the cell runs, its run holds the place (the Workload's pods are the run's); once the
    run is done the terminating Workload holds it until its pods are gone; never both, never
    neither. Exact counts of the cells started at each step.
    """
    for name in ("s1", "s2"):
        ns.add_snapshot(name)
    ns.add_workload("remote", endpoint=True)
    sweep = served_sweep(ns, snapshots=names("s1", "s2"), parallelism=2)
    sweep = spec(**{**sweep.model_dump(by_alias=True, exclude_unset=True),
                    "workloads": names("qwen", "remote")})  # fmt: skip
    ns.slow_deletion = True
    default = derived_workload_name("pick", "qwen", "default")
    first = ns.step(sweep)
    assert len(first.create_runs) == 2 and first.unfinished == 0
    qwen_run = ns.run_of("qwen", "s1", "default")
    other = next(name for name in ns.unfinished() if name != qwen_run)
    # Someone deletes the derived Workload while its cell runs (its pods terminate slowly).
    ns.workloads[default]["metadata"]["deletionTimestamp"] = "2026-01-31T12:00:00Z"
    held = ns.step(sweep)
    assert (len(held.create_runs), held.unfinished) == (0, 2)  # two runs, not three places
    # The other cell ends: exactly one place frees, and one cell starts.
    ns.succeed(other, [1, 0])
    freed = ns.step(sweep)
    assert (len(freed.create_runs), freed.unfinished) == (1, 1)
    started = freed.create_runs[0]["spec"]["workloadRef"]["name"]
    assert started != default  # a cell of the Workload being deleted waits
    # The qwen cell ends while its Workload still terminates: the Workload holds the place.
    ns.succeed(qwen_run, [1, 1])
    ns.succeed(started_run(ns, freed), [1, 1])
    terminating = ns.step(sweep)
    assert (len(terminating.create_runs), terminating.unfinished) == (1, 1)
    # Its pods are gone: both places are free again.
    ns.gone(default)
    assert ns.plan(sweep).unfinished == len(ns.unfinished())


def started_run(ns: Any, decided: Any) -> str:
    (manifest,) = decided.create_runs
    return str(manifest["metadata"]["name"])
