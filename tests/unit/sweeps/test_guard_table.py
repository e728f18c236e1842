"""The sweep's baseline column when the comparison cannot be made, and Ready while the spec
names what is missing or invalid (issue 36's mutation pass)."""

from __future__ import annotations

from typing import Any

from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.sweeps import build_table, cell_states


def names(*values: str) -> list[dict[str, str]]:
    return [{"name": value} for value in values]


def ones(k: int, n: int = 40) -> list[int]:
    return [1] * k + [0] * (n - k)


def two_cells(ns: Any, **fields: Any) -> EvaluationSweepSpec:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = EvaluationSweepSpec.model_validate(
        {"workloads": names("a", "b"), "snapshots": names("s"), "parallelism": 2,
         "baseline": {"workload": "a"}, **fields}
    )  # fmt: skip
    ns.step(sweep)
    return sweep


def final_table(ns: Any, sweep: EvaluationSweepSpec) -> Any:
    """The sweep's table once every cell is done."""
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    return build_table(sweep, ns.expand(sweep), states, final=True)


def row_b(ns: Any, sweep: EvaluationSweepSpec) -> Any:
    (row,) = [row for row in final_table(ns, sweep).rows if row.workload == "b"]
    return row


def test_without_per_question_scores_the_delta_is_the_difference_of_scores(ns: Any) -> None:
    sweep = two_cells(ns)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    ns.succeed(ns.run_of("b", "s"), ones(20), key="k", keep_scores=False)
    row = row_b(ns, sweep)
    assert row.delta == -0.25  # 0.5 - 0.75
    assert row.p_value is None and row.test is None
    notes = (row.note or "").split("; ")
    assert "no paired test: no per-question scores (summary.json 'scores', status.scores or " \
        "status.scoresPacked)" in notes  # fmt: skip
    assert len(notes) == 2  # the rank's note is kept beside it


def test_a_baseline_cell_without_a_score_yet_is_said(ns: Any) -> None:
    sweep = two_cells(ns)
    ns.set_phase(ns.run_of("a", "s"), "Judging")
    ns.succeed(ns.run_of("b", "s"), ones(20), key="k")
    row = row_b(ns, sweep)
    assert row.delta is None
    assert row.note == "the baseline cell has no score (yet)"


def test_vectors_of_other_lengths_get_no_paired_test_and_say_why(ns: Any) -> None:
    sweep = two_cells(ns)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    ns.succeed(ns.run_of("b", "s"), ones(30, n=41), key="k")
    row = row_b(ns, sweep)
    assert row.p_value is None and row.delta is not None
    notes = (row.note or "").split("; ")
    assert notes[-1] == "no paired test: the baseline has 40 scores and the candidate 41: a " \
        "paired comparison needs the same questions"  # fmt: skip
    assert notes[0].startswith("no rank: ")


def test_a_cell_whose_baseline_key_differs_keeps_its_rank_note(ns: Any) -> None:
    sweep = two_cells(ns)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="old-judge")
    ns.succeed(ns.run_of("b", "s"), ones(31, n=41), key="new-judge", keep_scores=False)
    row = row_b(ns, sweep)
    assert (row.note or "").split("; ")[-1] == (
        "the baseline cell has another comparison key: no delta"
    )
    assert len((row.note or "").split("; ")) == 2


def test_a_sweep_naming_something_missing_or_invalid_is_not_ready(ns: Any) -> None:
    ns.add_workload("a", endpoint=True)
    ns.add_snapshot("s")
    missing = EvaluationSweepSpec.model_validate(
        {"workloads": names("a", "gone"), "snapshots": names("s"), "parallelism": 1}
    )
    ns.step(missing)
    ns.succeed(ns.run_of("a", "s"), [1, 0], key="k")
    assert ns.status(missing).ready is False
    ns.workloads["a"]["metadata"]["labels"] = {"t": "1"}
    invalid = EvaluationSweepSpec.model_validate(
        {"workloadSelector": {"matchLabels": {"t": "1"}}, "snapshots": names("s"),
         "baseline": {"workload": "nope"}}
    )  # fmt: skip
    report = ns.status(invalid)
    assert (report.ready, report.stalled) == (False, True)


def test_a_sweep_that_waits_or_runs_is_not_stalled_and_says_what_it_waits_for(ns: Any) -> None:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = EvaluationSweepSpec.model_validate(
        {"workloads": names("a", "b"), "snapshots": names("s"), "parallelism": 1}
    )
    pending = ns.status(sweep, waiting=("first", "second"))
    assert (pending.ready, pending.stalled) == (False, False)
    assert pending.message.endswith("; first; second")
    ns.step(sweep)
    running = ns.status(sweep)
    assert (running.status.phase, running.ready, running.stalled) == ("Running", False, False)


