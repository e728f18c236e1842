"""Expansion: the spec and the namespace's objects → the cells, in start order, with stable
hashes and names; what is left out and why."""

from __future__ import annotations

from typing import Any

from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.builders import child_name, spec_hash
from kyai.sweeps import (
    ENDPOINT_NOTE,
    ENGINE_ARGS_NOT_FOUND,
    INVALID_SPEC,
    NO_CELLS,
    SNAPSHOT_NOT_FOUND,
    WORKLOAD_NOT_FOUND,
    cell_hash,
    derived_workload_name,
    matches,
    run_name,
)


def spec(**fields: Any) -> EvaluationSweepSpec:
    return EvaluationSweepSpec.model_validate(fields)


def names(*values: str) -> list[dict[str, str]]:
    return [{"name": value} for value in values]


def test_cells_are_workload_major_then_set_then_snapshot(ns: Any) -> None:
    for name in ("b", "a"):
        ns.add_workload(name)
    for name in ("x", "y"):
        ns.add_engine_args_set(name)
    for name in ("s2", "s1"):
        ns.add_snapshot(name)
    expansion = ns.expand(
        spec(workloads=names("b", "a"), engineArgsSets=names("x", "y"), snapshots=names("s2", "s1"))
    )
    assert [(c.workload, c.engine_args_set, c.snapshot) for c in expansion.cells] == [
        (w, e, s) for w in ("b", "a") for e in ("x", "y") for s in ("s2", "s1")
    ]
    assert [(v.workload, v.engine_args_set) for v in expansion.variants] == [
        ("b", "x"), ("b", "y"), ("a", "x"), ("a", "y"),
    ]  # fmt: skip
    assert expansion.problems == () and expansion.notes == ()


def test_the_cell_hash_is_of_the_three_names_only() -> None:
    assert cell_hash("a", None, "s") == spec_hash(
        {"workload": "a", "engineArgsSet": None, "snapshot": "s"}
    )
    assert len(cell_hash("a", None, "s")) == 16
    distinct = {cell_hash(*c) for c in [("a", None, "s"), ("a", "x", "s"), ("a", None, "t"),
                                        ("b", None, "s"), ("a-b", None, "s")]}  # fmt: skip
    assert len(distinct) == 5


def test_adding_a_workload_adds_its_cells_and_changes_no_other(ns: Any) -> None:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    before = ns.expand(spec(workloads=names("a", "b"), snapshots=names("s")))
    ns.add_workload("c", endpoint=True)
    after = ns.expand(
        spec(workloads=names("a", "b", "c"), snapshots=names("s"), parallelism=3,
             run={"generation": {"concurrency": 2}}, baseline={"workload": "a"})
    )  # fmt: skip
    assert len(after.cells) == len(before.cells) + 1
    assert after.cells[:2] == before.cells  # same hashes, same candidates
    names_before = [run_name("pick", cell) for cell in before.cells]
    assert [run_name("pick", cell) for cell in after.cells[:2]] == names_before
    assert after.cells[2].workload == "c"


def test_one_served_workload_times_two_sets_gives_two_derived_workloads(ns: Any) -> None:
    ns.add_workload("qwen", resources={"gpus": 2}, replicas=1)
    ns.add_engine_args_set("default")
    ns.add_engine_args_set("fp8-kv")
    ns.add_snapshot("mmlu")
    expansion = ns.expand(
        spec(workloads=names("qwen"), engineArgsSets=names("default", "fp8-kv"),
             snapshots=names("mmlu"))
    )  # fmt: skip
    assert [(c.engine_args_set, c.candidate) for c in expansion.cells] == [
        ("default", derived_workload_name("pick", "qwen", "default")),
        ("fp8-kv", derived_workload_name("pick", "qwen", "fp8-kv")),
    ]
    assert all(cell.variant is not None for cell in expansion.cells)
    assert expansion.bases["qwen"]["spec"]["resources"] == {"gpus": 2}


def test_an_endpoint_workload_under_sets_keeps_one_cell_without_a_set(ns: Any) -> None:
    ns.add_workload("remote", endpoint=True)
    ns.add_workload("served")
    ns.add_engine_args_set("e1")
    ns.add_engine_args_set("e2")
    ns.add_snapshot("s")
    expansion = ns.expand(
        spec(workloads=names("remote", "served"), engineArgsSets=names("e1", "e2"),
             snapshots=names("s"))
    )  # fmt: skip
    remote = [cell for cell in expansion.cells if cell.workload == "remote"]
    assert [(c.engine_args_set, c.candidate, c.variant, c.note) for c in remote] == [
        (None, "remote", None, ENDPOINT_NOTE)
    ]
    assert [c.engine_args_set for c in expansion.cells if c.workload == "served"] == ["e1", "e2"]
    assert expansion.notes == (f"Workload remote: {ENDPOINT_NOTE}",)


