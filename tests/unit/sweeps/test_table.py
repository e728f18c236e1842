"""The table: ranks, best, Pareto fronts, baseline comparisons and intervals, on hand-made
score vectors, checked against kyai.stats and kyai.leaderboard directly."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.ranking import Entry, pareto_front
from kyai.stats import StatsError, compare, ranks, score_interval
from kyai.sweeps import QUEUED, build_table, cell_states
from kyai.sweeps._memo import comparison, digest, forget, interval, tie_aware_ranks


def spec(**fields: Any) -> EvaluationSweepSpec:
    return EvaluationSweepSpec.model_validate(fields)


def names(*values: str) -> list[dict[str, str]]:
    return [{"name": value} for value in values]


def ones(k: int, n: int = 40) -> list[int]:
    """k questions right then n - k wrong (vectors of one key answer the same rows)."""
    return [1] * k + [0] * (n - k)


# On s: a 36/40, b 35/40 (wrong where a is, and once more), c 20/40.
# a vs b: 1 discordant (p = 1); a vs c and b vs c: 16 and 15 one-sided (p < 1e-4): 1, 1, 3.
# On t: a 30/40, b 38/40 (8 one-sided, p = 0.0078 < 0.05/3), c = a: 2, 1, 2.
VECTORS = {
    ("a", "s"): ones(36), ("b", "s"): ones(35), ("c", "s"): ones(20),
    ("a", "t"): ones(30), ("b", "t"): ones(38), ("c", "t"): ones(30),
}  # fmt: skip


def finished_sweep(ns: Any, **fields: Any) -> tuple[EvaluationSweepSpec, list[Any]]:
    for name in ("a", "b", "c"):
        ns.add_workload(name, endpoint=True)
    for name in ("s", "t"):
        ns.add_snapshot(name)
    sweep = spec(workloads=names("a", "b", "c"), snapshots=names("s", "t"), parallelism=6,
                 **fields)  # fmt: skip
    ns.step(sweep)
    for (workload, snapshot), scores in VECTORS.items():
        ns.succeed(ns.run_of(workload, snapshot), scores, key=f"key-{snapshot}")
    return sweep, cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())


def by_cell(table: Any) -> dict[tuple[str, str], Any]:
    return {(row.workload, row.snapshot): row for row in table.rows}


def test_ranks_are_kyai_stats_ranks_per_snapshot(ns: Any) -> None:
    sweep, states = finished_sweep(ns)
    table = build_table(sweep, ns.expand(sweep), states, final=True)
    rows = by_cell(table)
    for snapshot, expected in (("s", [1, 1, 3]), ("t", [2, 1, 2])):
        vectors = [VECTORS[(w, snapshot)] for w in ("a", "b", "c")]
        assert ranks(vectors) == expected  # the hand computation, checked by kyai.stats
        assert [rows[(w, snapshot)].rank for w in ("a", "b", "c")] == expected
    # Grouped by snapshot (the sweep's order), ranked, then by score.
    assert [(row.snapshot, row.workload) for row in table.rows] == [
        ("s", "a"), ("s", "b"), ("s", "c"), ("t", "b"), ("t", "a"), ("t", "c"),
    ]  # fmt: skip
    assert {row.comparison_key for row in table.rows if row.snapshot == "t"} == {"key-t"}


def test_best_is_ranked_one_on_every_snapshot(ns: Any) -> None:
    sweep, states = finished_sweep(ns)
    table = build_table(sweep, ns.expand(sweep), states, final=True)
    assert [(choice.workload, choice.engine_args_set) for choice in table.best or ()] == [
        ("b", None)
    ]
    # Before every cell ended, nothing is decided.
    assert build_table(sweep, ns.expand(sweep), states, final=False).best is None


def test_intervals_are_kyai_stats_intervals(ns: Any) -> None:
    sweep, states = finished_sweep(ns)
    table = build_table(sweep, ns.expand(sweep), states, final=True)
    for (workload, snapshot), row in by_cell(table).items():
        expected = score_interval(VECTORS[(workload, snapshot)])
        assert row.interval is not None
        assert (row.interval.low, row.interval.high) == (expected.low, expected.high)
        assert (row.interval.method, row.interval.confidence) == ("wilson", 0.95)
        assert row.avg_score == pytest.approx(sum(VECTORS[(workload, snapshot)]) / 40)


def test_baseline_delta_p_value_and_non_inferiority_are_kyai_stats_compare(ns: Any) -> None:
    sweep, states = finished_sweep(ns, baseline={"workload": "a"}, nonInferiorityMargin=0.12)
    rows = by_cell(build_table(sweep, ns.expand(sweep), states, final=True))
    for snapshot in ("s", "t"):
        assert rows[("a", snapshot)].baseline is True
        assert rows[("a", snapshot)].delta is None and rows[("a", snapshot)].p_value is None
        for workload in ("b", "c"):
            expected = compare(VECTORS[("a", snapshot)], VECTORS[(workload, snapshot)],
                               non_inferiority=0.12)  # fmt: skip
            row = rows[(workload, snapshot)]
            assert row.baseline is None
            assert row.delta == pytest.approx(expected.mean_difference)
            assert (row.p_value, row.test) == (expected.p_value, "mcnemar-exact")
            assert row.non_inferior is expected.non_inferior
            assert row.estimable is None  # 0/1 scores: always estimable
    # b is worse on 1 question of 40: Bonett-Price centres on -1/42 with SE 0.0411, so the
    # low end is -0.104, above -0.12 (not above -0.10); c's (d = -0.4) is not. On t, c
    # equals a on all 40 questions: ±0.066, not [0, 0].
    assert rows[("b", "s")].non_inferior is True
    assert rows[("c", "s")].non_inferior is False
    assert rows[("c", "t")].non_inferior is True
    strict = compare(VECTORS[("a", "s")], VECTORS[("b", "s")], non_inferiority=0.1)
    assert strict.interval is not None and strict.interval.low == pytest.approx(-0.1043, abs=1e-4)
    assert strict.non_inferior is False


def _sweep_of_two(ns: Any, base: list[float], cand: list[float], margin: float) -> Any:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b"), snapshots=names("s"), parallelism=2,
                 baseline={"workload": "a"}, nonInferiorityMargin=margin)  # fmt: skip
    ns.step(sweep)
    ns.succeed(ns.run_of("a", "s"), base, key="k")
    ns.succeed(ns.run_of("b", "s"), cand, key="k")
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    return build_table(sweep, ns.expand(sweep), states, final=True)


@pytest.mark.parametrize(
    ("questions", "margin", "expected", "reason"),
    [
        (3, 0.05, False, "interval low end -55.4 points, not above -5.0 (the margin), on 3 "
                         "paired questions"),
        (100, 0.05, True, None),
        (100, 0.02, False, "interval low end -2.7 points, not above -2.0 (the margin), on 100 "
                           "paired questions"),
    ],
)  # fmt: skip
def test_cells_that_agree_on_every_question_prove_only_what_their_size_allows(
    ns: Any, questions: int, margin: float, expected: bool, reason: str | None
) -> None:
    # The issue: no discordant question; 3 prove nothing, 100 leave about ±2.7 points.
    table = _sweep_of_two(ns, [0.0] * questions, [0.0] * questions, margin)
    row = by_cell(table)[("b", "s")]
    assert row.non_inferior is expected and row.estimable is None
    assert (row.delta, row.p_value, row.test) == (0.0, 1.0, "mcnemar-exact")
    # Issue 43: the difference's interval and n are in the row, and a "no" says why.
    truth = compare([0.0] * questions, [0.0] * questions, non_inferiority=margin)
    assert truth.interval is not None and row.delta_interval is not None
    assert (row.delta_interval.low, row.delta_interval.high) == (truth.interval.low,
                                                                 truth.interval.high)  # fmt: skip
    assert (row.delta_interval.method, row.paired_questions) == ("bonett-price", questions)
    assert row.non_inferior_reason == reason
    assert [r.rank for r in table.rows] == [1, 1]  # nothing separates them
    assert sorted(choice.workload for choice in table.best or ()) == ["a", "b"]


@pytest.mark.parametrize("questions", [3, 100])
def test_continuous_cells_that_differ_equally_everywhere_get_no_verdict(
    ns: Any, questions: int
) -> None:
    from kyai.api.evaluationsweep import EvaluationSweepStatus
    from kyai.sweep_board import NOT_ESTIMABLE, SweepBoard, render_json, render_table

    base = [0.25 + (i % 3) / 4 for i in range(questions)]
    table = _sweep_of_two(ns, base, [s + 0.1 for s in base], 0.05)
    row = by_cell(table)[("b", "s")]
    assert row.estimable is False and row.non_inferior is None and row.p_value is None
    assert row.delta == pytest.approx(0.1) and row.test == "paired-t"
    assert "no verdict against the baseline: every one of" in (row.note or "")
    assert "cannot be estimated" in (row.note or "")
    # 0.1 better on every question, but no test could be made: the same rank, both best.
    assert [r.rank for r in table.rows] == [1, 1]
    assert sorted(choice.workload for choice in table.best or ()) == ["a", "b"]
    # Shown as n/a (never "yes") in the P-VALUE and NON-INFERIOR columns, the note saying why.
    board = SweepBoard("evals", "pick", EvaluationSweepStatus(table=list(table.rows)),
                       table.rows)  # fmt: skip
    printed = render_table(board).splitlines()
    line = next(text for text in printed if text.startswith("1 ") and " b " in text)
    columns = re.split(r"\s{2,}", line)  # DELTA, its interval, n, P-VALUE, NON-INFERIOR
    delta = columns.index("+0.1000")
    assert columns[delta + 1 : delta + 5] == [NOT_ESTIMABLE, str(questions), NOT_ESTIMABLE,
                                              NOT_ESTIMABLE], line  # fmt: skip
    assert "yes" not in columns and "cannot be estimated" in line
    data = [r for r in json.loads(render_json(board))["rows"] if r["workload"] == "b"]
    assert data[0]["estimable"] is False and "nonInferior" not in data[0]


def test_an_engine_args_baseline_compares_within_each_workload(ns: Any) -> None:
    ns.add_workload("q")
    ns.add_workload("r")
    ns.add_engine_args_set("default")
    ns.add_engine_args_set("fast")
    ns.add_snapshot("s")
    sweep = spec(
        workloads=names("q", "r"),
        engineArgsSets=names("default", "fast"),
        snapshots=names("s"),
        parallelism=4,
        baseline={"engineArgsSet": "default"},
    )
    ns.step(sweep)
    scores = {("q", "default"): ones(30), ("q", "fast"): ones(29), ("r", "default"): ones(20),
              ("r", "fast"): ones(21)}  # fmt: skip
    for (workload, eas), vector in scores.items():
        ns.succeed(ns.run_of(workload, "s", eas), vector, key="k")
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    table = build_table(sweep, ns.expand(sweep), states, final=True)
    rows = {(r.workload, r.engine_args_set): r for r in table.rows}
    assert rows[("q", "default")].baseline and rows[("r", "default")].baseline
    assert rows[("q", "fast")].delta == pytest.approx(-1 / 40)
    assert rows[("r", "fast")].delta == pytest.approx(1 / 40)
    assert rows[("r", "fast")].non_inferior is None  # no margin given


def test_a_row_carries_the_engine_args_hash_its_run_recorded(ns: Any) -> None:
    # Issue 43: the derived Workload is gone once its cell ended; the run's status holds the
    # hash of the EngineArgsSet that served it.
    ns.add_workload("q")
    ns.add_engine_args_set("fast")
    ns.add_snapshot("s")
    sweep = spec(workloads=names("q"), engineArgsSets=names("fast"), snapshots=names("s"))
    ns.step(sweep)
    ns.succeed(ns.run_of("q", "s", "fast"), ones(30), engineArgsSet="fast",
               engineArgsHash="0123456789abcdef")  # fmt: skip
    for workload in ns.derived():
        ns.gone(workload["metadata"]["name"])
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    (row,) = build_table(sweep, ns.expand(sweep), states, final=True).rows
    assert (row.engine_args_set, row.engine_args_hash) == ("fast", "0123456789abcdef")


def test_a_baseline_of_another_comparison_key_gives_no_delta(ns: Any) -> None:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b"), snapshots=names("s"), parallelism=2,
                 baseline={"workload": "a"})  # fmt: skip
    ns.step(sweep)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="old-judge")
    ns.succeed(ns.run_of("b", "s"), ones(31), key="new-judge")
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    rows = by_cell(build_table(sweep, ns.expand(sweep), states, final=True))
    assert rows[("b", "s")].delta is None
    assert "another comparison key" in (rows[("b", "s")].note or "")
    # Each key is its own ranking.
    assert (rows[("a", "s")].rank, rows[("b", "s")].rank) == (1, 1)


def test_unfinished_and_unscored_cells(ns: Any) -> None:
    for name in ("a", "b", "c", "d"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b", "c", "d"), snapshots=names("s"), parallelism=3)
    ns.step(sweep)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    ns.succeed(ns.run_of("b", "s"), ones(20), key="k", keep_scores=False)
    ns.set_phase(ns.run_of("c", "s"), "Judging")
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    rows = by_cell(build_table(sweep, ns.expand(sweep), states, final=False))
    assert rows[("a", "s")].rank == 1
    assert rows[("b", "s")].rank is None and rows[("b", "s")].interval is None
    assert "per-question scores" in (rows[("b", "s")].note or "")
    assert rows[("b", "s")].avg_score == pytest.approx(0.5)
    assert (rows[("c", "s")].phase, rows[("c", "s")].avg_score) == ("Judging", None)
    assert (rows[("d", "s")].phase, rows[("d", "s")].run) == (QUEUED, None)


def test_ranks_of_vectors_of_different_lengths_are_refused_with_a_note(ns: Any) -> None:
    for name in ("a", "b"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b"), snapshots=names("s"), parallelism=2)
    ns.step(sweep)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    ns.succeed(ns.run_of("b", "s"), ones(30, n=41), key="k")
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    rows = by_cell(build_table(sweep, ns.expand(sweep), states, final=True))
    assert rows[("a", "s")].rank is None and rows[("b", "s")].rank is None
    assert "no rank: the baseline has 40 scores and the candidate 41" in (
        rows[("a", "s")].note or ""
    )


# -- what runs will report: status.serving, status.avgScoreInterval ------------------------------


def test_serving_figures_and_the_pareto_front(ns: Any) -> None:
    workloads = ("fast-good", "slow-best", "slow-worse", "fastest-bad", "unknown")
    for name in workloads:
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names(*workloads), snapshots=names("s"), parallelism=5)
    ns.step(sweep)
    figures = {"fast-good": (28, 100.0), "slow-best": (32, 300.0), "slow-worse": (28, 200.0),
               "fastest-bad": (16, 50.0), "unknown": (36, None)}  # fmt: skip
    for name, (right, ttft) in figures.items():
        serving = None if ttft is None else {"ttftP50Ms": ttft, "outputTokensPerSecond": 900.0}
        ns.succeed(ns.run_of(name, "s"), ones(right), key="k", serving=serving)
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    table = build_table(sweep, ns.expand(sweep), states, final=True)
    rows = by_cell(table)
    assert rows[("fast-good", "s")].ttft_p50_ms == 100.0
    assert rows[("fast-good", "s")].output_tokens_per_second == 900.0
    entries = [
        Entry(namespace="", run=name, workload=name, model="", framework="",
              engine_args_set="", dataset="", comparison_key="k", avg_score=right / 40,
              avg_latency_ms=None, error_count=0, questions=40, completed_at=None,
              ttft_p50_ms=ttft)
        for name, (right, ttft) in figures.items()
    ]  # fmt: skip
    expected = pareto_front(entries)
    assert expected == [True, True, False, True, None]
    assert [rows[(name, "s")].pareto for name in workloads] == expected
    (front,) = table.pareto
    assert (front.snapshot, front.comparison_key) == ("s", "k")
    assert [choice.workload for choice in front.front] == ["fast-good", "slow-best", "fastest-bad"]


def test_a_stored_interval_is_used_as_it_is(ns: Any) -> None:
    ns.add_workload("a", endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a"), snapshots=names("s"))
    ns.step(sweep)
    stored = {"low": 0.1, "high": 0.9, "standard_error": 0.2, "confidence": 0.95, "method": "t"}
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k", avgScoreInterval=stored)
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    (row,) = build_table(sweep, ns.expand(sweep), states, final=True).rows
    assert row.interval is not None
    assert (row.interval.low, row.interval.high, row.interval.method) == (0.1, 0.9, "t")


# -- the remembered statistics -------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_tie_aware_ranks_equal_kyai_stats_ranks(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(2, 7)
    quality = [rng.random() for _ in range(size)]
    binary = seed % 2 == 0
    vectors = [
        [float(rng.random() < q) if binary else round(rng.random() * q, 3) for _ in range(30)]
        for q in quality
    ]
    forget()
    assert tie_aware_ranks(vectors) == ranks(vectors)
    assert tie_aware_ranks(vectors) == ranks(vectors)  # remembered: the same


def test_remembered_figures_are_kyai_stats_figures() -> None:
    forget()
    a, b = ones(30), ones(25)
    assert interval(a) == score_interval(a)
    assert comparison(a, b, margin=0.1) == compare(a, b, non_inferiority=0.1)
    assert comparison(a, b) != comparison(b, a)  # order matters
    assert digest([1.0, 0.0]) != digest([0.0, 1.0])
    assert tie_aware_ranks([a]) == [1] == ranks([a])
    with pytest.raises(StatsError):
        tie_aware_ranks([[1.0]])
    with pytest.raises(StatsError):
        tie_aware_ranks([[1.0, 0.0], [1.5, 0.0]])


def test_a_failed_cell_says_why_with_its_runs_reason_and_message(ns: Any) -> None:
    for name in ("a", "b", "c"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names("a", "b", "c"), snapshots=names("s"), parallelism=3)
    ns.step(sweep)
    ns.succeed(ns.run_of("a", "s"), ones(30), key="k")
    said = "judge type builtin: deterministic graders exist only for built-in datasets"
    when = "2025-01-01T00:00:00Z"
    ns.runs[ns.run_of("b", "s")]["status"] = {
        "phase": "Failed",
        "message": said,
        "conditions": [
            {
                "type": kind,
                "status": "False",
                "reason": "InvalidSpec",
                "message": said,
                "lastTransitionTime": when,
            }
            for kind in ("Progressing", "Ready")
        ],
    }
    ns.fail(ns.run_of("c", "s"))  # no conditions: its status.message
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    rows = by_cell(build_table(sweep, ns.expand(sweep), states, final=True))
    assert rows[("b", "s")].note == f"failed: InvalidSpec: {said}"
    assert rows[("c", "s")].note == "failed: the generation Job failed"
    assert rows[("a", "s")].note is None
    # A message longer than a status row should hold is cut, and says so.
    long = "x" * 2000
    ns.runs[ns.run_of("b", "s")]["status"]["conditions"][1]["message"] = long
    states = cell_states(ns.sweep, ns.expand(sweep), ns.sweep_runs())
    note = by_cell(build_table(sweep, ns.expand(sweep), states, final=True))[("b", "s")].note
    assert note is not None and note.startswith("failed: InvalidSpec: xxx")
    assert len(note) < 520 and note.endswith("…")
