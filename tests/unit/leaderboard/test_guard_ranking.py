"""kyai.ranking's boards: the level reaches them, the Pareto front at equal TTFT, what an entry
holds when a run's status leaves fields out, and the refusals name both runs (issue 36's
mutation pass)."""

from __future__ import annotations

from typing import Any

import pytest

from kyai.ranking import NO_SCORES, Entry, SummaryError, entry_from_run, pareto_front, rank
from kyai.stats import Interval

# The candidate is right on 5 questions the baseline missed: exact McNemar p = 2/32 = 0.0625,
# significant at α = 0.10, not at 0.05 (tests/unit/stats/test_levels.py).
BASELINE = (0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0)
CANDIDATE = (1.0,) * 7


def entry(
    run: str, scores: tuple[float, ...] | None, *, ttft: float | None = None, **extra: Any
) -> Entry:
    fields: dict[str, Any] = {
        "namespace": "ns", "run": run, "workload": "w", "model": run, "framework": "vllm",
        "engine_args_set": "", "dataset": "d", "comparison_key": "k",
        "avg_score": 0.0 if not scores else sum(scores) / len(scores), "avg_latency_ms": 10.0,
        "error_count": 0, "questions": None if scores is None else len(scores),
        "completed_at": None, "ttft_p50_ms": ttft, "scores": scores, "source": f"src-{run}",
    }  # fmt: skip
    fields.update(extra)
    return Entry(**fields)


@pytest.mark.parametrize(("alpha", "ranks"), [(0.10, [1, 2]), (0.05, [1, 1])])
def test_the_board_ranks_at_the_level_given(alpha: float, ranks: list[int]) -> None:
    (board,) = rank([entry("base", BASELINE), entry("cand", CANDIDATE)], alpha=alpha)
    assert board.alpha == alpha
    assert [(place.entry.run, place.rank) for place in board.places] == list(
        zip(["cand", "base"], ranks, strict=True)
    )


def test_a_run_right_on_every_question_the_other_missed_ranks_above_it() -> None:
    (board,) = rank([entry("none", (0.0,) * 7), entry("all", (1.0,) * 7)])
    assert [(place.entry.run, place.rank) for place in board.places] == [("all", 1), ("none", 2)]


def test_runs_of_one_question_keep_their_stored_interval() -> None:
    stored = Interval(0.1, 0.9, 0.2, 0.95, "t")
    (board,) = rank([entry("a", (1.0,), stored_interval=stored), entry("b", (0.0,))])
    by_run = {place.entry.run: place for place in board.places}
    assert by_run["a"].interval == stored and by_run["b"].interval is None
    assert by_run["a"].rank is None
    assert (by_run["a"].rank_unavailable or "").startswith("no rank: run #0: 1 question(s)")


def test_a_better_score_at_the_same_ttft_dominates() -> None:
    better = entry("better", None, ttft=100.0, avg_score=0.8)
    worse = entry("worse", None, ttft=100.0, avg_score=0.6)
    assert pareto_front([better, worse]) == [True, False]


def test_runs_of_other_rows_are_refused_naming_both() -> None:
    sha = [entry(run, BASELINE, dataset_sha256=run * 8) for run in ("a", "b")]
    with pytest.raises(SummaryError) as error:
        rank(sha)
    assert str(error.value) == (
        "comparison key k: the dataset sha256 is aaaaaaaa in src-a and bbbbbbbb in src-b; runs "
        "of one key must answer the same rows, so they are not ranked"
    )
    ids = [entry(run, BASELINE, row_ids=tuple(f"{run}{i}" for i in range(7))) for run in "ab"]
    with pytest.raises(SummaryError) as error:
        rank(ids)
    assert str(error.value) == (
        "comparison key k: row 0 is row_id 'a0' in src-a and 'b0' in src-b; runs of one key "
        "must answer the same rows, so they are not ranked"
    )
    counts = [entry("a", BASELINE), entry("b", BASELINE[:6])]
    with pytest.raises(SummaryError) as error:
        rank(counts)
    assert str(error.value) == (
        "comparison key k: src-a holds 7 per-question scores and src-b 6; runs of one key must "
        "answer the same rows, so they are not ranked"
    )


def test_a_failed_run_with_a_score_is_no_entry() -> None:
    failed = {
        "metadata": {"namespace": "team-a", "name": "r"},
        "spec": {"workloadRef": {"name": "qwen"}},
        "status": {"phase": "Failed", "avgScore": 0.5, "comparisonKey": "k"},
    }
    assert entry_from_run(failed) is None


def test_an_entry_from_a_run_whose_status_leaves_fields_out() -> None:
    """No model, framework, dataset, errorCount or Workload: empty, zero, never invented."""
    run = {
        "metadata": {"namespace": "team-a", "name": "rejudge"},
        "spec": {},
        "status": {"phase": "Succeeded", "avgScore": 0.5, "comparisonKey": "k"},
    }
    found = entry_from_run(run)
    assert found is not None
    assert (found.model, found.framework, found.dataset, found.workload) == ("", "", "", "")
    assert (found.engine_args_set, found.error_count) == ("", 0)
    assert found.source == "EvaluationRun team-a/rejudge"
    assert found.scores is None and found.scores_unavailable is not None
    (board,) = rank([found])
    assert board.places[0].rank_unavailable == found.scores_unavailable != NO_SCORES