def test_without_sets_a_served_workload_runs_as_it_is(ns: Any) -> None:
    ns.add_workload("served", engineArgsSetRef={"name": "own"})
    ns.add_snapshot("s")
    (cell,) = ns.expand(spec(workloads=names("served"), snapshots=names("s"))).cells
    assert (cell.engine_args_set, cell.candidate, cell.variant) == (None, "served", None)


def test_a_set_of_another_framework_gives_no_cell_and_says_so(ns: Any) -> None:
    ns.add_workload("v", framework="vllm")
    ns.add_workload("g", framework="sglang")
    ns.add_engine_args_set("v-flags", framework="vllm")
    ns.add_engine_args_set("g-flags", framework="sglang")
    ns.add_snapshot("s")
    expansion = ns.expand(
        spec(workloads=names("v", "g"), engineArgsSets=names("v-flags", "g-flags"),
             snapshots=names("s"))
    )  # fmt: skip
    assert [(c.workload, c.engine_args_set) for c in expansion.cells] == [
        ("v", "v-flags"), ("g", "g-flags"),
    ]  # fmt: skip
    assert expansion.notes == (
        "Workload v × EngineArgsSet g-flags: the set is for sglang, the Workload serves vllm: "
        "no cell",
        "Workload g × EngineArgsSet v-flags: the set is for vllm, the Workload serves sglang: "
        "no cell",
    )
    assert not expansion.invalid


def test_no_matching_framework_at_all_is_an_invalid_spec(ns: Any) -> None:
    ns.add_workload("v", framework="vllm")
    ns.add_engine_args_set("g-flags", framework="sglang")
    ns.add_snapshot("s")
    expansion = ns.expand(
        spec(workloads=names("v"), engineArgsSets=names("g-flags"), snapshots=names("s"))
    )
    assert expansion.cells == ()
    assert [p.reason for p in expansion.problems] == [NO_CELLS] and expansion.invalid


def test_missing_named_objects_are_problems_that_wait(ns: Any) -> None:
    ns.add_workload("a")
    ns.add_snapshot("s")
    expansion = ns.expand(
        spec(workloads=names("a", "gone"), engineArgsSets=names("nope"),
             snapshots=names("s", "later"))
    )  # fmt: skip
    assert [(p.reason, p.message, p.missing) for p in expansion.problems] == [
        (WORKLOAD_NOT_FOUND, "the Workload gone (spec.workloads) does not exist", True),
        (SNAPSHOT_NOT_FOUND, "the Snapshot later (spec.snapshots) does not exist", True),
        (ENGINE_ARGS_NOT_FOUND, "the EngineArgsSet nope (spec.engineArgsSets) does not exist",
         True),
    ]  # fmt: skip
    assert expansion.missing == {
        ("Workload", "gone"), ("Snapshot", "later"), ("EngineArgsSet", "nope"),
    }  # fmt: skip
    assert expansion.cells == () and not expansion.invalid  # a's only set is missing


def test_selectors_add_to_the_listed_ones_in_name_order(ns: Any) -> None:
    ns.add_workload("listed")
    ns.add_workload("z", endpoint=True, labels={"team": "a", "tier": "gold"})
    ns.add_workload("m", endpoint=True, labels={"team": "a"})
    ns.add_workload("other", labels={"team": "b"})
    ns.add_workload("judge", endpoint=True, labels={"team": "a"})
    ns.add_workload("derived", labels={"team": "a", "kyai.io/sweep": "another"})
    ns.add_snapshot("s1", labels={"suite": "core"})
    ns.add_snapshot("s0", labels={"suite": "core"})
    ns.add_snapshot("s2")
    expansion = ns.expand(
        spec(
            workloads=names("listed"),
            workloadSelector={"matchLabels": {"team": "a"}},
            snapshotSelector={"matchExpressions": [{"key": "suite", "operator": "Exists"}]},
            run={"judge": {"workloadRef": {"name": "judge"}}},
        )
    )
    assert expansion.workloads == ("listed", "m", "z")
    assert expansion.snapshots == ("s0", "s1")
    assert expansion.notes == ("Workload judge: selected but it is the run's judge: left out",)