def test_exactly_64_rows_stay_in_the_status_and_20_notes_are_all_shown(ns: Any) -> None:
    workloads = [f"w{index:02}" for index in range(64)]
    for name in workloads:
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = EvaluationSweepSpec.model_validate(
        {"workloads": names(*workloads), "snapshots": names("s"), "parallelism": 64}
    )
    ns.step(sweep)
    for name in workloads:
        ns.succeed(ns.run_of(name, "s"), [1, 0], key="k")
    report = ns.status(sweep)
    assert report.status.table_rows == 64 and report.status.table_config_map is None
    assert report.config_map is None
    assert report.status.pareto == []  # no TTFT measured: nothing on the front
    twenty = [f"gone{index:02}" for index in range(20)]
    missing = EvaluationSweepSpec.model_validate(
        {"workloads": names(*twenty), "snapshots": names("s")}
    )
    notes = ns.status(missing).status.notes
    assert notes == [f"the Workload {name} (spec.workloads) does not exist" for name in twenty]


def _served(ns: Any, *workloads: str) -> None:
    for name in workloads:
        ns.add_workload(name, model="Qwen/Qwen2.5-7B-Instruct")
    for name in ("e1", "e2"):
        ns.add_engine_args_set(name)


def set_sweep(ns: Any, baseline: dict[str, str], parallelism: int) -> EvaluationSweepSpec:
    """Workloads a and b (added beforehand) times the sets e1 and e2 on a snapshot s, stepped."""
    ns.add_snapshot("s")
    sweep = EvaluationSweepSpec.model_validate(
        {"workloads": names("a", "b"), "engineArgsSets": names("e1", "e2"),
         "snapshots": names("s"), "parallelism": parallelism, "baseline": baseline}
    )  # fmt: skip
    ns.step(sweep)
    return sweep


def deltas(table: Any) -> dict[tuple[str, str | None], float | None]:
    return {(row.workload, row.engine_args_set): row.delta for row in table.rows}


def test_a_workload_baseline_with_several_sets_compares_set_with_set(ns: Any) -> None:
    _served(ns, "a", "b")
    sweep = set_sweep(ns, {"workload": "a"}, parallelism=4)
    scores = {("a", "e1"): 30, ("a", "e2"): 20, ("b", "e1"): 31, ("b", "e2"): 25}
    for (workload, flags), right in scores.items():
        ns.succeed(ns.run_of(workload, "s", flags), ones(right), key="k")
    table = final_table(ns, sweep)
    found = deltas(table)
    assert found[("b", "e1")] == 1 / 40 and found[("b", "e2")] == 5 / 40
    # The best cells are named with their EngineArgsSet.
    assert table.best and {choice.engine_args_set for choice in table.best} <= {"e1", "e2"}


def test_an_endpoint_baseline_is_the_baseline_of_every_set(ns: Any) -> None:
    ns.add_workload("a", endpoint=True)
    _served(ns, "b")
    sweep = set_sweep(ns, {"workload": "a"}, parallelism=3)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    for flags, right in (("e1", 31), ("e2", 25)):
        ns.succeed(ns.run_of("b", "s", flags), ones(right), key="k")
    found = deltas(final_table(ns, sweep))
    assert found[("b", "e1")] == 1 / 40 and found[("b", "e2")] == -5 / 40


def test_a_cell_without_the_named_baseline_set_says_so(ns: Any) -> None:
    # An endpoint Workload has no EngineArgsSet cell: nothing to compare it with.
    ns.add_workload("a", endpoint=True)
    _served(ns, "b")
    sweep = set_sweep(ns, {"engineArgsSet": "e1"}, parallelism=3)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    for flags in ("e1", "e2"):
        ns.succeed(ns.run_of("b", "s", flags), ones(30), key="k")
    (row,) = [row for row in final_table(ns, sweep).rows if row.workload == "a"]
    assert row.delta is None
    assert row.note == (
        "endpoint Workload: engine-args sets do not apply (one cell without a set); no baseline "
        "cell"
    )


def test_a_cell_with_a_stored_interval_but_no_scores_says_why_it_has_no_rank(ns: Any) -> None:
    sweep = two_cells(ns)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    stored = {"low": 0.3, "high": 0.7, "standardError": 0.1, "confidence": 0.95, "method": "t"}
    ns.succeed(ns.run_of("b", "s"), ones(20), key="k", keep_scores=False, avgScoreInterval=stored)
    row = row_b(ns, sweep)
    assert row.rank is None and row.interval is not None
    assert (row.note or "").split("; ")[0] == (
        "no rank: no per-question scores (summary.json 'scores', status.scores or "
        "status.scoresPacked)"
    )


def test_a_remembered_comparison_is_made_at_its_level() -> None:
    from kyai.sweeps import _memo

    # Right on 5 questions the other missed: exact McNemar p = 0.0625.
    base, cand = [0.0] * 5 + [1.0] * 2, [1.0] * 7
    _memo.forget()
    assert _memo.comparison(base, cand, alpha=0.10).significant is True
    assert _memo.comparison(base, cand, alpha=0.05).significant is False


def test_a_row_names_its_run_and_says_it_waits_for_quota(ns: Any) -> None:
    sweep = two_cells(ns)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    waiting = ns.run_of("b", "s")
    ns.runs[waiting]["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "WaitingForQuota",
             "message": "queue team-q has no quota left"},
        ],
    }  # fmt: skip
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    rows = {
        row.workload: row for row in build_table(sweep, ns.expand(sweep), states, final=False).rows
    }
    assert rows["a"].run == ns.run_of("a", "s")
    assert (rows["b"].run, rows["b"].note) == (
        waiting,
        "WaitingForQuota: queue team-q has no quota left",
    )