def test_a_selector_selecting_nothing_waits(ns: Any) -> None:
    ns.add_snapshot("s")
    expansion = ns.expand(
        spec(workloadSelector={"matchLabels": {"team": "x"}}, snapshots=names("s"))
    )
    assert [(p.reason, p.message, p.missing) for p in expansion.problems] == [
        (WORKLOAD_NOT_FOUND, "spec.workloadSelector selects no Workload", True)
    ]


def test_a_baseline_not_among_the_selected_is_an_invalid_spec(ns: Any) -> None:
    ns.add_workload("a", endpoint=True, labels={"t": "1"})
    ns.add_snapshot("s")
    expansion = ns.expand(
        spec(workloadSelector={"matchLabels": {"t": "1"}}, snapshots=names("s"),
             baseline={"workload": "b"})
    )  # fmt: skip
    assert expansion.invalid
    assert [(p.reason, p.message) for p in expansion.problems] == [
        (INVALID_SPEC, "spec.baseline.workload: b is not among the sweep's Workloads (a)")
    ]


def test_too_many_selected_cells_is_an_invalid_spec_with_no_cells(ns: Any) -> None:
    for index in range(101):
        ns.add_workload(f"w{index:03}", endpoint=True, labels={"all": "1"})
    for index in range(10):
        ns.add_snapshot(f"s{index}")
    expansion = ns.expand(
        spec(workloadSelector={"matchLabels": {"all": "1"}}, snapshots=[
            {"name": f"s{index}"} for index in range(10)])
    )  # fmt: skip
    assert expansion.cells == () and expansion.invalid
    assert "1010 cells" in expansion.problems[0].message


def test_label_selector_semantics() -> None:
    from kyai.api.evaluationsweep import LabelSelector

    def sel(**fields: Any) -> LabelSelector:
        return LabelSelector.model_validate(fields)

    labels = {"team": "a", "tier": "gold"}
    assert matches(sel(), labels) and matches(sel(), {})
    assert matches(sel(matchLabels={"team": "a"}), labels)
    assert not matches(sel(matchLabels={"team": "b"}), labels)
    expr = [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]
    assert matches(sel(matchExpressions=expr), labels)
    assert not matches(sel(matchExpressions=expr), {"team": "a"})
    notin = [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]
    assert not matches(sel(matchExpressions=notin), labels)
    assert matches(sel(matchExpressions=notin), {"team": "a"})  # absent key: NotIn holds
    assert matches(sel(matchExpressions=[{"key": "team", "operator": "Exists"}]), labels)
    assert not matches(sel(matchExpressions=[{"key": "team", "operator": "DoesNotExist"}]), labels)
    assert matches(sel(matchExpressions=[{"key": "x", "operator": "DoesNotExist"}]), labels)


def test_names_follow_the_child_name_rule() -> None:
    digest = spec_hash({"sweep": "pick", "workload": "qwen", "engineArgsSet": "fp8-kv"})[:8]
    assert derived_workload_name("pick", "qwen", "fp8-kv") == f"qwen-fp8-kv-{digest}"
    # Pairs that would read alike, or the same pair in two sweeps, get different names.
    assert derived_workload_name("pick", "qwen-fp8", "kv") != derived_workload_name(
        "pick", "qwen", "fp8-kv"
    )
    assert derived_workload_name("a", "qwen", "x") != derived_workload_name("b", "qwen", "x")
    long = derived_workload_name("pick", "w" * 80, "s" * 40)
    assert len(long) == 63 and long.startswith("w" * 20)
    assert long == child_name("w" * 80 + "-" + "s" * 40, long[-9:], limit=63)


def test_run_names_are_deterministic_and_fit_in_63(ns: Any) -> None:
    ns.add_workload("a" * 60, endpoint=True)
    ns.add_snapshot("mmlu-pro")
    cell = ns.expand(spec(workloads=names("a" * 60), snapshots=names("mmlu-pro"))).cells[0]
    first = run_name("pick", cell)
    assert first == run_name("pick", cell) and len(first) <= 63
    assert first.endswith(f"-{cell.hash[:8]}")
    ns.add_workload("b", endpoint=True)
    other = ns.expand(spec(workloads=names("b"), snapshots=names("mmlu-pro"))).cells[0]
    assert run_name("pick", other) == f"pick-b-mmlu-pro-{other.hash[:8]}"
